"""Serving under load in the report: latency against throughput per model, one point per load
level, with the SLO as a horizontal line; from the service database or a results folder.

A results folder contributes every raw JSONL file whose rows carry a ``load`` (summarized
here) and every ``*load_summaries*.json`` list (as ``summarize -o`` writes it; a ``source``
key, e.g. "simulated", is kept). ``load.html`` is written beside the leaderboard pages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import LoadSummary, Slo
from idealized_runtime.report.svg import PALETTE, Axes, _svg
from idealized_runtime.timing.summary import load_sort_key, read_raw_rows, summarize

LOAD_HTML_NAME = "load.html"
MEASURED = "measured"
# (LoadSummary field, SLO field, axis label)
CURVES = (
    ("ttft_s", "ttft_s", "TTFT p50 (s)"),
    ("tpot_s", "tpot_s", "TPOT p50 (s)"),
    ("e2e_s", "e2e_s", "end-to-end p50 (s)"),
)


@dataclass(frozen=True)
class LoadCurve:
    """One model's summaries from one source (measured, simulated, ...)."""

    model: str
    source: str
    summaries: tuple[LoadSummary, ...]

    @property
    def name(self) -> str:
        return self.model if self.source == MEASURED else f"{self.model} ({self.source})"


def curves_from(
    summaries: Sequence[LoadSummary], sources: Sequence[str] | None = None
) -> list[LoadCurve]:
    """Group summaries into curves, levels in load order."""
    groups: dict[tuple[str, str], list[LoadSummary]] = {}
    for index, summary in enumerate(summaries):
        source = sources[index] if sources is not None else MEASURED
        groups.setdefault((summary.model, source), []).append(summary)
    return [
        LoadCurve(model, source, tuple(sorted(items, key=lambda s: load_sort_key(s.load))))
        for (model, source), items in sorted(groups.items())
    ]


def latency_throughput_chart(
    curves: Sequence[LoadCurve], *, metric: str, label: str, slo_s: float | None, chart_id: str
) -> str:
    """p50 ``metric`` against requests/s, one line per curve (simulated ones dashed)."""
    points = {
        curve.name: [
            (s.requests_per_s, getattr(s, metric).p50, s.load)
            for s in curve.summaries
            if getattr(s, metric).p50 is not None
        ]
        for curve in curves
    }
    xs = [x for values in points.values() for x, _, _ in values]
    ys = [y for values in points.values() for _, y, _ in values] + ([slo_s] if slo_s else [])
    axes = Axes.fit(xs, ys)
    title = f"{label.split(' (')[0]} vs throughput"
    parts = axes.frame(title, "throughput (requests/s)", label)
    if slo_s is not None:
        y = axes.y(slo_s)
        parts.append(
            f'<line class="mark slo" x1="{axes.x(axes.x_ticks[0]):.1f}" '
            f'x2="{axes.x(axes.x_ticks[-1]):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#D55E00" '
            f'stroke-dasharray="6 3"><title>SLO {slo_s:g} s</title></line>'
        )
    legend_y = 40
    for index, curve in enumerate(curves):
        colour = PALETTE[index % len(PALETTE)]
        values = points[curve.name]
        if not values:
            continue
        dash = "" if curve.source == MEASURED else "5 3"
        d = "M" + " L".join(f"{axes.x(x):.1f},{axes.y(y):.1f}" for x, y, _ in values)
        parts.append(
            f'<path class="mark load-curve" data-model="{escape(curve.name)}" d="{d}" '
            f'fill="none" stroke="{colour}" stroke-width="1.6" stroke-dasharray="{dash}"/>'
        )
        for x, y, load in values:
            tip = f"{curve.name}, {load}: {x:.3g} req/s, {y:.3g} s"
            parts.append(
                f'<circle class="mark point" cx="{axes.x(x):.1f}" cy="{axes.y(y):.1f}" r="3" '
                f'fill="{colour}"><title>{escape(tip)}</title></circle>'
            )
        parts.append(
            f'<text class="legend" x="{axes.x(axes.x_ticks[0]) + 8:.1f}" y="{legend_y}" '
            f'fill="{colour}">{escape(curve.name)}</text>'
        )
        legend_y += 14
    return _svg(parts, title, chart_id)


def render_load_html(curves: Sequence[LoadCurve], slo: Slo | None = None) -> str:
    charts = [
        latency_throughput_chart(
            curves,
            metric=metric,
            label=label,
            slo_s=getattr(slo, slo_field) if slo else None,
            chart_id=f"load-{metric}",
        )
        for metric, slo_field, label in CURVES
    ]
    rows = []
    for curve in curves:
        for s in curve.summaries:
            cells = [
                curve.name, s.load, str(s.requests), f"{s.requests_per_s:.3g}",
                f"{s.output_tokens_per_s:.3g}", _ms(s.ttft_s.p50), _ms(s.ttft_s.p99),
                _ms(s.itl_s.p50), _ms(s.tpot_s.p50), _ms(s.e2e_s.p50), _ms(s.e2e_s.p99),
                f"{s.error_rate:.1%}", f"{s.goodput_requests_per_s:.3g}",
            ]  # fmt: skip
            rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    header = (
        "model", "load", "requests", "req/s", "output tok/s", "TTFT p50 ms", "TTFT p99 ms",
        "ITL p50 ms", "TPOT p50 ms", "E2E p50 ms", "E2E p99 ms", "errors", "goodput req/s",
    )  # fmt: skip
    slo_text = (
        ", ".join(f"{k.removesuffix('_s')} &le; {v:g} s" for k, v in slo.model_dump().items() if v)
        if slo
        else "none (goodput counts every successful request)"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>Serving under load</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}"
        "table{border-collapse:collapse;font-size:.85rem}td,th{border:1px solid #ccc;"
        "padding:.2rem .5rem;text-align:right}td:first-child,td:nth-child(2){text-align:left}"
        ".chart .grid{stroke:#e4e4e4}.chart .axis{stroke:#555}.chart text{font-size:11px}"
        ".chart .title{font-weight:600}.charts{display:flex;flex-wrap:wrap;gap:1rem}"
        "</style></head><body><h1>Serving under load</h1>"
        f"<p>Latency (p50) against throughput, one point per load level. SLO: {slo_text}. "
        "Dashed lines are simulated or other non-measured sources.</p>"
        f'<div class="charts">{"".join(charts)}</div>'
        "<h2>Per load level</h2><table><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></body></html>"
    )


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.1f}"


def write_load_report(
    curves: Sequence[LoadCurve], out_dir: str | Path, slo: Slo | None = None
) -> Path:
    path = Path(out_dir) / LOAD_HTML_NAME
    with atomic_writer(path) as handle:
        handle.write(render_load_html(curves, slo))
    return path


def results_dir_curves(folder: str | Path, slo: Slo | None = None) -> list[LoadCurve]:
    """Curves from a results folder's raw JSONL rows (with a ``load``) and summary lists."""
    folder = Path(folder)
    summaries: list[LoadSummary] = []
    sources: list[str] = []
    raw_files = []
    for path in sorted(folder.rglob("*.jsonl")):
        with path.open(encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
        try:
            row = json.loads(first)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "load" in row and "model" in row:
            raw_files.append(path)
    if raw_files:
        measured = summarize(read_raw_rows(raw_files), slo)
        summaries += measured
        sources += [MEASURED] * len(measured)
    for path in sorted(folder.rglob("*load_summaries*.json")):
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read load summaries: {error}", path=str(path)) from None
        if not isinstance(items, list):
            raise InputError("expected a JSON list of load summaries", path=str(path))
        for item in items:
            if not isinstance(item, dict):
                raise InputError("expected a JSON list of load summaries", path=str(path))
            fields = {k: v for k, v in item.items() if k in LoadSummary.model_fields}
            summaries.append(LoadSummary.model_validate(fields))
            sources.append(str(item.get("source") or MEASURED))
    return curves_from(summaries, sources)
