"""A monitoring round: one probe of one provider's model at one time, and what it measured.

``RoundPoint`` is a round as a point of a time series (when, whether it worked, its
statistics); ``MonitorRound`` adds what it was computed from (the probe's request shapes, the
load summary and the measurements), which the service stores beside it. The round's denoised
fit can be made again from its measurements (``POST /v1/fits`` on its measurement set).

Statistics of a round (None where the round had nothing to compute them from):

    ttft_s                median time to first token of its successful requests
    itl_s                 median inter-token latency (every gap between streamed chunks)
    output_tokens_per_s   output speed: 1 / median time per output token after the first
    denoised_runtime_s    the round's denoised fit at the probe shapes, mean over the shapes
                          (overhead included, as ``convert`` gives it)
    idealized_runtime_s   the idealized runtime of the same shapes (the reference)
    discrepancy           denoised_runtime_s / idealized_runtime_s
    error_rate            failed requests / requests (1 for a round that sent none)

A round's status: ``ok``; ``degraded`` when most of its requests failed (retries bridged a few:
its statistics rest on the few that got through); ``failed`` when none succeeded.
    usd                   the round's successful requests at the endpoint's prices
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator

from idealized_runtime.core.types import (
    LoadSummary,
    Measurement,
    Name,
    NonNegativeFloat,
    OutputTokenCount,
    TokenCount,
    _Frozen,
)

# A round's identity: the monitor's id, the round's index and the endpoint, file- and URL-safe.
ROUND_ID_PATTERN = r"^[A-Za-z0-9_.:-]+$"
# A provider's name: what the series are grouped by, also a file name in the monitor's state.
PROVIDER_PATTERN = r"^[A-Za-z0-9_.-]+$"
# The service names a round's measurement set "monitor:<round_id>", within 200 characters.
MAX_ROUND_ID = 190
MAX_ERROR_CHARS = 500
MAX_ROUND_INDEX = 2**31 - 1
RoundStatus = Literal["ok", "degraded", "failed"]
# Counts fit a 32-bit database integer.
RequestCount = Annotated[int, Field(ge=0, le=MAX_ROUND_INDEX)]
# The statistics of a round, in the order tables show them.
ROUND_STATISTICS = (
    "ttft_s",
    "itl_s",
    "output_tokens_per_s",
    "denoised_runtime_s",
    "idealized_runtime_s",
    "discrepancy",
    "error_rate",
    "usd",
)


class ProbeShape(_Frozen):
    """One request shape of the probe workload: prompt and output tokens."""

    prompt_tokens: TokenCount
    output_tokens: Annotated[OutputTokenCount, Field(ge=1)]


class RoundPoint(_Frozen):
    """One round of one provider's model as a point of its series."""

    round_id: Annotated[str, Field(min_length=1, max_length=MAX_ROUND_ID, pattern=ROUND_ID_PATTERN)]
    provider: Annotated[str, Field(min_length=1, max_length=100, pattern=PROVIDER_PATTERN)]
    model: Name
    round_index: Annotated[int, Field(ge=0, le=MAX_ROUND_INDEX)]
    started_at: AwareDatetime
    finished_at: AwareDatetime
    status: RoundStatus
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS)] | None = None
    requests: RequestCount = 0
    failed_requests: RequestCount = 0
    ttft_s: NonNegativeFloat | None = None
    itl_s: NonNegativeFloat | None = None
    output_tokens_per_s: NonNegativeFloat | None = None
    denoised_runtime_s: NonNegativeFloat | None = None
    idealized_runtime_s: NonNegativeFloat | None = None
    discrepancy: NonNegativeFloat | None = None
    error_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    usd: NonNegativeFloat | None = None
    reference: Annotated[str, Field(max_length=200)] | None = Field(
        default=None, description="what the idealized runtime was computed on"
    )

    @field_validator("started_at", "finished_at")
    @classmethod
    def _utc(cls, moment: datetime) -> datetime:
        # One instant, one form: a round's content (and its fingerprint) does not depend on
        # the offset its times were written with.
        return moment.astimezone(timezone.utc)

    @model_validator(mode="after")
    def _consistent(self) -> RoundPoint:
        # Rules between fields; the service's OpenAPI description names each of them.
        if self.finished_at < self.started_at:
            raise ValueError("finished_at is before started_at")
        if self.failed_requests > self.requests:
            raise ValueError("failed_requests is more than requests")
        if (self.status == "failed") == (self.failed_requests < self.requests):
            raise ValueError(
                "status must be ok or degraded when some request succeeded and failed when none did"
            )
        if self.status == "degraded" and 2 * self.failed_requests <= self.requests:
            raise ValueError("status must be degraded only when most requests failed")
        return self

    @property
    def started_at_s(self) -> float:
        return self.started_at.timestamp()


class MonitorRound(RoundPoint):
    """A round with what it was computed from: the service stores the measurements as a
    measurement set and the shapes and summary beside the round."""

    shapes: Annotated[list[ProbeShape], Field(max_length=1000)] = Field(default_factory=list)
    summary: LoadSummary | None = None
    measurements: Annotated[list[Measurement], Field(max_length=100_000)] = Field(
        default_factory=list
    )

    def point(self) -> RoundPoint:
        return RoundPoint.model_validate(self.model_dump(include=set(RoundPoint.model_fields)))


def round_status(requests: int, failed_requests: int) -> RoundStatus:
    """failed when no request succeeded, degraded when most failed, else ok."""
    if failed_requests >= requests:
        return "failed"
    return "degraded" if 2 * failed_requests > requests else "ok"


def round_time(moment: datetime) -> str:
    """A round's time as people read it: UTC to the second."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
