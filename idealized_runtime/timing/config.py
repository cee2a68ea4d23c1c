"""What one measurement run is given (``MeasureConfig``) and what it reports
(``MeasureSummary``): the server, the model, the grid or trace, the load level, retries and the
over-saturation limits; then the counts of rows written, failures and how prompts were built."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.conversations import Conversation
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.load_patterns import TraceRequest

Endpoint = Literal["completions", "chat"]
SESSIONS_LOAD = "sessions"  # the load label of conversations (":concurrency=C" with C at a time)
ENDPOINT_PATHS = {"completions": "/completions", "chat": "/chat/completions"}


class MeasureConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(description="e.g. http://127.0.0.1:8000/v1 (/v1 added if no path)")
    model: str = Field(min_length=1, description="model name sent to the server")
    label: str | None = Field(default=None, description="model name written to rows")
    api_key_env: str | None = Field(default=None, description="environment variable of the key")
    endpoint: Endpoint = "completions"
    grid: list[GridPoint]
    repeats: int = Field(default=3, ge=1, le=10_000)
    concurrency: int = Field(default=1, ge=1, le=4096)
    rate: float | None = Field(default=None, gt=0, description="Poisson arrivals per second")
    stream: bool = True
    tokenizer: str | None = None
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=5, ge=0, le=100)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    retry_budget_s: float | None = Field(
        default=None,
        ge=0,
        description="seconds of waits between retries in the whole run; a retry that would "
        "exceed them is not made (None: no limit)",
    )
    fixed_length_fields: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)
    shuffle: bool = True  # random order spreads slow periods of the server over the grid
    seed: int = 0
    prompt_variant: int = Field(
        default=0,
        ge=0,
        description="added to each repeat's prompt variant: another run of the same grid gets "
        "other prompts (with a tokenizer), which a prefix cache cannot answer from the last run",
    )
    max_in_flight: int = Field(default=256, ge=1)
    workload: list[TraceRequest] | None = Field(
        default=None, description="replay these arrivals instead of the grid (load 'trace')"
    )
    conversations: list[Conversation] | None = Field(
        default=None,
        description="multi-turn sessions instead of the grid: each turn resends the history",
    )
    sessions_in_flight: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="conversations at a time (closed loop); None: each starts at its arrival",
    )
    start_at_s: float | None = Field(
        default=None,
        description="wall-clock time (Unix seconds) at which a trace's earliest arrival is sent",
    )
    level_label: str | None = Field(default=None, description="load label written to rows")
    # An open-loop level (rate, trace) stops offering requests when the server is over-saturated:
    # more than stop_in_flight requests open at once (the queue is growing), or more than
    # stop_error_rate of at least stop_min_finished finished requests failed.
    stop_in_flight: int | None = Field(default=None, ge=1)
    stop_error_rate: float = Field(default=0.5, gt=0, le=1)
    stop_min_finished: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _one_workload(self) -> MeasureConfig:
        if self.workload is not None and self.conversations is not None:
            raise ValueError("a trace and conversations exclude one another")
        return self

    @property
    def recorded_model(self) -> str:
        return self.label or self.model

    @property
    def url(self) -> str:
        parts = urlsplit(self.base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(
                f"base URL must be http(s)://host[:port][/path], got {self.base_url!r}"
            )
        path = parts.path or "/v1"
        return (
            urlunsplit((parts.scheme, parts.netloc, path, "", "")) + ENDPOINT_PATHS[self.endpoint]
        )

    @property
    def load(self) -> str:
        if self.level_label:
            return self.level_label
        if self.conversations is not None:
            if self.sessions_in_flight is not None:
                return f"{SESSIONS_LOAD}:concurrency={self.sessions_in_flight}"
            return SESSIONS_LOAD
        if self.workload is not None:
            return "trace"
        if self.rate is not None:
            return f"rate={float(self.rate)}"
        return f"concurrency={self.concurrency}"


class MeasureSummary(BaseModel):
    output: str
    planned: int  # (grid point, repeat) requests in the config
    already_done: int  # found in the output file when the run started
    written: int  # rows appended by this run
    ok: int
    failed: int
    usage_mismatches: int
    interrupted: bool
    elapsed_s: float
    dropped_fields: list[str]
    prompt_source: str
    prompt_offset: int
    load: str = ""
    stopped: str | None = None  # why an over-saturated level stopped early
