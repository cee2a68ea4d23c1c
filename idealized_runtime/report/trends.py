"""Provider monitoring in the report: ``trends.html``, per provider and model the rounds of a
chosen window over time (denoised runtime with the idealized runtime as the reference line,
TTFT, ITL, output speed, error rate), each flagged shift marked where it began and where it
was flagged, and the window's medians with their 10th-90th percentile spread.

The window ends at the newest round (so that a report of old rounds still shows them) and
reaches back ``window`` (None: every round). Shifts are those of the whole series
(``trends.series``): one flagged inside the window is shown, its baseline may lie before it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape
from pathlib import Path

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.rounds import ROUND_STATISTICS, RoundPoint, round_time
from idealized_runtime.report.svg import PALETTE, Axes, _svg
from idealized_runtime.trends.series import STATISTICS, Change, ProviderSeries, Spread

TRENDS_HTML_NAME = "trends.html"
WINDOW_UNITS = {"m": 60, "h": 3600, "d": 86400}
CHANGE_COLOUR = "#D55E00"
REFERENCE_COLOUR = "#009E73"
LABELS = {statistic.name: statistic.label for statistic in STATISTICS}
LEGEND_CHAR_PX = 5.6  # a legend's 10 px text, per character
# (statistic, axis label, scale to the unit shown, reference statistic drawn beside it)
CHARTS = (
    ("denoised_runtime_s", "runtime (s)", 1.0, "idealized_runtime_s"),
    ("ttft_s", "TTFT p50 (ms)", 1000.0, None),
    ("itl_s", "ITL p50 (ms)", 1000.0, None),
    ("output_tokens_per_s", "output speed (tokens/s)", 1.0, None),
    ("error_rate", "error rate (%)", 100.0, None),
)
# The lowest top of a chart's value axis, in the unit shown: an error rate of 0 still reads
# as percent (0-10 %), not as a fraction (0-1).
AXIS_TOP_AT_LEAST = {"error_rate": 10.0}
REFERENCE_LEGEND = "idealized (reference)"


def parse_window(text: str) -> timedelta | None:
    """``72h``, ``30m``, ``7d`` or ``all`` (None); InputError otherwise."""
    text = text.strip().lower()
    if text == "all":
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([mhd])", text)
    if not match or float(match.group(1)) <= 0:
        raise InputError(
            f"--window must be a duration such as 30m, 72h or 7d, or all; got {text!r}"
        )
    return timedelta(seconds=float(match.group(1)) * WINDOW_UNITS[match.group(2)])


def window_bounds(
    series: Sequence[ProviderSeries], window: timedelta | None
) -> tuple[datetime | None, datetime | None]:
    """The window: ``window`` back from the newest round of any series, or from the first round
    if that is later."""
    times = [point.started_at for item in series for point in item.points]
    if not times:
        return None, None
    end = max(times)
    # A window longer than the rounds starts at the first round: no empty half of a chart.
    return (max(end - window, min(times)) if window is not None else min(times)), end


def _time_axis(start: datetime, end: datetime) -> tuple[float, str]:
    """Seconds per unit of the x axis and its label: minutes for short windows, else hours."""
    span = (end - start).total_seconds()
    unit, name = (60.0, "minutes") if span <= 3 * 3600 else (3600.0, "hours")
    return unit, f"{name} since {round_time(start)}"


def _value_text(statistic: str, value: float | None) -> str:
    if value is None:
        return "–"
    if statistic in ("ttft_s", "itl_s"):
        return f"{value * 1000:.3g} ms"
    if statistic in ("denoised_runtime_s", "idealized_runtime_s"):
        return f"{value:.3g} s"
    if statistic == "discrepancy":
        return f"{value:.3g}x"
    if statistic == "error_rate":
        return f"{value:.1%}"
    if statistic == "usd":
        return f"${value:.3g}"
    return f"{value:.3g}"


def _change_text(change: Change) -> str:
    return (
        f"{LABELS[change.statistic]} {change.direction} {change.relative:+.0%} "
        f"({_value_text(change.statistic, change.before)} → "
        f"{_value_text(change.statistic, change.after)}): began round {change.start_round_index} "
        f"({round_time(change.start_at)}), flagged round {change.round_index} "
        f"({round_time(change.at)})"
    )


def trend_chart(
    item: ProviderSeries,
    statistic: str,
    label: str,
    scale: float,
    reference: str | None,
    bounds: tuple[datetime, datetime],
    chart_id: str,
) -> str:
    """One statistic of one series over the window: the rounds as a line with points, the
    reference as a dashed line, each shift of the statistic as a vertical line where it was
    flagged and a triangle where it began."""
    start, end = bounds
    unit, x_label = _time_axis(start, end)

    def x_of(moment: datetime) -> float:
        return (moment - start).total_seconds() / unit

    def values(name: str) -> list[tuple[float, float, RoundPoint]]:
        return [
            (x_of(p.started_at), getattr(p, name) * scale, p)
            for p in item.points
            if getattr(p, name) is not None
        ]

    measured = values(statistic)
    ideal = values(reference) if reference else []
    changes = [c for c in item.changes if c.statistic == statistic]
    ys = [y for _, y, _ in measured + ideal] + [AXIS_TOP_AT_LEAST.get(statistic, 0.0)]
    axes = Axes.fit([x_of(end)], ys)
    title = f"{item.provider} / {item.model}: {LABELS[statistic]}"
    parts = axes.frame(title, x_label, label)
    if ideal:
        d = "M" + " L".join(f"{axes.x(x):.1f},{axes.y(y):.1f}" for x, y, _ in ideal)
        parts.append(
            f'<path class="mark reference-line" d="{d}" fill="none" stroke="{REFERENCE_COLOUR}" '
            f'stroke-width="1.6" stroke-dasharray="6 3"><title>idealized runtime: '
            f"{escape(item.reference or '')}</title></path>"
        )
    if measured:
        d = "M" + " L".join(f"{axes.x(x):.1f},{axes.y(y):.1f}" for x, y, _ in measured)
        parts.append(
            f'<path class="mark trend-line" d="{d}" fill="none" stroke="{PALETTE[0]}" '
            f'stroke-width="1.3"/>'
        )
    for x, y, point in measured:
        tip = f"round {point.round_index}, {round_time(point.started_at)}: " + _value_text(
            statistic, getattr(point, statistic)
        )
        parts.append(
            f'<circle class="mark point" cx="{axes.x(x):.1f}" cy="{axes.y(y):.1f}" r="2.2" '
            f'fill="{PALETTE[0]}"><title>{escape(tip)}</title></circle>'
        )
    top, bottom = axes.y(axes.y_ticks[-1]), axes.y(axes.y_ticks[0])
    for change in changes:
        tip = escape(_change_text(change))
        flagged = axes.x(x_of(change.at))
        parts.append(
            f'<line class="mark change" data-statistic="{statistic}" x1="{flagged:.1f}" '
            f'x2="{flagged:.1f}" y1="{top:.1f}" y2="{bottom:.1f}" stroke="{CHANGE_COLOUR}" '
            f'stroke-width="1.5" stroke-dasharray="4 2"><title>{tip}</title></line>'
        )
        began = axes.x(x_of(change.start_at))
        parts.append(
            f'<path class="mark change-start" d="M{began:.1f},{bottom:.1f} l-5,9 h10 z" '
            f'fill="{CHANGE_COLOUR}"><title>{tip}</title></path>'
        )
    if ideal:
        lines = [[(axes.x(x), axes.y(y)) for x, y, _ in line] for line in (measured, ideal)]
        x, y = legend_place(lines, REFERENCE_LEGEND, axes)
        parts.append(
            f'<text class="legend" x="{x:.1f}" y="{y:.1f}" fill="{REFERENCE_COLOUR}">'
            f"{REFERENCE_LEGEND}</text>"
        )
    return _svg(parts, title, chart_id)


def legend_place(
    lines: Sequence[Sequence[tuple[float, float]]], text: str, axes: Axes
) -> tuple[float, float]:
    """Where a legend line goes in a chart (x, baseline): the first corner of the plot whose
    box no drawn line passes through (the lines sampled between their points), else under
    the plot, left of the axis label."""
    samples = [point for line in lines for point in line]
    for line in lines:
        for (x1, y1), (x2, y2) in itertools.pairwise(line):
            samples += [(x1 + (x2 - x1) * i / 8, y1 + (y2 - y1) * i / 8) for i in range(1, 8)]
    width, height = LEGEND_CHAR_PX * len(text), 12.0
    left, right = axes.x(axes.x_ticks[0]), axes.x(axes.x_ticks[-1])
    top, bottom = axes.y(axes.y_ticks[-1]), axes.y(axes.y_ticks[0])
    corners = (
        (left + 6, top + 14),
        (right - 6 - width, top + 14),
        (right - 6 - width, bottom - 6),
        (left + 6, bottom - 6),
    )
    for x, baseline in corners:
        box = (x - 3, baseline - height - 1, x + width + 3, baseline + 4)
        if not any(box[0] <= sx <= box[2] and box[1] <= sy <= box[3] for sx, sy in samples):
            return x, baseline
    return left, bottom + 38  # the x axis label's row, at its left


def _spread_text(statistic: str, spread: Spread) -> str:
    if spread.median is None:
        return "–"
    return (
        f"{_value_text(statistic, spread.median)} "
        f"[{_value_text(statistic, spread.p10)}–{_value_text(statistic, spread.p90)}]"
    )


# The round statistics in their table order; the error rate has its own column (failed requests).
SUMMARY_STATISTICS = tuple(name for name in ROUND_STATISTICS if name != "error_rate")


def _summary_rows(series: Sequence[ProviderSeries], bounds: tuple[datetime, datetime]) -> str:
    rows = []
    for item in series:
        window = item.window(*bounds)
        errors = window.failed_requests / window.requests if window.requests else None
        cells = [
            item.provider,
            item.model,
            f"{window.rounds} ({window.failed_rounds} failed, {window.degraded_rounds} degraded)",
            *(_spread_text(name, window.statistics[name]) for name in SUMMARY_STATISTICS),
            "–" if errors is None else f"{errors:.1%}",
            f"${window.usd_total:.4g}",
            str(len(item.between(*bounds).changes)),
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    return "".join(rows)


def _change_rows(series: Sequence[ProviderSeries]) -> str:
    rows = []
    for item in series:
        for change in item.changes:
            cells = [
                item.provider,
                item.model,
                LABELS[change.statistic],
                change.direction,
                _value_text(change.statistic, change.before),
                _value_text(change.statistic, change.after),
                f"{change.relative:+.1%}",
                f"{change.start_round_index} ({round_time(change.start_at)})",
                f"{change.round_index} ({round_time(change.at)})",
                str(change.rounds_to_flag),
            ]
            rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    return "".join(rows)


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}"
    "table{border-collapse:collapse;font-size:.85rem;margin-bottom:1rem}"
    "td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:right}"
    "td:nth-child(-n+2){text-align:left}"
    ".chart .grid{stroke:#e4e4e4}.chart .axis{stroke:#555}.chart text{font-size:11px}"
    ".chart .title{font-weight:600}.charts{display:flex;flex-wrap:wrap;gap:1rem}"
)


def render_trends_html(series: Sequence[ProviderSeries], window: timedelta | None = None) -> str:
    start, end = window_bounds(series, window)
    if start is None or end is None:
        raise InputError("no monitoring rounds to report")
    bounds = (start, end)
    shown = [item.between(start, end) for item in series]
    sections = []
    for index, item in enumerate(shown):
        charts = "".join(
            trend_chart(item, statistic, label, scale, reference, bounds,
                        f"trend-{index}-{statistic}")
            for statistic, label, scale, reference in CHARTS
        )  # fmt: skip
        reference = escape(item.reference or "none given")
        sections.append(
            f'<section class="series" data-provider="{escape(item.provider)}" '
            f'data-model="{escape(item.model)}"><h2>{escape(item.provider)} / '
            f"{escape(item.model)}</h2><p>Idealized reference: {reference}.</p>"
            f'<div class="charts">{charts}</div></section>'
        )
    summary_header = (
        "provider", "model", "rounds", "TTFT p50", "ITL p50", "output tok/s", "denoised s",
        "idealized s", "denoised / idealized", "$ per round", "error rate", "$ in window",
        "shifts",
    )  # fmt: skip
    change_header = (
        "provider", "model", "statistic", "direction", "before", "after", "change", "began (round)",
        "flagged (round)", "rounds to flag",
    )  # fmt: skip
    window_text = "every round" if window is None else f"the last {window} before the newest round"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Provider monitoring</title><style>{STYLE}</style></head><body>"
        "<h1>Provider monitoring</h1>"
        f"<p>Window: {escape(window_text)}, {escape(round_time(start))} to "
        f"{escape(round_time(end))}. Medians over the window's rounds, with the 10th and 90th "
        "percentiles in brackets. Dashed green: the idealized runtime of the same request "
        "shapes; orange: a shift beyond the provider's own noise (vertical line where it was "
        "flagged, triangle where it began).</p>"
        '<h2>Medians and spread</h2><table id="trend-summary"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in summary_header)
        + f"</tr></thead><tbody>{_summary_rows(series, bounds)}</tbody></table>"
        '<h2>Shifts</h2><table id="trend-changes"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in change_header)
        + f"</tr></thead><tbody>{_change_rows(shown)}</tbody></table>"
        + "".join(sections)
        + "</body></html>"
    )


def write_trends_report(
    series: Sequence[ProviderSeries], out_dir: str | Path, window: timedelta | None = None
) -> Path:
    path = Path(out_dir) / TRENDS_HTML_NAME
    page = render_trends_html(series, window)
    with atomic_writer(path) as handle:
        handle.write(page)
    return path
