"""Small inline-SVG charts for the report: no plotting library, no network, works from file://.

Each chart is a self-contained ``<svg>`` string with labelled axes (with units), ticks, a legend
and ``<title>`` tooltips. Every data mark carries the class ``mark`` so that tests (and readers
of the HTML) can tell an empty chart from a drawn one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.leaderboard.rows import FrontierPoint, ProfileInput

WIDTH, HEIGHT = 460, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 62, 16, 30, 46
# Colour-blind-safe palette (Okabe-Ito), cycled per series.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
FRONTIER_COLOUR = "#D55E00"
OTHER_COLOUR = "#7a8793"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (1, 2, 2.5, 5 x 10^k steps) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        high = low + 1.0
    raw_step = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw_step)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def _format_tick(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.001:
        return f"{value:.0e}"
    return f"{value:g}"


@dataclass(frozen=True)
class Axes:
    """Maps data coordinates to pixels inside the plot area; axes start at zero because the
    quantities plotted (seconds, tokens, accuracy) are ratios where zero means something."""

    x_ticks: list[float]
    y_ticks: list[float]

    @classmethod
    def fit(cls, xs: Sequence[float], ys: Sequence[float]) -> Axes:
        x_high = max(xs, default=1.0)
        y_high = max(ys, default=1.0)
        return cls(nice_ticks(0.0, x_high or 1.0), nice_ticks(0.0, y_high or 1.0))

    def x(self, value: float) -> float:
        span = self.x_ticks[-1] - self.x_ticks[0]
        return MARGIN_LEFT + (value - self.x_ticks[0]) / span * (WIDTH - MARGIN_LEFT - MARGIN_RIGHT)

    def y(self, value: float) -> float:
        span = self.y_ticks[-1] - self.y_ticks[0]
        plot_height = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
        return HEIGHT - MARGIN_BOTTOM - (value - self.y_ticks[0]) / span * plot_height

    def frame(self, title: str, x_label: str, y_label: str) -> list[str]:
        """Title, grid, ticks and axis labels."""
        parts = [
            f'<text class="title" x="{WIDTH / 2:.1f}" y="18" text-anchor="middle">'
            f"{escape(title)}</text>"
        ]
        left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
        top, bottom = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM
        for tick in self.y_ticks:
            y = f"{self.y(tick):.1f}"
            label_y = f"{self.y(tick) + 4:.1f}"
            parts += _grid_line(
                (str(left), str(right), y, y), (str(left - 6), label_y), "end", tick
            )
        for tick in self.x_ticks:
            x = f"{self.x(tick):.1f}"
            parts += _grid_line(
                (x, x, str(top), str(bottom)), (x, str(bottom + 16)), "middle", tick
            )
        parts.append(
            f'<path class="axis" d="M{left},{top} V{bottom} H{right}" fill="none"/>'
            f'<text class="label" x="{(left + right) / 2:.1f}" y="{HEIGHT - 8}" '
            f'text-anchor="middle">{escape(x_label)}</text>'
            f'<text class="label" transform="translate(14,{(top + bottom) / 2:.1f}) rotate(-90)" '
            f'text-anchor="middle">{escape(y_label)}</text>'
        )
        return parts


def _svg(parts: list[str], label: str, chart_id: str) -> str:
    return (
        f'<svg id="{escape(chart_id)}" class="chart" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg">' + "".join(parts) + "</svg>"
    )


def frontier_chart(
    points: Sequence[FrontierPoint], *, title: str, x_label: str, chart_id: str
) -> str:
    """Accuracy vs runtime of one scenario; the Pareto frontier as a step line through its
    points, which are drawn larger, coloured and labelled. Other models are grey dots with
    their name as a tooltip."""
    axes = Axes.fit([p.runtime_s for p in points], [1.0])
    axes = Axes(axes.x_ticks, nice_ticks(0.0, 1.0))
    parts = axes.frame(title, x_label, "accuracy (exact match, 0-1)")
    front = sorted((p for p in points if p.on_frontier), key=lambda p: p.runtime_s)
    if front:
        # Staircase: from each frontier point, right at its accuracy to the next one's runtime.
        path = [f"M{axes.x(front[0].runtime_s):.1f},{axes.y(front[0].accuracy):.1f}"]
        for current in front[1:]:
            path.append(f"H{axes.x(current.runtime_s):.1f} V{axes.y(current.accuracy):.1f}")
        parts.append(
            f'<path class="frontier mark" d="{" ".join(path)}" fill="none" '
            f'stroke="{FRONTIER_COLOUR}" stroke-width="1.5" stroke-dasharray="4 3"/>'
        )
    for point in sorted(points, key=lambda p: p.on_frontier):
        x, y = axes.x(point.runtime_s), axes.y(point.accuracy)
        tip = f"{point.model}: {point.runtime_s:.3g} s, accuracy {point.accuracy:.3f}"
        colour, radius = (FRONTIER_COLOUR, 5) if point.on_frontier else (OTHER_COLOUR, 3.5)
        state = "on-frontier" if point.on_frontier else "off-frontier"
        parts.append(
            f'<circle class="mark point {state}" data-model="{escape(point.model)}" '
            f'cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{colour}">'
            f"<title>{escape(tip)}</title></circle>"
        )
    marks = [(axes.x(p.runtime_s), axes.y(p.accuracy)) for p in points]
    labels = [(axes.x(p.runtime_s), axes.y(p.accuracy), p.model.split("/")[-1]) for p in front]
    # The staircase, sampled: a label is not written across it either.
    corners = [(x, y) for x, y, _ in labels]
    stairs = []
    for (x1, y1), (x2, y2) in itertools.pairwise(corners):
        stairs += [(x1 + (x2 - x1) * i / 12, y1) for i in range(13)]
        stairs += [(x2, y1 + (y2 - y1) * i / 12) for i in range(13)]
    placements = place_labels(labels, marks, stairs)
    for text, placed in zip((t for _, _, t in labels), placements, strict=True):
        if placed is None:
            continue  # no free place: the point's tooltip names it
        x, y, anchor = placed
        parts.append(
            f'<text class="point-label" x="{x:.1f}" y="{y:.1f}" '
            f'text-anchor="{anchor}">{escape(text)}</text>'
        )
    return _svg(parts, title, chart_id)


# A point label's box: 11 px text, about 6.2 px a character.
LABEL_CHAR_PX, LABEL_HEIGHT_PX = 6.2, 12.0
Box = tuple[float, float, float, float]  # left, top, right, bottom


def _label_box(x: float, baseline: float, anchor: str, text: str) -> Box:
    width = LABEL_CHAR_PX * len(text)
    left = x - width if anchor == "end" else x
    return left, baseline - LABEL_HEIGHT_PX + 2, left + width, baseline + 2


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(
    labels: Sequence[tuple[float, float, str]],
    marks: Sequence[tuple[float, float]],
    lines: Sequence[tuple[float, float]] = (),
) -> list[tuple[float, float, str] | None]:
    """Where each label (point x, y, text) goes: the first of twelve places around its point
    whose box stays inside the plot and overlaps no label placed before, no point and no sample
    of a drawn line (``lines``); None when none is free. Returns (x, baseline y, text-anchor)
    per label."""
    placed: list[Box] = []
    dots = [(x - 5, y - 5, x + 5, y + 5) for x, y in marks]
    dots += [(x - 1, y - 1, x + 1, y + 1) for x, y in lines]
    inside = (MARGIN_LEFT, MARGIN_TOP, WIDTH - MARGIN_RIGHT, HEIGHT - MARGIN_BOTTOM)
    offsets = ((7, -6), (-7, -6), (7, 14), (-7, 14), (9, 4), (-9, 4), (0, -10), (0, 20),
               (7, -20), (7, 28), (-7, -20), (-7, 28))  # fmt: skip
    result: list[tuple[float, float, str] | None] = []
    for x, y, text in labels:
        chosen = None
        width = LABEL_CHAR_PX * len(text)
        for dx, dy in offsets:
            # Right of the point, left of it (ending dx before it), or centred above/below.
            left = x + dx if dx > 0 else x + dx - width if dx < 0 else x - width / 2
            box = _label_box(left, y + dy, "start", text)
            within = (
                box[0] >= inside[0]
                and box[2] <= inside[2]
                and box[1] >= inside[1] - LABEL_HEIGHT_PX
                and box[3] <= inside[3]
            )
            if within and not any(_overlap(box, other) for other in [*placed, *dots]):
                chosen = (left, y + dy, "start")
                placed.append(box)
                break
        result.append(chosen)
    return result


def _series_prompts(profile: ProfileInput, limit: int = 3) -> list[int]:
    """Up to ``limit`` prompt sizes to draw: smallest, middle and largest measured (or fitted)."""
    sizes = sorted({m.num_prompt_tokens for m in profile.measurements})
    if not sizes:
        sizes = list(profile.fits[0].prompt_sizes) if profile.fits else []
    if len(sizes) <= limit:
        return sizes
    return sorted({sizes[0], sizes[len(sizes) // 2], sizes[-1]})


def runtime_vs_output_chart(profile: ProfileInput, *, chart_id: str) -> str:
    """Runtime against output tokens at a few prompt sizes: measured points, and each fit's line
    (one dash style per fitting method)."""
    prompts = _series_prompts(profile)
    measured = [m for m in profile.measurements if m.num_prompt_tokens in prompts]
    max_output = max((m.num_output_tokens for m in profile.measurements), default=64)
    outputs = np.linspace(1, max(max_output, 2), 40)
    lines = {
        (fit.method, p): predict_runtime(fit, p, outputs, include_overhead=True)
        for fit in profile.fits
        for p in prompts
    }
    ys = [m.runtime_s for m in measured] + [float(v.max()) for v in lines.values()]
    axes = Axes.fit([float(outputs[-1])], ys)
    parts = axes.frame(profile.name, "output tokens", "runtime (s)")
    dashes = {"default": "", "helm": "5 3", "denoised": "2 2"}
    for index, prompt in enumerate(prompts):
        colour = PALETTE[index % len(PALETTE)]
        for fit in profile.fits:
            values = lines[(fit.method, prompt)]
            d = "M" + " L".join(
                f"{axes.x(o):.1f},{axes.y(v):.1f}" for o, v in zip(outputs, values, strict=True)
            )
            parts.append(
                f'<path class="mark fit-line" d="{d}" fill="none" stroke="{colour}" '
                f'stroke-width="1.6" stroke-dasharray="{dashes.get(fit.method, "")}">'
                f"<title>{escape(f'{fit.method} fit, prompt {prompt} tokens')}</title></path>"
            )
        for m in measured:
            if m.num_prompt_tokens != prompt:
                continue
            tip = f"p={prompt}, o={m.num_output_tokens}: {m.runtime_s:.4g} s"
            parts.append(
                f'<circle class="mark point" cx="{axes.x(m.num_output_tokens):.1f}" '
                f'cy="{axes.y(m.runtime_s):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    parts.append(_legend(prompts, [fit.method for fit in profile.fits], dashes))
    return _svg(parts, f"runtime vs output tokens, {profile.name}", chart_id)


def _legend(prompts: Sequence[int], methods: Sequence[str], dashes: dict[str, str]) -> str:
    x, y = MARGIN_LEFT + 8, MARGIN_TOP + 10
    items = []
    for index, prompt in enumerate(prompts):
        colour = PALETTE[index % len(PALETTE)]
        items.append(
            f'<circle cx="{x}" cy="{y - 4}" r="3" fill="{colour}"/>'
            f'<text class="legend" x="{x + 8}" y="{y}">prompt {prompt}</text>'
        )
        y += 14
    for method in methods:
        items.append(
            f'<line x1="{x - 6}" x2="{x + 6}" y1="{y - 4}" y2="{y - 4}" stroke="#333" '
            f'stroke-dasharray="{dashes.get(method, "")}"/>'
            f'<text class="legend" x="{x + 10}" y="{y}">{escape(method)} fit</text>'
        )
        y += 14
    return '<g class="legend-box">' + "".join(items) + "</g>"


def _grid_line(
    ends: tuple[str, str, str, str], label_at: tuple[str, str], anchor: str, tick: float
) -> list[str]:
    """A grid line (x1, x2, y1, y2, already formatted) and its tick label."""
    x1, x2, y1, y2 = ends
    x, y = label_at
    return [
        f'<line class="grid" x1="{x1}" x2="{x2}" y1="{y1}" y2="{y2}"/>',
        f'<text class="tick" x="{x}" y="{y}" text-anchor="{anchor}">{_format_tick(tick)}</text>',
    ]
