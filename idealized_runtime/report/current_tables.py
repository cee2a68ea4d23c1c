"""The board of today's models in every format: its columns (header, cell text, sort value) and
those of the providers' prices beside the idealized dollars, shared by the HTML page, the
Markdown summary, the CSV tables and the terminal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from idealized_runtime.leaderboard.current_models import CurrentModelBoard
from idealized_runtime.leaderboard.rows import CurrentModelRow, ProviderPriceRow
from idealized_runtime.report.cells import fmt_number, fmt_params, fmt_ratio, fmt_seconds


@dataclass(frozen=True)
class CurrentColumn:
    header: str
    text: Callable[[CurrentModelRow], str]
    value: Callable[[CurrentModelRow], float | None]  # what the HTML table sorts by
    title: str = ""


def _parameters(row: CurrentModelRow) -> str:
    total = fmt_params(row.num_parameters)
    return f"{total}/{fmt_params(row.active_parameters)}" if row.active_parameters else total


def _gpus(row: CurrentModelRow) -> str:
    if row.num_gpus is None:
        return "–"
    stages = row.num_gpus // row.tp if row.tp else 1
    return f"{row.num_gpus}" + (f" ({stages}×TP{row.tp})" if stages > 1 else "")


BASELINE_HEADER, RATIO_HEADER = "HELM 2022 s", "ratio"


def current_columns(board: CurrentModelBoard) -> tuple[CurrentColumn, ...]:
    """The columns after the model's name, in order."""
    return (
        CurrentColumn(
            "params",
            _parameters,
            lambda r: r.num_parameters,
            "total / active per token (mixtures of experts)",
        ),
        CurrentColumn("precision", lambda r: r.precision, lambda r: None, "the checkpoint's"),
        CurrentColumn("GPUs", _gpus, lambda r: r.num_gpus, "fewest that hold the model (batch 1)"),
        CurrentColumn(
            "idealized s",
            lambda r: fmt_seconds(r.idealized_runtime_s),
            lambda r: r.idealized_runtime_s,
            f"mean over the HELM workloads on {board.hardware}, {board.stack}",
        ),
        CurrentColumn(
            BASELINE_HEADER,
            lambda r: fmt_seconds(r.baseline_runtime_s) if r.baseline_runtime_s else "n/a",
            lambda r: r.baseline_runtime_s,
            f"the same model and GPU under {board.baseline_stack}",
        ),
        CurrentColumn(
            RATIO_HEADER,
            lambda r: fmt_ratio(r.ratio),
            lambda r: r.ratio,
            f"idealized / {board.baseline_stack}: below 1, faster than HELM's 2022 stack",
        ),
        CurrentColumn(
            "GPU-s/1k",
            lambda r: fmt_number(r.cost.gpu_seconds),
            lambda r: r.cost.gpu_seconds,
            "GPU-seconds per 1,000 requests",
        ),
        CurrentColumn(
            "$/1k", lambda r: fmt_number(r.cost.usd), lambda r: r.cost.usd, "per 1,000 requests"
        ),
        CurrentColumn(
            "$/1M out",
            lambda r: fmt_number(r.usd_per_million_output_tokens),
            lambda r: r.usd_per_million_output_tokens,
            "decode GPU-seconds of 1M output tokens at the GPU's hourly price",
        ),
        CurrentColumn(
            "tok/s/user",
            lambda r: fmt_number(r.output_tokens_per_s_per_user),
            lambda r: r.output_tokens_per_s_per_user,
            "output tokens per second one user sees (1 / decode step)",
        ),
    )


def current_title(board: CurrentModelBoard) -> str:
    return (
        f"Today's models on {board.hardware}, {board.stack} (batch 1, checkpoints' precision; "
        f"idealized runtime: mean over {len(board.workloads)} HELM workloads; "
        f"HELM 2022: the same GPU under {board.baseline_stack})"
    )


@dataclass(frozen=True)
class PriceColumn:
    header: str
    text: Callable[[ProviderPriceRow], str]
    value: Callable[[ProviderPriceRow], float | str | None]


PRICE_COLUMNS = (
    PriceColumn("provider", lambda r: r.provider, lambda r: r.provider),
    PriceColumn("model", lambda r: r.model, lambda r: r.model),
    PriceColumn("architecture", lambda r: r.architecture, lambda r: r.architecture),
    PriceColumn(
        "$/1M in", lambda r: fmt_number(r.input_usd_per_mtok), lambda r: r.input_usd_per_mtok
    ),
    PriceColumn(
        "$/1M out", lambda r: fmt_number(r.output_usd_per_mtok), lambda r: r.output_usd_per_mtok
    ),
    PriceColumn(
        "idealized $/1M out",
        lambda r: fmt_number(r.idealized_usd_per_million_output_tokens),
        lambda r: r.idealized_usd_per_million_output_tokens,
    ),
    PriceColumn("$/1k req", lambda r: fmt_number(r.usd_per_1000), lambda r: r.usd_per_1000),
    PriceColumn(
        "idealized $/1k req",
        lambda r: fmt_number(r.idealized_usd_per_1000),
        lambda r: r.idealized_usd_per_1000,
    ),
    PriceColumn("price / idealized", lambda r: fmt_ratio(r.ratio), lambda r: r.ratio),
)
PRICE_NOTE = (
    "A provider's dollars of the HELM workloads at their mean tokens beside the idealized "
    "dollars of the same workloads (batch 1: one user per deployment; providers batch many, "
    "so their price is usually far below it)."
)
