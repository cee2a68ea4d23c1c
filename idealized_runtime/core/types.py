"""Domain types shared by every layer: runner, cost model, timing client, REST API and reports.

Everything that crosses a module boundary is one of these types. They are pydantic v2 models so
that the CLI, the JSON files and the REST API validate and serialise them the same way.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from idealized_runtime.core.errors import plain

Name = Annotated[str, Field(min_length=1, max_length=200)]
PositiveInt = Annotated[int, Field(gt=0)]
# Token counts are bounded so that a typo (or an attack) cannot ask for a 10^12-token estimate.
MAX_TOKENS = 10_000_000
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
# Durations outside these bounds are typos or unit mistakes (ns for s), and would overflow the
# relative-error weights of the fits: a request takes more than 0.1 us and less than 11.6 days.
MIN_RUNTIME_S = 1e-7
MAX_RUNTIME_S = 1e6
_RUNTIME_RANGE = {"minimum": MIN_RUNTIME_S, "maximum": MAX_RUNTIME_S}

Activation = Literal["gelu", "gelu_new", "relu", "silu", "swiglu", "geglu"]
Norm = Literal["layernorm", "rmsnorm"]
PositionEncoding = Literal["rotary", "learned", "alibi", "none"]
Dtype = Literal["float32", "float16", "bfloat16"]
FitMethod = Literal["helm", "default", "denoised"]
# How a FittedCostModel was made: a fit of timings (FitMethod), or tabulated from the analytic
# hardware model (cost_model/roofline.py), uncalibrated or with calibrated efficiencies.
ModelMethod = FitMethod | Literal["analytic", "calibrated"]
AlphaRule = Literal["helm_scale_up", "interpolate"]

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Architecture(_Frozen):
    """Shape of a decoder-only transformer; enough to build it with random weights and to count
    its FLOPs and bytes."""

    name: Name
    family: str = "gpt"
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt | None = None  # None: multi-head attention (= num_heads)
    head_dim: PositiveInt | None = None  # None: hidden_size // num_heads
    ffn_hidden_size: PositiveInt
    vocab_size: PositiveInt
    max_context: PositiveInt = 2048
    activation: Activation = "gelu"
    norm: Norm = "layernorm"
    norm_eps: float = 1e-5
    position: PositionEncoding = "learned"
    rotary_dim: PositiveInt | None = None  # partial rotary (GPT-J, GPT-NeoX); None: whole head
    rope_theta: float = 10000.0
    parallel_attn_mlp: bool = False  # GPT-J / GPT-NeoX: x + attn(ln(x)) + mlp(ln(x))
    parallel_mlp_norm: bool = False  # GPT-NeoX: parallel MLP has its own norm (GPT-J shares one)
    embedding_norm: bool = False  # BLOOM: LayerNorm right after the token embedding
    bias: bool = True  # biases on linear layers
    qkv_bias: bool | None = None  # None: same as bias (Qwen2 has QKV bias only)
    tie_embeddings: bool = False
    num_experts: PositiveInt = 1  # > 1: mixture of experts in every layer's MLP
    experts_per_token: PositiveInt = 1
    source: str = ""  # where the figures come from (paper, config URL)

    @model_validator(mode="after")
    def _check_shapes(self) -> Architecture:
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.kv_heads}"
            )
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def gated_mlp(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    def layer_parameters(self, active_only: bool = False) -> int:
        """Weights of one transformer layer (attention, MLP, norms, biases)."""
        h, d = self.hidden_size, self.dim_per_head
        q_out, kv_out = self.num_heads * d, self.kv_heads * d
        attn = h * q_out + 2 * h * kv_out + q_out * h
        qkv_bias = self.bias if self.qkv_bias is None else self.qkv_bias
        if qkv_bias:
            attn += q_out + 2 * kv_out
        if self.bias:
            attn += h
        mlp_in = 2 if self.gated_mlp else 1
        expert = mlp_in * h * self.ffn_hidden_size + self.ffn_hidden_size * h
        if self.bias:
            expert += mlp_in * self.ffn_hidden_size + h
        experts = self.experts_per_token if active_only else self.num_experts
        mlp = experts * expert + (h * self.num_experts if self.num_experts > 1 else 0)
        shared_norm = self.parallel_attn_mlp and not self.parallel_mlp_norm
        norms = (1 if shared_norm else 2) * (2 * h if self.norm == "layernorm" else h)
        return attn + mlp + norms

    def num_parameters(self, active_only: bool = False) -> int:
        """All weights (or those one token touches, for MoE) including embeddings and head."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        pos = self.max_context * self.hidden_size if self.position == "learned" else 0
        norm = 2 * self.hidden_size if self.norm == "layernorm" else self.hidden_size
        norms = norm * (2 if self.embedding_norm else 1)  # final norm (+ BLOOM's embedding norm)
        layers = self.num_layers * self.layer_parameters(active_only)
        return embed + head + pos + norms + layers

    def kv_cache_bytes_per_token(self, dtype: Dtype = "bfloat16") -> int:
        return 2 * self.num_layers * self.kv_heads * self.dim_per_head * DTYPE_BYTES[dtype]


class Hardware(_Frozen):
    """One accelerator kind, with the sources of its figures."""

    name: Name
    vendor: str = ""
    memory_gb: float = Field(gt=0)
    memory_bandwidth_gbps: float = Field(gt=0, description="HBM/GDDR bandwidth, GB/s")
    peak_dense_tflops: float = Field(gt=0, description="dense bf16/fp16 tensor-core TFLOP/s")
    unaligned_matmul_tflops: float | None = Field(
        default=None, gt=0, description="fp16 TFLOP/s of GEMMs off 16-byte alignment; None: peak"
    )
    interconnect_gbps: float = Field(default=0, ge=0, description="per-GPU in-node, GB/s, one way")
    board_power_w: float = Field(default=0, ge=0)
    hourly_price_usd: float = Field(default=0, ge=0)
    sources: dict[str, str] = Field(default_factory=dict)


class Stack(_Frozen):
    """The hardware/software stack a measurement was taken on."""

    runner: str = "idealized-runtime"  # e.g. "megatron-2022", "idealized-runtime", "api"
    hardware: str = "unknown"  # a Hardware.name, or "cpu"
    device_name: str = ""  # what the driver reports, e.g. "NVIDIA H100 80GB HBM3"
    num_devices: PositiveInt = 1
    tensor_parallel_size: PositiveInt = 1
    dtype: Dtype = "bfloat16"
    versions: dict[str, str] = Field(default_factory=dict)  # torch, cuda, driver, runner
    notes: str = ""


def check_runtime(value: float) -> str | None:
    """Why ``value`` is not a plausible duration in seconds, or None if it is."""
    if not math.isfinite(value):
        return "must be finite"
    if value <= 0:
        return "must be positive"
    if not MIN_RUNTIME_S <= value <= MAX_RUNTIME_S:
        return f"must be between {MIN_RUNTIME_S:g} and {MAX_RUNTIME_S:g} seconds"
    return None


def _finite_positive(value: float | None, field: str) -> float | None:
    if value is not None and (problem := check_runtime(value)):
        raise ValueError(f"{field} {problem}, got {plain(value)!r}")
    return value


class Measurement(_Frozen):
    """One timed request (or the median of repeats of it)."""

    model: Name
    num_prompt_tokens: TokenCount
    num_output_tokens: TokenCount
    batch_size: PositiveInt = Field(default=1, le=MAX_TOKENS)  # also fits a database integer
    # The validator below checks the range; the schema says it too (for API clients).
    runtime_s: float = Field(json_schema_extra=_RUNTIME_RANGE)
    ttft_s: float | None = Field(default=None, json_schema_extra=_RUNTIME_RANGE)
    std_s: float | None = Field(default=None, ge=0)

    @field_validator("runtime_s", "ttft_s")
    @classmethod
    def _positive(cls, value: float | None, info: object) -> float | None:
        return _finite_positive(value, getattr(info, "field_name", "runtime"))


class FitQuality(_Frozen):
    """How well a fit reproduces the data it was fitted on."""

    n_points: int
    r2: float
    mape: float  # mean absolute percentage error, as a fraction (0.01 = 1%)
    max_error: float  # max absolute percentage error, as a fraction


class FittedCostModel(_Frozen):
    """runtime(p, o) = alpha(p) + beta(p, o) * (o - 1) + overhead, per model.

    alpha is tabulated at profiled prompt sizes and evaluated by ``alpha_rule``:
    ``helm_scale_up`` is HELM's rule (next larger profiled size, scaled by p / size);
    ``interpolate`` is piecewise linear between sizes, linear extrapolation beyond them.
    The per-token time grows with the context: decode step i (1-based) reads p + i - 1 cached
    tokens and costs ``beta_s + beta_per_context_token_s * (p + i - 1)``, so summed over the
    o - 1 decode steps:
        (o - 1) * beta_s + beta_per_context_token_s * ((o - 1) * p + (o - 1) * (o - 2) / 2).
    HELM's model is the special case beta_per_context_token_s = 0.
    """

    model: Name
    method: ModelMethod
    alpha_rule: AlphaRule
    prompt_sizes: list[int]
    prompt_runtimes_s: list[float]
    beta_s: float = Field(ge=0)
    beta_per_context_token_s: float = Field(default=0.0, ge=0)
    overhead_s: float | None = None  # fixed per-request overhead (remote APIs); None: not given
    stack: Stack | None = None
    quality: FitQuality | None = None
    # Bootstrap confidence intervals, parameter name -> (low, high); denoised fits.
    confidence_intervals: dict[str, tuple[float, float]] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_table(self) -> FittedCostModel:
        if not self.prompt_sizes or len(self.prompt_sizes) != len(self.prompt_runtimes_s):
            raise ValueError(
                "prompt_sizes and prompt_runtimes_s must be non-empty, of equal length"
            )
        if list(self.prompt_sizes) != sorted(set(self.prompt_sizes)) or self.prompt_sizes[0] < 1:
            raise ValueError("prompt_sizes must be strictly increasing positive integers")
        if not all(math.isfinite(t) and t >= 0 for t in self.prompt_runtimes_s):
            raise ValueError("prompt_runtimes_s must be finite and non-negative")
        return self


class RequestRecord(_Frozen):
    """One request of a workload or log: what was asked, and how long it took if measured."""

    model: Name
    num_prompt_tokens: TokenCount
    num_output_tokens: TokenCount
    runtime_s: float | None = None
    ttft_s: float | None = None
    timestamp: datetime | None = None
    scenario: str | None = None

    @field_validator("runtime_s", "ttft_s")
    @classmethod
    def _positive(cls, value: float | None, info: object) -> float | None:
        return _finite_positive(value, getattr(info, "field_name", "runtime"))
