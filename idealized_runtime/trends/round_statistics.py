"""A monitoring round from the requests it sent: the rows ``measure`` wrote for one endpoint at
one time, summarized (``timing.summary``), fitted (the denoised fit, ``cost_model.fitting``)
and priced into a ``MonitorRound`` (``core.rounds`` defines its statistics)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.prices import PriceTable, ProviderPrice
from idealized_runtime.core.rounds import MAX_ERROR_CHARS, MonitorRound, ProbeShape, round_status
from idealized_runtime.core.types import FittedCostModel, Measurement
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.methods import fit_measurements
from idealized_runtime.timing.summary import summarize


@dataclass(frozen=True)
class RoundIdentity:
    """Which round of which endpoint, and when it ran."""

    round_id: str
    provider: str
    model: str  # the model's name in the series (an endpoint's label)
    round_index: int
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True)
class IdealizedReference:
    """The idealized runtime of the probe's shapes (mean over them) and what it was computed on
    (a GPU and stack, or a fit)."""

    runtime_s: float
    label: str


def _measurement(row: Mapping[str, Any]) -> Measurement | None:
    """A successful request as a timing for the denoised fit (None if it has no runtime)."""
    runtime = row.get("runtime_s")
    if not row.get("ok") or not isinstance(runtime, (int, float)) or runtime <= 0:
        return None
    ttft = row.get("ttft_s")
    return Measurement(
        model=str(row["model"]),
        num_prompt_tokens=max(int(row["num_prompt_tokens"]), 1),
        num_output_tokens=int(row["num_output_tokens"]),
        runtime_s=float(runtime),
        ttft_s=float(ttft) if isinstance(ttft, (int, float)) and 0 < ttft <= runtime else None,
    )


def denoised_fit(measurements: Sequence[Measurement]) -> FittedCostModel | None:
    """The denoised fit of one round's timings, or None when they cannot be fitted (too few,
    one output length without a time to first token)."""
    if not measurements:
        return None
    try:
        fits = fit_measurements(measurements, "denoised", bootstrap_samples=0)
    except InputError:
        return None
    return next(iter(fits.values()), None)


def mean_runtime(fit: FittedCostModel, shapes: Sequence[ProbeShape]) -> float:
    """The fit's runtime (overhead included), mean over the shapes."""
    prompts = np.array([shape.prompt_tokens for shape in shapes], dtype=float)
    outputs = np.array([shape.output_tokens for shape in shapes], dtype=float)
    return float(np.mean(predict_runtime(fit, prompts, outputs)))


def _error_text(rows: Sequence[Mapping[str, Any]], error: str | None) -> str | None:
    """Why requests failed: ``error`` for a round that sent none, else the first failure's."""
    failed = [row for row in rows if not row.get("ok")]
    if not rows:
        error = error or "no request was sent"
    elif failed:
        first = str(failed[0].get("error") or "failed")
        error = f"{len(failed)} of {len(rows)} requests failed; first: {first}"
    else:
        return None
    return error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"


def round_from_rows(
    identity: RoundIdentity,
    rows: Sequence[Mapping[str, Any]],
    shapes: Sequence[ProbeShape],
    *,
    price: ProviderPrice | None = None,
    reference: IdealizedReference | None = None,
    error: str | None = None,
) -> MonitorRound:
    """The round of one endpoint: its rows (``measure``'s, of this round only) summarized,
    fitted and priced. ``error`` says why a round sent no request (an unreachable server)."""
    ok_rows = [row for row in rows if row.get("ok")]
    prices = PriceTable((price,)) if price is not None else None
    summaries = summarize(list(rows), prices=prices)
    summary = summaries[0] if summaries else None
    measurements = [m for row in ok_rows if (m := _measurement(row)) is not None]
    fit = denoised_fit(measurements)
    denoised = mean_runtime(fit, shapes) if fit is not None and shapes else None
    ideal = reference.runtime_s if reference is not None else None
    tpot = summary.tpot_s.p50 if summary is not None else None
    return MonitorRound(
        round_id=identity.round_id,
        provider=identity.provider,
        model=identity.model,
        round_index=identity.round_index,
        started_at=identity.started_at,
        finished_at=max(identity.finished_at, identity.started_at),
        status=round_status(len(rows), len(rows) - len(ok_rows)) if rows else "failed",
        error=_error_text(rows, error),
        requests=len(rows),
        failed_requests=len(rows) - len(ok_rows),
        ttft_s=summary.ttft_s.p50 if summary is not None else None,
        itl_s=summary.itl_s.p50 if summary is not None else None,
        output_tokens_per_s=1.0 / tpot if tpot else None,
        denoised_runtime_s=denoised,
        idealized_runtime_s=ideal,
        discrepancy=denoised / ideal if denoised is not None and ideal else None,
        error_rate=(len(rows) - len(ok_rows)) / len(rows) if rows else 1.0,
        usd=summary.cost.usd_per_request * len(ok_rows) if summary and summary.cost else None,
        reference=reference.label if reference is not None else None,
        shapes=list(shapes),
        summary=summary,
        measurements=measurements,
    )
