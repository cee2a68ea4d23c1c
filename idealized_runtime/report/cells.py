"""How figures read in every format of the report: number formats, the leaderboard's columns and
a board line's cells (shared by the HTML page, the Markdown summary and the terminal table).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from idealized_runtime.leaderboard.build import Leaderboard
from idealized_runtime.leaderboard.rows import (
    ModelRow,
)
from idealized_runtime.report.groups import (
    BoardLine,
    FigureSide,
)

RUNTIME_AXIS = {
    "idealized": "idealized runtime (s per request)",
    "raw": "raw runtime (s per request)",
}

# What each metric means; shown in the methodology section and the Markdown.
METRIC_DEFINITIONS = (
    (
        "Idealized runtime",
        "Runtime of one request on a uniform, well-optimized stack without contention "
        "(runtime(p, o) = alpha(p) + beta * (o - 1)), fitted to profiles of the model's "
        "architecture with random weights. Per scenario: HELM's reported value (the fit "
        "averaged over the scenario's requests) where available, else the fit at the mean "
        "prompt/output tokens.",
    ),
    (
        "Stack",
        "The hardware/software stack an idealized runtime was computed on. HELM's tables are "
        "helm-megatron-2022 (Megatron-LM, 2022, A100); a reference stack of today's engines "
        "gives the hardware model's estimate for the model's architecture on that stack "
        "(`idealized-runtime stacks`); a local profile is named runner/hardware.",
    ),
    (
        "Denoised runtime",
        "The same form fitted to timings of the black-box API (plus a fixed overhead): the "
        "provider's speed with the noise of load and network taken out.",
    ),
    (
        "Raw runtime",
        "Mean wall-clock time of the scenario's requests as measured through the API.",
    ),
    (
        "Accelerators",
        "Fewest accelerators whose memory holds the weights and a full-context KV cache "
        "(batch 1), from the serving model.",
    ),
    (
        "GPU-seconds / $ / kJ per 1,000 requests",
        "Idealized runtime x accelerators x 1,000; dollars at the accelerator's indicative "
        "on-demand hourly price, kilojoules at its board power.",
    ),
    (
        "Accuracy",
        "HELM's exact-match score on the scenario (0-1).",
    ),
    (
        "Pareto frontier",
        "A model is on a scenario's frontier iff no other model is at least as accurate and "
        "at least as fast with one of the two strictly better.",
    ),
)


# --- formatting --------------------------------------------------------------------------------


def fmt_seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def fmt_number(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits; thousands as ``25,200`` rather than ``2.52e+04``."""
    if value is None:
        return "–"
    rounded = float(f"{value:.{digits}g}")
    if 1e3 <= abs(rounded) < 1e15:
        return f"{rounded:,.0f}"
    return f"{value:.{digits}g}"


def fmt_params(value: int | None) -> str:
    if value is None:
        return "–"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return str(value)


def fmt_accuracy(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}×"


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "x"


# --- the grouped leaderboard as text (Markdown, terminal) --------------------------------------


@dataclass(frozen=True)
class Column:
    header: str
    side: FigureSide  # whose figure: a line prints it or leaves it blank (``BoardLine.shows``)
    text: Callable[[ModelRow], str]


LEADERBOARD_COLUMNS = {
    column.header: column
    for column in (
        Column("parameters", "shape", lambda row: fmt_params(row.num_parameters)),
        Column("GPUs", "architecture", lambda row: fmt_number(row.num_gpus)),
        Column("idealized s", "architecture", lambda row: fmt_seconds(row.idealized_runtime_s)),
        Column("denoised s", "measured", lambda row: fmt_seconds(row.denoised_runtime_s)),
        Column("raw s", "measured", lambda row: fmt_seconds(row.raw_runtime_s)),
        Column("GPU-s/1k", "architecture", lambda row: fmt_number(row.cost.gpu_seconds)),
        Column("$/1k", "architecture", lambda row: fmt_number(row.cost.usd)),
        Column("accuracy", "measured", lambda row: fmt_accuracy(row.accuracy)),
        Column("scenarios", "measured", lambda row: str(row.num_scenarios)),
        Column(
            "frontier (ideal./raw)",
            "measured",
            lambda row: f"{row.frontier_count['idealized']}/{row.frontier_count['raw']}",
        ),
        Column("stack", "architecture", lambda row: row.stack or "–"),
    )
}
ALIAS_MARK = "↳ "  # before a name listed under its architecture's line


def line_cells(line: BoardLine, headers: Sequence[str]) -> list[str]:
    """The line's cells under ``headers`` (``LEADERBOARD_COLUMNS``): blank where the figure is
    printed on another line of its group."""
    columns = [LEADERBOARD_COLUMNS[header] for header in headers]
    return [column.text(line.row) if line.shows(column.side) else "" for column in columns]


def fmt_percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f}%"


def fit_rows(board: Leaderboard) -> list[dict[str, object]]:
    rows = []
    for profile in board.inputs.profiles:
        for fit in profile.fits:
            quality = fit.quality
            rows.append(
                {
                    "profile": profile.name,
                    "method": fit.method,
                    "stack": fit.stack.hardware if fit.stack else "",
                    "n_points": quality.n_points if quality else None,
                    "r2": quality.r2 if quality else None,
                    "mape": quality.mape if quality else None,
                    "max_error": quality.max_error if quality else None,
                    "beta_s": fit.beta_s,
                    "overhead_s": fit.overhead_s,
                }
            )
    return rows
