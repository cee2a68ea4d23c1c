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
    is_text: bool = False  # left-aligned, sorted as text
    hint: Callable[[CurrentModelRow], str] | None = None  # a cell's hover text (HTML)


def _parameters(row: CurrentModelRow) -> str:
    total = fmt_params(row.num_parameters)
    return f"{total}/{fmt_params(row.active_parameters)}" if row.active_parameters else total


def _gpus(row: CurrentModelRow) -> str:
    if row.num_gpus is None:
        return "–"
    stages = row.num_gpus // row.tp if row.tp else 1
    return f"{row.num_gpus}" + (f" ({stages}×TP{row.tp})" if stages > 1 else "")


BASELINE_HEADER, RATIO_HEADER = "HELM 2022 s", "ratio"
SLO_TOKENS_HEADER, SLO_USD_HEADER, SLO_DEPLOYMENT_HEADER = (
    "SLO tok/s/GPU",
    "SLO $/1M out",
    "SLO deployment",
)


def _best_figure(row: CurrentModelRow, name: str) -> float | None:
    best = row.best_deployment
    return getattr(best, name) if best is not None and best.status == "met" else None


def _best_text(row: CurrentModelRow, name: str) -> str:
    """The figure, or a dash where there is none."""
    best = row.best_deployment
    if best is None or best.status != "met":
        return "–"  # the deployment column says why
    return fmt_number(getattr(best, name))


def _best_hint(row: CurrentModelRow) -> str:
    best = row.best_deployment
    if best is None:
        return ""
    if best.status != "met":
        return best.note or ""
    simulated = (
        f"; simulated TTFT p50 {best.simulated_ttft_p50_s:.2f} s, TPOT p50 "
        f"{(best.simulated_tpot_p50_s or 0) * 1000:.1f} ms"
        if best.simulated_ttft_p50_s is not None
        else ""
    )
    return (
        f"{best.engine} {best.weights} {best.layout}, {best.gpus} GPUs per replica, "
        f"{best.concurrency} clients; {best.tokens_per_s_per_user:.1f} tok/s per user{simulated}"
    )


def best_deployment_columns(board: CurrentModelBoard) -> tuple[CurrentColumn, ...]:
    """The columns of the best deployment under the standard SLO (none when not asked for)."""
    if board.serving == "none":
        return ()
    standard = f"plan's best on {board.hardware} under the standard SLO ({board.serving_standard})"
    return (
        CurrentColumn(
            SLO_TOKENS_HEADER,
            lambda r: _best_text(r, "output_tokens_per_s_per_gpu"),
            lambda r: _best_figure(r, "output_tokens_per_s_per_gpu"),
            f"output tokens/s per GPU at {standard}",
            hint=_best_hint,
        ),
        CurrentColumn(
            SLO_USD_HEADER,
            lambda r: _best_text(r, "usd_per_million_output_tokens"),
            lambda r: _best_figure(r, "usd_per_million_output_tokens"),
            f"dollars per 1M output tokens at {standard}, at the GPU's hourly price",
            hint=_best_hint,
        ),
        CurrentColumn(
            SLO_DEPLOYMENT_HEADER,
            lambda r: r.best_deployment.deployment_text() if r.best_deployment else "–",
            lambda r: None,
            "engine, layout and clients per replica of that deployment",
            is_text=True,
            hint=_best_hint,
        ),
    )


def current_columns(board: CurrentModelBoard) -> tuple[CurrentColumn, ...]:
    """The columns after the model's name, in order."""
    return (
        CurrentColumn(
            "params",
            _parameters,
            lambda r: r.num_parameters,
            "total / active per token (mixtures of experts)",
        ),
        CurrentColumn(
            "precision", lambda r: r.precision, lambda r: None, "the checkpoint's", is_text=True
        ),
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
        *best_deployment_columns(board),
    )


def current_title(board: CurrentModelBoard) -> str:
    serving = (
        ""
        if board.serving == "none"
        else f"; SLO columns: plan's best deployment under {board.serving_standard}"
    )
    return (
        f"Today's models on {board.hardware}, {board.stack} (batch 1, checkpoints' precision; "
        f"idealized runtime: mean over {len(board.workloads)} HELM workloads; "
        f"HELM 2022: the same GPU under {board.baseline_stack}{serving})"
    )


def serving_note(board: CurrentModelBoard) -> str:
    """Where the SLO columns come from, for the captions (empty without them)."""
    if board.serving == "none":
        return ""
    source = board.serving_provenance if board.serving == "shipped" else "planned live"
    return (
        "SLO columns: the most output tokens/s per GPU plan finds whose request-by-request "
        "simulation meets the SLO, and its dollars per 1M output tokens"
        + (f" ({source})" if source else "")
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
