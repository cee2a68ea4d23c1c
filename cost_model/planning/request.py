"""What a plan is asked for and what it answers: ``PlanRequest`` in, ``PlanResult`` out.

Both are validated values (pydantic, unknown fields refused), so the CLI, the REST API and the
report read and write the same shapes; the REST API's body and response are these.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from idealized_runtime.core.types import (
    FORMAT_BITS,
    Architecture,
    Disaggregation,
    Hardware,
    Name,
    Slo,
    SpeculativeDecoding,
    layout_label,
)

Mode = Literal["aggregated", "disaggregated"]
IDEAL_STACK = "ideal"  # the roofline hardware model on an ideal server: the reference line
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
MAX_TOKENS = 1_000_000


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlanWorkload(_Value):
    """The requests to serve: prompt and output tokens (each drawn evenly from
    ``min_length_fraction`` x to 1 x the stated length, as InferenceX's client does with 0.8;
    1: fixed lengths), and the prompts' shared prefixes (``shared_prefix_tokens`` common to the
    prompts of each of ``prefix_groups`` groups) or a prefix-cache hit rate (not both: the plan
    refuses that in one line, ``serving.prefix_cache.PrefixSharing``)."""

    prompt_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS)]
    # At least two: a plan trades tokens/s per GPU against tokens/s per user (1 / TPOT).
    output_tokens: Annotated[int, Field(le=MAX_TOKENS, json_schema_extra={"minimum": 2})]
    min_length_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    shared_prefix_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = 0
    prefix_groups: Annotated[int, Field(ge=1, le=MAX_TOKENS)] = 1
    prefix_hit_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None

    @field_validator("output_tokens")
    @classmethod
    def _decoded(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"a plan needs at least 2 output tokens, not {value}: it trades output tokens/s "
                "per GPU against tokens/s per user (1 / TPOT), which a request of one output "
                "token does not have (its runtime is its TTFT: see estimate)"
            )
        return value


class PlanSettings(_Value):
    """What a plan searches, for ``workload`` under ``slo``: ``stacks`` (engine stacks and
    ``ideal``; default all), ``weights`` formats (default: the checkpoint's own and the smaller
    formats the GPU computes natively; ``kv_cache``: the KV-cache formats, default the engines'
    for the weights and fp8 where the GPU computes in fp8 (every engine's fp8 cache: it holds
    twice the tokens and halves what decode attention reads); ``activations``: the matmuls'
    input format, default the engines'),
    layouts of up to ``max_gpus`` GPUs per replica (attention data-parallel ones unless
    ``attention_dp`` is off), the ``modes``, closed-loop ``concurrency``
    levels per replica, per rank of an attention-DP instance (refined between them around each
    deployment's knee; none above ``max_concurrency`` clients per replica), and the engines'
    token budgets per step (``token_budgets``; default: ``space.TOKEN_BUDGETS``, pruned per
    engine); ``rate``: requests/s to size the fleet for. ``verify``: simulate the best
    configuration request by request (``requests_per_client`` requests per client, at most
    ``max_verify_requests`` but at least three per client: ``search.verification_requests``);
    when its simulation misses the SLO, the next best, up to ``verify_candidates`` in all."""

    stacks: Annotated[list[Name], Field(min_length=1, max_length=8)] | None = None
    workload: PlanWorkload
    slo: Slo = Slo()
    rate: Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)] | None = None
    weights: Annotated[list[Name], Field(min_length=1, max_length=8)] | None = None
    kv_cache: Annotated[list[Name], Field(min_length=1, max_length=4)] | None = None
    # The matmuls' input format (None: the engines' default for the weights); fp8 with MXFP4
    # experts is W4A8, as vLLM serves them with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8.
    activations: Name | None = None
    # The MoE runner the engines are launched with (None: each engine's default): a runner an
    # engine has measured beside its default on a GPU (``GpuKernels.moe_runners``: SGLang's
    # "triton" for bf16 experts on Blackwell); the stacks and GPUs without it are refused.
    moe_runner: Name | None = None
    mtp: bool = True  # search multi-token prediction where a model's acceptance is published
    attention_dp: bool = True  # search attention data parallelism (a mixture of experts)
    modes: Annotated[list[Mode], Field(min_length=1, max_length=2)] = [
        "aggregated",
        "disaggregated",
    ]
    max_gpus: Annotated[int, Field(ge=1, le=64)] = 16
    concurrency: Annotated[list[Annotated[int, Field(ge=1, le=65536)]], Field(min_length=1,
                           max_length=32)] = list(DEFAULT_CONCURRENCY)  # fmt: skip
    # The most clients per replica (None: no bound): an attention-DP instance's levels, per rank,
    # stop there (a fleet whose users per replica are known: "at most 128 at once").
    max_concurrency: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    token_budgets: Annotated[list[Annotated[int, Field(ge=64, le=MAX_TOKENS)]],
                             Field(min_length=1, max_length=8)] | None = None  # fmt: skip
    verify: bool = True
    requests_per_client: Annotated[int, Field(ge=1, le=100)] = 5
    # Five rounds at up to 800 clients: with three, the steady window's tokens/s still runs
    # ~10% high (gpt-oss-120b vLLM H200 TP 4 DP 4, 320 clients: 4,938 on 1,000 requests,
    # 4,462 on five rounds, 4,465 on twelve).
    max_verify_requests: Annotated[int, Field(ge=1, le=100_000)] = 4000
    # Candidates simulated, best estimate first, until one meets the SLO in its simulation.
    verify_candidates: Annotated[int, Field(ge=1, le=100)] = 8

    @field_validator("kv_cache", mode="before")
    @classmethod
    def _one_format_is_a_list(cls, value: object) -> object:
        """One format ("fp8") asks for that one alone, as a list of one does."""
        return [value] if isinstance(value, str) else value


class PlanRequest(PlanSettings):
    """A plan's question: serve ``architecture`` on one of ``hardware`` (see ``PlanSettings``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    architecture: Architecture
    hardware: Annotated[list[Hardware], Field(min_length=1, max_length=16)]


class PlanPoint(_Value):
    """One deployment at one load: its layout, what users see (TTFT, TPOT), what it serves
    (tokens/s per GPU), and what a million output tokens cost."""

    hardware: Name
    stack: Name
    weights: Name  # the weight format (``Precision.weights``)
    kv_cache: Name
    # The matmuls' input format (``Precision.activations``): fp8 with MXFP4 experts is W4A8.
    activations: Name = "bf16"
    mode: Mode
    tp: int
    ep: int = 1
    attention_dp: int = 1
    disaggregation: Disaggregation | None = None
    # Tokens per step (per attention-DP rank where the engine counts so); None: the ideal
    # server's, or the engine's default (sized for the prompts where it does not chunk them).
    token_budget: int | None = None
    speculative: SpeculativeDecoding | None = None  # multi-token prediction
    memory_fraction: float | None = None  # the engine's KV memory fraction (None: default)
    moe_runner: Name | None = None  # the engine's MoE runner (None: its default)
    gpus: int  # per replica
    concurrency: int  # closed-loop clients per replica
    ttft_s: float
    tpot_s: float
    tokens_per_s_per_user: float
    output_tokens_per_s_per_gpu: float
    requests_per_s: float  # per replica
    meets_slo: bool
    usd_per_million_tokens: float | None = None
    joules_per_million_tokens: float | None = None

    @property
    def layout(self) -> str:
        """``tp4``, ``tp8 ep8 dp8``, or ``2P(tp4)1D tp8`` for a disaggregated one; then its
        knobs: ``mtp3`` (draft tokens), ``kv0.95`` (KV memory fraction), ``kv:fp8`` (an 8-bit
        KV cache), ``w4a8``, ``moe:triton`` (the MoE runner)."""
        text = layout_label(self.tp, self.ep, self.attention_dp)
        if self.disaggregation is not None:
            text = f"{self.disaggregation.label} {text}"
        if self.speculative is not None:
            text += f" mtp{self.speculative.draft_tokens}"
        if self.memory_fraction is not None:
            text += f" kv{self.memory_fraction:g}"
        if FORMAT_BITS.get(self.kv_cache, 16) <= 8:
            text += f" kv:{self.kv_cache}"  # an 8-bit KV cache
        if self.weights == "mxfp4" and self.activations == "fp8":
            text += " w4a8"  # MXFP8 activations into the MXFP4 experts
        if self.moe_runner:
            text += f" moe:{self.moe_runner}"
        return text

    @property
    def label(self) -> str:
        budget = f" budget {self.token_budget}" if self.token_budget is not None else ""
        return f"{self.stack} {self.weights} {self.layout}{budget} c={self.concurrency}"


class Frontier(_Value):
    """The Pareto frontier of one GPU and engine: by tokens/s per user, ascending."""

    hardware: Name
    stack: Name
    points: list[PlanPoint]


class Verification(_Value):
    """The best configuration simulated request by request (``simulate``)."""

    requests: int
    ttft_p50_s: float
    ttft_p90_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    # Output tokens/s per GPU while every client is in its steady cycle (the run's ramp-up and
    # drain left out, ``search.steady_output_tokens_per_s``), and over the whole run.
    output_tokens_per_s_per_gpu: float
    run_output_tokens_per_s_per_gpu: float | None = None
    meets_slo: bool  # the medians against the SLO
    passes: int = 1  # closed-loop passes of a disaggregated simulation


class Refusal(_Value):
    """Deployments left out of the search, and why (one line)."""

    reason: str
    count: int


class PlanResult(_Value):
    """The answer: frontiers per GPU and engine, the best configuration under the SLO (None
    when none meets it; with ``verify``, the best whose simulation meets it) and the best per
    GPU, the fleet for the rate, and the search's size."""

    model: Name
    workload: PlanWorkload
    slo: Slo
    rate: float | None
    frontiers: list[Frontier]
    best: PlanPoint | None
    best_per_hardware: list[PlanPoint]
    replicas: int | None = None
    gpus_for_rate: int | None = None
    verification: Verification | None = None
    # Candidates simulated to find ``best`` (0: not verified); those whose simulation missed the
    # SLO, best estimate first. With every candidate tried missing it, ``best`` is None.
    verified: int = 0
    rejected: list[PlanPoint] = []
    rejected_checks: list[Verification] = []  # the simulation of each of ``rejected``, in order
    deployments: int  # configurations searched
    evaluated: int  # (configuration, load) points
    seconds: float  # search time, verification excluded
    refused: list[Refusal] = []
