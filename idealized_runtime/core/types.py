"""Domain types shared by every layer: runner, cost model, timing client, REST API and reports.

Everything that crosses a module boundary is one of these types. They are pydantic v2 models so
that the CLI, the JSON files and the REST API validate and serialise them the same way.

One concern, kept in one module on purpose: the vocabulary every layer shares (architecture,
hardware, precision, deployment and stack efficiency, provenance, measurement, fitted cost model,
request record, load summary), so that a type has one definition and one place to look it up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from idealized_runtime.core.errors import InputError, plain

Name = Annotated[str, Field(min_length=1, max_length=200)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# Token counts are bounded so that a typo (or an attack) cannot ask for a 10^12-token estimate.
MAX_TOKENS = 10_000_000
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
# Output tokens of a request may be 0: HELM's language-modeling scenarios only score the prompt,
# and their runtime is alpha(p) alone (the prompt pass), exactly as HELM's rule.
OutputTokenCount = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
# Durations outside these bounds are typos or unit mistakes (ns for s), and would overflow the
# relative-error weights of the fits: a request takes more than 0.1 us and less than 11.6 days.
MIN_RUNTIME_S = 1e-7
MAX_RUNTIME_S = 1e6
_RUNTIME_RANGE = {"minimum": MIN_RUNTIME_S, "maximum": MAX_RUNTIME_S}

# geglu_tanh: gated GELU with the tanh approximation (Gemma's gelu_pytorch_tanh).
Activation = Literal["gelu", "gelu_new", "relu", "silu", "swiglu", "geglu", "geglu_tanh"]
AttentionKind = Literal["full", "sliding"]
RouterScoring = Literal["softmax", "sigmoid"]
Norm = Literal["layernorm", "rmsnorm"]
PositionEncoding = Literal["rotary", "learned", "alibi", "none"]
Dtype = Literal["float32", "float16", "bfloat16"]
FitMethod = Literal["helm", "default", "denoised"]
# How a FittedCostModel was made: a fit of timings (FitMethod), or tabulated from the analytic
# hardware model (cost_model/roofline.py), uncalibrated or with calibrated efficiencies.
ModelMethod = FitMethod | Literal["analytic", "calibrated"]
# helm_scale_up: HELM's lookup of `runtime_for_prompt_tokens` tables (every release);
# helm_next_size: its lookup of the older `runtime_for_input_tokens` tables (2022 code).
AlphaRule = Literal["helm_scale_up", "helm_next_size", "interpolate"]

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RopeScaling(_Frozen):
    """YaRN context extension of RoPE (DeepSeek-V3, gpt-oss; Peng et al. 2023): low frequencies
    interpolated by ``factor``, high ones kept, a linear ramp between the dimensions that turn
    ``beta_fast`` and ``beta_slow`` times over ``original_max_context``; cos and sin scaled by
    ``attention_factor`` (None: derived from factor and the mscales)."""

    kind: Literal["yarn"] = "yarn"
    factor: float = Field(gt=0)
    original_max_context: PositiveInt
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None  # DeepSeek: softmax scale times mscale(all_dim) ** 2
    attention_factor: float | None = None
    truncate: bool = True  # round the ramp's ends to whole dimensions (gpt-oss: False)


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
    rope_scaling: RopeScaling | None = None  # None: plain RoPE
    parallel_attn_mlp: bool = False  # GPT-J / GPT-NeoX: x + attn(ln(x)) + mlp(ln(x))
    parallel_mlp_norm: bool = False  # GPT-NeoX: parallel MLP has its own norm (GPT-J shares one)
    embedding_norm: bool = False  # BLOOM: LayerNorm right after the token embedding
    bias: bool = True  # biases on linear layers
    qkv_bias: bool | None = None  # None: same as bias (Qwen2 has QKV bias only)
    tie_embeddings: bool = False
    num_experts: PositiveInt = 1  # > 1: mixture of experts in every layer's MLP
    experts_per_token: PositiveInt = 1
    # Attention variants.
    qk_norm: bool = False  # Qwen3, Gemma 3: RMSNorm over each head's q and k before RoPE
    sliding_window: PositiveInt | None = None  # keys a sliding layer sees, itself included
    # Layer i's attention is layer_pattern[i % len(layer_pattern)] (Gemma 3: 5 sliding, 1 full).
    layer_pattern: tuple[AttentionKind, ...] = ("full",)
    sliding_rope_theta: float | None = None  # Gemma 3: RoPE base of sliding layers
    attn_logit_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap)
    final_logit_softcap: float | None = None  # Gemma 2: the same on the output logits
    query_pre_attn_scalar: float | None = None  # Gemma: scores scaled by 1/sqrt(this), not head
    attention_sinks: bool = False  # gpt-oss: a learned logit per head joins every softmax
    # Multi-head latent attention (DeepSeek-V2/V3), set when kv_lora_rank is: queries through a
    # q_lora_rank bottleneck (None: a plain projection), keys and values from a cached
    # kv_lora_rank latent, plus one shared qk_rope_head_dim RoPE key per token.
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    # Norms and embeddings (Gemma).
    sandwich_norm: bool = False  # RMSNorms on the attention and MLP outputs too (4 per layer)
    norm_unit_offset: bool = False  # norms scale by (1 + weight)
    scale_embeddings: bool = False  # token embeddings multiplied by sqrt(hidden_size)
    # Mixture-of-experts details.
    moe_ffn_hidden_size: PositiveInt | None = None  # one expert's width; None: ffn_hidden_size
    num_shared_experts: NonNegativeInt = 0  # DeepSeek: experts every token goes through
    first_k_dense_layers: NonNegativeInt = 0  # DeepSeek: first k layers use a dense MLP (ffn)
    router_scoring: RouterScoring = "softmax"  # sigmoid: DeepSeek-V3 (+ selection bias buffer)
    norm_topk_prob: bool = True  # renormalise the chosen experts' weights to sum to 1
    n_group: PositiveInt = 1  # DeepSeek-V3 group-limited routing: experts in n_group groups,
    topk_group: PositiveInt = 1  # tokens choose experts only in their topk_group best groups
    routed_scaling_factor: float = 1.0  # routed experts' output multiplied by this
    router_bias: bool = False  # gpt-oss: the router linear has a bias
    swiglu_limit: float | None = None  # gpt-oss: clamped SwiGLU (up + 1) * g * sigmoid(alpha g)
    swiglu_alpha: float = 1.702
    # The precision the published checkpoint ships in (quantization_config: fp8, mxfp4); None: bf16.
    precision: Precision | None = None
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
        if "sliding" in self.layer_pattern and self.sliding_window is None:
            raise ValueError("layer_pattern has sliding layers but sliding_window is not set")
        if not self.layer_pattern:
            raise ValueError("layer_pattern must name at least one attention kind")
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if any(value is not None for value in mla) and None in mla:
            raise ValueError(
                "multi-head latent attention needs kv_lora_rank, qk_nope_head_dim, "
                "qk_rope_head_dim and v_head_dim"
            )
        if self.q_lora_rank is not None and self.kv_lora_rank is None:
            raise ValueError("q_lora_rank needs multi-head latent attention (kv_lora_rank)")
        if self.num_experts % self.n_group or self.topk_group > self.n_group:
            raise ValueError(
                f"group-limited routing needs n_group ({self.n_group}) dividing num_experts "
                f"({self.num_experts}) and topk_group ({self.topk_group}) <= n_group"
            )
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def gated_mlp(self) -> bool:
        return self.activation in ("swiglu", "geglu", "geglu_tanh")

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek)."""
        return self.kv_lora_rank is not None

    @property
    def expert_ffn_hidden_size(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    def attention_kind(self, layer: int) -> AttentionKind:
        return self.layer_pattern[layer % len(self.layer_pattern)]

    def is_moe_layer(self, layer: int) -> bool:
        return self.num_experts > 1 and layer >= self.first_k_dense_layers

    def check_context(self, prompt_tokens: int, output_tokens: int) -> None:
        """InputError when a request of ``prompt_tokens`` + ``output_tokens`` is longer than
        the model's context (engines refuse such a request before serving it)."""
        if prompt_tokens + output_tokens > self.max_context:
            raise InputError(
                f"{prompt_tokens} prompt + {output_tokens} output tokens exceed the context "
                f"length of {self.name} ({self.max_context} tokens)"
            )

    def attention_parameters(self) -> int:
        """Weights of one layer's attention (projections, biases, q/k norms, sinks)."""
        h = self.hidden_size
        if self.mla:
            qk_dim = self.qk_nope_head_dim + self.qk_rope_head_dim  # type: ignore[operator]
            q_out = self.num_heads * qk_dim
            if self.q_lora_rank:  # down-projection, its norm, up-projection
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * q_out
            else:
                q = h * q_out
            kv_rank = self.kv_lora_rank or 0
            kv_down = h * (kv_rank + self.qk_rope_head_dim) + kv_rank  # (+ latent norm)
            kv_up = kv_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)  # type: ignore[operator]
            out = self.num_heads * self.v_head_dim * h  # type: ignore[operator]
            return q + kv_down + kv_up + out + (h if self.bias else 0)
        d = self.dim_per_head
        q_out, kv_out = self.num_heads * d, self.kv_heads * d
        attn = h * q_out + 2 * h * kv_out + q_out * h
        qkv_bias = self.bias if self.qkv_bias is None else self.qkv_bias
        if qkv_bias:
            attn += q_out + 2 * kv_out
        if self.bias:
            attn += h
        if self.qk_norm:
            attn += 2 * d
        if self.attention_sinks:
            attn += self.num_heads
        return attn

    def _mlp_parameters(self, width: int) -> int:
        h, mlp_in = self.hidden_size, 2 if self.gated_mlp else 1
        params = mlp_in * h * width + width * h
        return params + (mlp_in * width + h if self.bias else 0)

    def mlp_parameters(self, layer: int, active_only: bool = False) -> int:
        """Weights of layer ``layer``'s MLP: dense, or router + experts (+ shared experts);
        ``active_only``: those one token touches."""
        if not self.is_moe_layer(layer):
            return self._mlp_parameters(self.ffn_hidden_size)
        h, e = self.hidden_size, self.num_experts
        expert = self._mlp_parameters(self.expert_ffn_hidden_size)
        experts = self.experts_per_token if active_only else e
        # DeepSeek-V3's per-expert selection bias is a buffer, not a weight (as in HF).
        router = h * e + (e if self.router_bias else 0)
        shared = self.num_shared_experts * expert
        return router + experts * expert + shared

    def layer_parameters(self, active_only: bool = False, layer: int | None = None) -> int:
        """Weights of one transformer layer (attention, MLP, norms, biases); ``layer`` None: the
        last layer (an MoE layer when the model mixes dense and MoE layers)."""
        h = self.hidden_size
        index = self.num_layers - 1 if layer is None else layer
        shared_norm = self.parallel_attn_mlp and not self.parallel_mlp_norm
        norm_count = (1 if shared_norm else 2) + (2 if self.sandwich_norm else 0)
        norms = norm_count * (2 * h if self.norm == "layernorm" else h)
        return self.attention_parameters() + self.mlp_parameters(index, active_only) + norms

    def num_parameters(self, active_only: bool = False) -> int:
        """All weights (or those one token touches, for MoE) including embeddings and head."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        pos = self.max_context * self.hidden_size if self.position == "learned" else 0
        norm = 2 * self.hidden_size if self.norm == "layernorm" else self.hidden_size
        norms = norm * (2 if self.embedding_norm else 1)  # final norm (+ BLOOM's embedding norm)
        # Closed form (num_layers can be any size in a request): dense layers, then MoE ones.
        dense = min(self.first_k_dense_layers, self.num_layers) if self.num_experts > 1 else 0
        moe = self.num_layers - dense
        layers = dense * self.layer_parameters(active_only, 0)
        layers += moe * self.layer_parameters(active_only, self.num_layers - 1)
        return embed + head + pos + norms + layers

    def kv_cache_values_per_token(self) -> int:
        """Values one layer caches per token: keys and values of each KV head, or MLA's latent
        plus its RoPE key."""
        if self.mla:
            return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        return 2 * self.kv_heads * self.dim_per_head

    def kv_cache_bytes(self, num_tokens: int, dtype: Dtype = "bfloat16") -> int:
        """Bytes of one sequence's KV cache holding ``num_tokens`` tokens: sliding-window
        layers keep at most the window."""
        window = min(num_tokens, self.sliding_window or num_tokens)
        sliding = self.num_sliding_layers()
        tokens = sliding * window + (self.num_layers - sliding) * num_tokens
        return tokens * self.kv_cache_values_per_token() * DTYPE_BYTES[dtype]

    def num_sliding_layers(self) -> int:
        cycles, rest = divmod(self.num_layers, len(self.layer_pattern))
        count = self.layer_pattern.count("sliding")
        return cycles * count + self.layer_pattern[:rest].count("sliding")

    def kv_cache_bytes_per_token(
        self, dtype: Dtype = "bfloat16", context_tokens: int | None = None
    ) -> int | float:
        """KV-cache bytes per token of context: every layer's share (None: contexts within
        the sliding window), or the mean over a context of ``context_tokens`` tokens."""
        if context_tokens is None:
            return self.num_layers * self.kv_cache_values_per_token() * DTYPE_BYTES[dtype]
        return self.kv_cache_bytes(context_tokens, dtype) / context_tokens


class Hardware(_Frozen):
    """One accelerator kind, with the sources of its figures."""

    name: Name
    vendor: str = ""
    memory_gb: float = Field(gt=0)
    driver_memory_mib: int | None = Field(
        default=None,
        gt=0,
        description="memory the driver reports (nvidia-smi memory.total), MiB; None: memory_gb",
    )
    memory_bandwidth_gbps: float = Field(gt=0, description="HBM/GDDR bandwidth, GB/s")
    peak_dense_tflops: float = Field(gt=0, description="dense bf16/fp16 tensor-core TFLOP/s")
    unaligned_matmul_tflops: float | None = Field(
        default=None, gt=0, description="fp16 TFLOP/s of GEMMs off 16-byte alignment; None: peak"
    )
    peak_fp8_tflops: float | None = Field(
        default=None, gt=0, description="dense fp8 tensor-core TFLOP/s; None: no fp8 tensor cores"
    )
    peak_int8_tops: float | None = Field(
        default=None, gt=0, description="dense int8 tensor-core TOP/s; None: none"
    )
    peak_fp4_tflops: float | None = Field(
        default=None, gt=0, description="dense fp4 (NVFP4) tensor-core TFLOP/s; None: none"
    )
    interconnect_gbps: float = Field(default=0, ge=0, description="per-GPU in-node, GB/s, one way")
    scale_up_gpus: int | None = Field(
        default=None,
        gt=0,
        description="GPUs one NVLink/xGMI domain joins at interconnect_gbps (8 on HGX boards, "
        "72 on GB200 NVL72); None: not stated",
    )
    board_power_w: float = Field(default=0, ge=0)
    hourly_price_usd: float = Field(default=0, ge=0)
    sources: dict[str, str] = Field(default_factory=dict)

    def __hash__(self) -> int:  # ``sources`` is a dict: hash the GPU's figures by their text
        return hash(self.model_dump_json())

    @property
    def device_memory_bytes(self) -> float:
        """Bytes an engine sizes its memory fraction from (what ``torch.cuda.mem_get_info``
        reports): the driver's total where known; marketed figures are often GiB, not GB."""
        if self.driver_memory_mib is not None:
            return float(self.driver_memory_mib) * 2**20
        return self.memory_gb * 1e9


# --- Numeric precision ------------------------------------------------------------------------
# Formats by their short names. Weights may be quantized (weight-only: dequantized into the
# activation dtype per matmul; fp8 weights with fp8 activations: fp8 tensor-core GEMMs).
WeightFormat = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4"]
KvCacheFormat = Literal["fp32", "bf16", "fp16", "fp8", "int8"]
# fp4: NVFP4 matmuls on Blackwell's fp4 tensor cores (W4A4), with nvfp4 weights.
ActivationFormat = Literal["fp32", "bf16", "fp16", "fp8", "fp4"]
QuantizedScope = Literal["linear", "experts"]
WEIGHT_FORMATS: tuple[str, ...] = (
    "bf16", "fp16", "fp32", "fp8", "fp8-block", "int8", "int4", "mxfp4", "nvfp4",
)  # fmt: skip
KV_CACHE_FORMATS: tuple[str, ...] = ("bf16", "fp16", "fp32", "fp8", "int8")
ACTIVATION_FORMATS: tuple[str, ...] = ("bf16", "fp16", "fp32", "fp8", "fp4")
FORMAT_BITS: dict[str, int] = {
    "fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "mxfp4": 4, "nvfp4": 4,
    "fp4": 4,
}  # fmt: skip
DENSE_FORMATS: dict[str, Dtype] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
FORMAT_OF_DTYPE: dict[str, str] = {dtype: name for name, dtype in DENSE_FORMATS.items()}
# Groupwise quantization stores, per group of N weights along the input dimension, a 16-bit
# scale, and for int4 also a 4-bit zero point (the AWQ/GPTQ/tinygemm layouts). int4 without a
# group size means groups of 128, the common checkpoint layout; int8 without one means one scale
# per output channel (negligible bytes). MXFP4 (OCP microscaling): groups of 32 share an 8-bit
# power-of-two scale, 4.25 bits per weight.
DEFAULT_INT4_GROUP = 128
MXFP4_GROUP = 32
# NVFP4 (NVIDIA, Blackwell): groups of 16 share an fp8 (e4m3) scale, 4.5 bits per weight (the
# per-tensor fp32 scale is negligible).
NVFP4_GROUP = 16
GROUPED_FORMATS: tuple[str, ...] = ("int8", "int4")
_GROUP_SCALE_BITS = {"int8": 16, "int4": 16 + 4, "mxfp4": 8, "nvfp4": 8}
# fp8 weights scaled per 128 x 128 block (DeepSeek-V3/R1's checkpoint): the same bytes as
# per-tensor fp8 (the scales are negligible), but other GEMM kernels.
FP8_BLOCK = "fp8-block"


# The labels the parser accepts, for the API schema (group sizes: powers of two from 8 to 4096).
_GROUPS = "|".join(str(2**k) for k in range(3, 13))
WEIGHT_LABEL_PATTERN = (
    rf"^(bf16|fp16|fp32|fp8|fp8-block|mxfp4(-g32)?|nvfp4(-g16)?|int8(-g({_GROUPS}))?"
    rf"|int4(-g({_GROUPS}))?)$"
)


def _canonical_label(value: str) -> str:
    """A weight label as Precision keeps it (``MXFP4-g32`` -> ``mxfp4``, ``int4-g128``)."""
    if value.strip().lower() == FP8_BLOCK:
        return FP8_BLOCK
    name, group = _parse_weight_label(value)
    if name in ("mxfp4", "nvfp4") or group is None:
        return name
    return f"{name}-g{group}"


def _parse_weight_label(text: str) -> tuple[str, int | None]:
    """``int4-g128`` -> ("int4", 128); a one-line ValueError for anything else."""
    value = text.strip().lower()
    if value == FP8_BLOCK:
        return "fp8", None
    name, _, suffix = value.partition("-g")
    if name == "nvfp4":
        if suffix and suffix != str(NVFP4_GROUP):
            raise ValueError(f"nvfp4 groups are {NVFP4_GROUP} weights, got {text!r}")
        return name, NVFP4_GROUP
    if name in DENSE_FORMATS or name == "fp8":
        if suffix or "-" in value:
            raise ValueError(f"weight format {text!r} takes no group size")
        return name, None
    if name == "mxfp4":
        if suffix and suffix != str(MXFP4_GROUP):
            raise ValueError(f"mxfp4 groups are {MXFP4_GROUP} weights, got {text!r}")
        return name, MXFP4_GROUP
    if name in GROUPED_FORMATS:
        if not suffix and value == name:
            return name, DEFAULT_INT4_GROUP if name == "int4" else None
        if not suffix.isdigit() or int(suffix) < 8 or int(suffix) & (int(suffix) - 1):
            raise ValueError(
                f"weight format {text!r}: the group size after -g must be a power of two >= 8"
            )
        return name, int(suffix)
    raise ValueError(
        f"unknown weight format {text!r}; use one of bf16, fp16, fp32, fp8, fp8-block, "
        "int8[-gN], int4[-gN], mxfp4, nvfp4"
    )


class Precision(_Frozen):
    """Number formats of a deployment: weights (possibly quantized, with a group size), the KV
    cache, and the activations the matmuls run in.

    Quantized weights cover the linear layers (``scope`` "linear": attention and MLP
    projections, experts) or only the MoE experts (``scope`` "experts": gpt-oss's MXFP4
    checkpoint); embeddings, norms, routers and the LM head stay in the 16-bit compute dtype.
    """

    # canonical label: bf16 | fp16 | fp32 | fp8 | fp8-block | int8[-gN] | int4-gN | mxfp4 | nvfp4
    weights: str = Field("bf16", json_schema_extra={"pattern": WEIGHT_LABEL_PATTERN})
    kv_cache: KvCacheFormat = "bf16"
    activations: ActivationFormat = "bf16"
    scope: QuantizedScope = "linear"

    @field_validator("weights")
    @classmethod
    def _canonical_weights(cls, value: str) -> str:
        return _canonical_label(value)

    @model_validator(mode="before")
    @classmethod
    def _unset_parts_follow(cls, data: Any) -> Any:
        """A part left out follows the one given where the bf16 default could not pair with it:
        fp16/fp32 weights compute in their own dtype, and fp16/fp32/fp8 activations imply
        weights of that format (as ``parse_precision`` does for command-line flags)."""
        if not isinstance(data, dict):
            return data
        weights, activations = data.get("weights"), data.get("activations")
        if isinstance(weights, str) and activations is None:
            fmt = weights.strip().lower()
            if fmt in ("fp16", "fp32"):
                data = {**data, "activations": fmt}
                if data.get("kv_cache") is None:
                    data["kv_cache"] = fmt
        elif isinstance(activations, str) and weights is None:
            fmt = activations.strip().lower()
            if fmt == "fp4":
                data = {**data, "weights": "nvfp4"}
            elif fmt in ("fp16", "fp32", "fp8"):
                data = {**data, "weights": fmt}
                if data.get("kv_cache") is None and fmt != "fp8":
                    data["kv_cache"] = fmt
        return data

    @model_validator(mode="after")
    def _check_pairs(self) -> Precision:
        fmt = self.weight_format
        if fmt in DENSE_FORMATS and self.activations != fmt:
            raise ValueError(
                f"{fmt} weights compute in {fmt}; activations {self.activations} need "
                "quantized weights (fp8 activations: --weights fp8)"
            )
        if fmt not in DENSE_FORMATS and self.activations == "fp32":
            raise ValueError(f"{fmt} weights dequantize into bf16 or fp16 activations, not fp32")
        if self.activations == "fp8" and fmt not in ("fp8", "mxfp4"):
            # MXFP4 x MXFP8: gpt-oss's experts on Blackwell (the engines' W4A8 MXFP4 kernels).
            raise ValueError(
                f"fp8 activations need fp8 or mxfp4 weights, got {self.weights} weights"
            )
        if self.activations == "fp4" and fmt != "nvfp4":
            raise ValueError(f"fp4 activations need nvfp4 weights, got {self.weights} weights")
        return self

    @property
    def weight_format(self) -> WeightFormat:
        if self.weights == FP8_BLOCK:
            return "fp8"
        return self.weights.partition("-g")[0]  # type: ignore[return-value]

    @property
    def block_scaled(self) -> bool:
        """fp8 weights scaled per 128 x 128 block (other GEMM kernels than per-tensor fp8)."""
        return self.weights == FP8_BLOCK

    @property
    def group_size(self) -> int | None:
        return _parse_weight_label(self.weights)[1]

    @property
    def quantized(self) -> bool:
        return self.weight_format not in DENSE_FORMATS

    @property
    def compute_dtype(self) -> Dtype:
        """The dtype unquantized weights (embeddings, norms, LM head) and fp8-less math use."""
        return DENSE_FORMATS.get(self.activations, "bfloat16")

    @property
    def dense_weight_bytes(self) -> int:
        """Bytes per unquantized weight (embeddings, norms, routers, LM head)."""
        return DTYPE_BYTES[self.compute_dtype]

    @property
    def bytes_per_weight(self) -> float:
        """Bytes per quantized (linear-layer) weight, scales and zero points included."""
        bits = float(FORMAT_BITS[self.weight_format])
        group = self.group_size
        if group is not None:
            bits += _GROUP_SCALE_BITS[self.weight_format] / group
        return bits / 8.0

    @property
    def kv_bytes_per_element(self) -> int:
        return FORMAT_BITS[self.kv_cache] // 8

    @property
    def activation_bytes(self) -> int:
        return FORMAT_BITS[self.activations] // 8

    @property
    def fp8_compute(self) -> bool:
        """Matmuls run on fp8 tensor cores (W8A8) rather than at the 16-bit rate."""
        return self.activations == "fp8"

    @property
    def fp4_compute(self) -> bool:
        """Matmuls run on fp4 tensor cores (NVFP4 W4A4)."""
        return self.activations == "fp4"

    @property
    def label(self) -> str:
        """``bf16``; ``int4-g128 (weight-only)``; ``fp8 (fp8 compute), kv fp8``; ..."""
        label = self.weights
        if self.quantized:
            label += " experts" if self.scope == "experts" else ""
            compute = " (fp8 compute)" if self.fp8_compute else " (weight-only)"
            label += " (fp4 compute)" if self.fp4_compute else compute
        if self.kv_cache != FORMAT_OF_DTYPE[self.compute_dtype]:
            label += f", kv {self.kv_cache}"
        return label

    @classmethod
    def from_dtype(cls, dtype: Dtype) -> Precision:
        fmt = FORMAT_OF_DTYPE[dtype]
        return cls(weights=fmt, kv_cache=fmt, activations=fmt)  # type: ignore[arg-type]


BF16 = Precision()
Architecture.model_rebuild()


def _known_format(value: str, formats: tuple[str, ...], what: str) -> str:
    """``value`` normalized, if it is one of ``formats``; ValueError naming them otherwise."""
    name = value.strip().lower()
    if name not in formats:
        raise ValueError(f"unknown {what} format {value!r}; use one of {', '.join(formats)}")
    return name


def parse_precision(
    weights: str | None = None,
    kv_cache: str | None = None,
    activations: str | None = None,
    *,
    default: Precision | None = None,
) -> Precision:
    """A Precision from user strings; unset parts come from ``default`` (a checkpoint's own
    precision) or follow the weights: dense weights compute in their own dtype, fp8 weights in
    fp8 (W8A8), other quantized weights in bf16; the KV cache defaults to the 16-bit compute
    dtype. Raises ``InputError`` with one line naming the bad value."""
    from idealized_runtime.core.errors import InputError

    base = default or BF16
    try:
        if weights is None:
            weight_label, scope = base.weights, base.scope
        else:
            weight_label, scope = weights, "linear"
            if default is not None and _canonical_label(weights) == default.weights:
                scope = default.scope  # the checkpoint's own format: its own layers
        fmt, _ = _parse_weight_label(weight_label)
        if activations is None:
            if weights is None:
                act = base.activations
            elif fmt in DENSE_FORMATS or fmt == "fp8":
                act = fmt
            elif fmt == "nvfp4":
                act = "fp4"  # NVFP4 checkpoints serve as W4A4 (TensorRT-LLM, vLLM, SGLang)
            else:
                act = "bf16"
        else:
            act = _known_format(activations, ACTIVATION_FORMATS, "activation")
        if kv_cache is None:
            kv = base.kv_cache if weights is None and activations is None else None
            kv = kv or ("fp32" if act == "fp32" else "fp16" if act == "fp16" else "bf16")
        else:
            kv = _known_format(kv_cache, KV_CACHE_FORMATS, "KV-cache")
        return Precision(weights=weight_label, kv_cache=kv, activations=act, scope=scope)  # type: ignore[arg-type]
    except ValidationError as error:
        raise InputError(
            f"precision: {error.errors()[0]['msg'].removeprefix('Value error, ')}"
        ) from None
    except ValueError as error:
        raise InputError(str(error)) from None


class Provenance(_Frozen):
    """Where timings came from: the runner, the device and the software versions a measurement
    or a fit was taken on (a label; an engine stack's calibration is a ``StackCalibration``).
    Files and the REST API keep it under the key ``stack``."""

    runner: str = "idealized-runtime"  # e.g. "megatron-2022", "idealized-runtime", "api"
    hardware: str = "unknown"  # a Hardware.name, or "cpu"
    device_name: str = ""  # what the driver reports, e.g. "NVIDIA H100 80GB HBM3"
    num_devices: PositiveInt = 1
    tensor_parallel_size: PositiveInt = 1
    dtype: Dtype = "bfloat16"
    versions: dict[str, str] = Field(default_factory=dict)  # torch, cuda, driver, runner
    notes: str = ""


# --- deployments: a model on hardware, and the software stack's efficiency ----------------------


@dataclass(frozen=True)
class Efficiency:
    """How far a software stack is from the hardware's peaks (the hardware model's parameters of
    an engine stack, fitted by ``cost_model.hardware.stacks``). Defaults: the ideal roofline."""

    compute: float = 1.0  # fraction of peak dense tensor FLOP/s the matmuls reach
    bandwidth: float = 1.0  # fraction of peak memory bandwidth reached
    interconnect: float = 1.0  # fraction of the per-GPU interconnect bandwidth reached
    layer_overhead_s: float = 0.0  # host time per layer per forward pass (launches, dispatch)
    # Latency of one all-reduce (tp > 1 only); with ``ring_allreduce``, of each of its tp - 1
    # ring steps instead.
    allreduce_latency_s: float = 0.0
    fixed_overhead_s: float = 0.0  # per forward pass (embedding, sampling, synchronisation)
    attention_score_passes: float = 0.0  # times an unfused stack moves the score matrix
    host_overlap: float = 1.0  # k in (gpu^k + host^k)^(1/k): 1 adds, large k overlaps
    # s in (compute^(1/s) + memory^(1/s))^s: 0 is the roofline's max (loads hide behind math),
    # 1 their sum. Real kernels near the ridge point (prefill of a few hundred tokens, batched
    # decode) overlap them only partly.
    compute_memory_serialization: float = 0.0
    gemm_half_tokens: float = 0.0
    # Engines of the FasterTransformer line (TurboMind up to v0.1.0a1) prefill a prompt without
    # its last token and feed that token to the first decode step, so the first output token
    # costs a pass over p - 1 tokens plus one decode step, not one pass over p tokens.
    last_prompt_token_in_decode: bool = False
    # Stacks that all-reduce through NCCL's ring (gpt-fast, TurboMind v0.1) pay the latency once
    # per step around the ring, tp - 1 times: reduce-scatter and all-gather each pass every
    # GPU's chunk on to its neighbour. False: one latency whatever tp, as for one-shot kernels
    # that read every peer's buffer directly over NVLink (TensorRT-LLM's custom all-reduce).
    ring_allreduce: bool = False

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth", "interconnect"):
            value = getattr(self, name)
            if not (0 < value <= 1):
                raise InputError(f"efficiency {name} must be in (0, 1], got {value}")
        for name in (
            "layer_overhead_s",
            "allreduce_latency_s",
            "fixed_overhead_s",
            "attention_score_passes",
        ):
            if not (getattr(self, name) >= 0 and math.isfinite(getattr(self, name))):
                raise InputError(f"efficiency {name} must be finite and >= 0")
        if not (self.host_overlap >= 1 and math.isfinite(self.host_overlap)):
            raise InputError(f"efficiency host_overlap must be >= 1, got {self.host_overlap}")
        if not (0 <= self.compute_memory_serialization <= 1):
            raise InputError(
                "efficiency compute_memory_serialization must be in [0, 1], got "
                f"{self.compute_memory_serialization}"
            )

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, float | bool]) -> Efficiency:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise InputError(f"unknown efficiency factors: {', '.join(sorted(unknown))}")
        flags = {f.name for f in fields(cls) if f.type in (bool, "bool")}
        for name in flags & set(values):
            if not isinstance(values[name], bool):
                raise InputError(f"efficiency {name} must be true or false")
        return cls(**{k: v if k in flags else float(v) for k, v in values.items()})


IDEAL = Efficiency()
MAX_DRAFT_TOKENS = 16


class SpeculativeDecoding(_Frozen):
    """Speculative decoding with a draft of ``draft_tokens`` tokens per decode step (multi-token
    prediction heads, or a draft model), each accepted with probability ``acceptance_rate``
    given the ones before it were: a step verifies draft + 1 tokens per sequence and yields
    (1 - a^(k+1)) / (1 - a) of them on average."""

    draft_tokens: Annotated[int, Field(ge=1, le=MAX_DRAFT_TOKENS)]
    acceptance_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    # Decoder layers the draft runs per draft token (DeepSeek's MTP module: one).
    draft_layers: Annotated[int, Field(ge=1, le=4096)] = 1

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a sequence gains per decode step, on average."""
        a, k = self.acceptance_rate, self.draft_tokens
        if a >= 1.0:
            return float(k + 1)
        return (1.0 - a ** (k + 1)) / (1.0 - a)


class Disaggregation(_Frozen):
    """Prefill and decode on separate engine instances (xPyD): ``prefill_workers`` instances
    of ``prefill_tp`` GPUs (``prefill_ep`` expert-parallel ranks, ``prefill_attention_dp``
    attention groups) read the prompts and hand each request's KV cache to one of
    ``decode_workers`` instances of the deployment's own layout, over ``transfer_gbps`` per GPU
    and direction (None: the GPU's interconnect from the catalog)."""

    prefill_workers: Annotated[int, Field(ge=1, le=1024)]
    decode_workers: Annotated[int, Field(ge=1, le=1024)]
    prefill_tp: Annotated[int, Field(ge=1, le=1024)]
    prefill_ep: PositiveInt = 1
    prefill_attention_dp: PositiveInt = 1
    transfer_gbps: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    @property
    def label(self) -> str:
        """``2P(tp4)1D`` style: workers of each kind, the prefill layout in brackets."""
        layout = layout_label(self.prefill_tp, self.prefill_ep, self.prefill_attention_dp)
        return f"{self.prefill_workers}P({layout}){self.decode_workers}D"


def layout_label(tp: int, ep: int = 1, attention_dp: int = 1) -> str:
    """``tp8``, ``tp8 ep8 dp8``: an instance's GPUs, experts and attention groups."""
    parts = [f"tp{tp}"] + [f"{name}{size}" for name, size in (("ep", ep), ("dp", attention_dp))
                           if size > 1]  # fmt: skip
    return " ".join(parts)


class Deployment(_Frozen):
    """A model served on hardware: the architecture, the GPU, the layout (``tp`` GPUs per
    pipeline stage, ``pp`` stages), the number format, the sequences run together in a batch, and
    the software stack that times it: its ``efficiency`` (default: the ideal roofline) and, when
    it is a shipped calibrated stack, its name (``stack``).

    Today's engines split a mixture of experts and its attention differently over the same
    ``tp`` GPUs: ``ep`` expert-parallel ranks each hold num_experts / ep whole experts (split
    further over tp / ep GPUs), and ``attention_dp`` data-parallel groups of tp / attention_dp
    GPUs each run the attention of their own requests (every group holds the attention weights
    and its own KV cache). ``speculative``: multi-token prediction or a draft model;
    ``disaggregation``: prompts on prefill instances of their own, which hand the KV cache to
    decode instances of this layout (xPyD).

    The hardware model's functions take one ``Deployment`` instead of loose arguments;
    ``cost_model.hardware.planner.plan_deployment`` chooses the layout for one."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    architecture: Architecture
    hardware: Hardware
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    precision: Precision = BF16
    batch_size: PositiveInt = 1
    efficiency: Efficiency = IDEAL
    stack: str | None = None
    ep: PositiveInt = 1
    attention_dp: PositiveInt = 1
    speculative: SpeculativeDecoding | None = None
    # Prefill on instances of their own (None: aggregated, every instance does both).
    disaggregation: Disaggregation | None = None

    @model_validator(mode="after")
    def _check_parallelism(self) -> Deployment:
        _check_layout(self.architecture, self.tp, self.ep, self.attention_dp)
        split = self.disaggregation
        if split is not None:
            if self.pp > 1:
                raise ValueError("disaggregated serving models one pipeline stage (pp = 1)")
            _check_layout(
                self.architecture, split.prefill_tp, split.prefill_ep, split.prefill_attention_dp
            )
        return self

    @property
    def num_gpus(self) -> int:
        """GPUs of the deployment: both pools of a disaggregated one."""
        split = self.disaggregation
        if split is not None:
            return split.prefill_workers * split.prefill_tp + split.decode_workers * self.tp
        return self.tp * self.pp

    def prefill_instance(self) -> Deployment:
        """One prefill instance of a disaggregated deployment (itself when aggregated)."""
        split = self.disaggregation
        if split is None:
            return self
        return self.model_copy(
            update={
                "tp": split.prefill_tp,
                "ep": split.prefill_ep,
                "attention_dp": split.prefill_attention_dp,
                "speculative": None,  # prefill runs no draft
                "disaggregation": None,
            }
        )

    def decode_instance(self) -> Deployment:
        """One decode instance of a disaggregated deployment (itself when aggregated)."""
        if self.disaggregation is None:
            return self
        return self.model_copy(update={"disaggregation": None})

    @property
    def attention_tp(self) -> int:
        """GPUs that split one attention layer: tp over the attention data-parallel groups."""
        return self.tp // self.attention_dp

    @property
    def moe_tp(self) -> int:
        """GPUs that split one expert: tp over the expert-parallel ranks."""
        return self.tp // self.ep

    def with_efficiency(self, efficiency: Efficiency) -> Deployment:
        """The same deployment timed at another efficiency (a stack's fit tries many)."""
        return self.model_copy(update={"efficiency": efficiency})


def _check_layout(arch: Architecture, tp: int, ep: int, attention_dp: int) -> None:
    """ValueError unless ``ep`` and ``attention_dp`` split ``tp`` GPUs (and the experts)."""
    if ep > 1:
        if arch.num_experts <= 1:
            raise ValueError(f"expert parallelism needs a mixture of experts; {arch.name} is dense")
        if tp % ep or arch.num_experts % ep:
            raise ValueError(
                f"expert-parallel size {ep} must divide the tensor-parallel size "
                f"{tp} and the {arch.num_experts} experts of {arch.name}"
            )
    if tp % attention_dp:
        raise ValueError(
            f"attention data-parallel size {attention_dp} must divide the tensor-parallel size {tp}"
        )


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
    num_output_tokens: OutputTokenCount
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
    ``helm_next_size`` is the rule of HELM's older tables (next larger profiled size, unscaled;
    past the largest size, the largest scaled by p / size);
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
    stack: Provenance | None = None
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
    num_output_tokens: OutputTokenCount
    runtime_s: float | None = None
    ttft_s: float | None = None
    timestamp: datetime | None = None
    scenario: str | None = None

    @field_validator("runtime_s", "ttft_s")
    @classmethod
    def _positive(cls, value: float | None, info: object) -> float | None:
        return _finite_positive(value, getattr(info, "field_name", "runtime"))


# --- serving under load (summaries of measured or simulated request rows) ---------------------

NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Slo(_Frozen):
    """Latency targets a request must all meet to count towards goodput (None: no target)."""

    ttft_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tpot_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    e2e_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None


class LatencyStats(_Frozen):
    """Percentiles (linear interpolation between order statistics) and mean, seconds; all None
    when there was no value to summarize."""

    p50: NonNegativeFloat | None = None
    p90: NonNegativeFloat | None = None
    p99: NonNegativeFloat | None = None
    mean: NonNegativeFloat | None = None


class TurnSummary(_Frozen):
    """The requests of one turn index of a multi-turn level (every session's turn ``turn``):
    prompts grow with the history resent, and a prefix cache may serve that history."""

    turn: Annotated[int, Field(ge=0)]
    requests: Annotated[int, Field(ge=0)]
    error_rate: Annotated[float, Field(ge=0, le=1)]
    prompt_tokens_mean: NonNegativeFloat | None = None
    cached_prompt_tokens_mean: NonNegativeFloat | None = None
    output_tokens_mean: NonNegativeFloat | None = None
    reasoning_tokens_mean: NonNegativeFloat | None = None
    ttft_s: LatencyStats = LatencyStats()
    ttft_answer_s: LatencyStats = LatencyStats()
    tpot_s: LatencyStats = LatencyStats()
    e2e_s: LatencyStats = LatencyStats()


class LoadCost(_Frozen):
    """Dollars of a level's successful requests at a provider's prices per 1M tokens, and, where
    the model's architecture is known, the idealized dollars of the same requests (the hardware
    model on a reference GPU and stack, batch 1)."""

    price: Name = Field(description="the price table's entry: provider/model")
    usd_per_request: NonNegativeFloat
    usd_per_million_tokens: NonNegativeFloat | None = Field(
        default=None, description="dollars over prompt + output tokens, per million"
    )
    usd_per_million_output_tokens: NonNegativeFloat | None = None
    idealized_usd_per_request: NonNegativeFloat | None = None
    idealized_usd_per_million_output_tokens: NonNegativeFloat | None = None
    idealized_basis: str | None = Field(
        default=None, description="architecture, GPU and stack of the idealized dollars"
    )


class LoadSummary(_Frozen):
    """What users saw from one model at one load level ("concurrency=8", "rate=4.0", "trace")."""

    model: Name
    load: Name
    requests: Annotated[int, Field(ge=0)]
    requests_per_s: NonNegativeFloat
    output_tokens_per_s: NonNegativeFloat
    ttft_s: LatencyStats
    itl_s: LatencyStats
    tpot_s: LatencyStats
    e2e_s: LatencyStats
    error_rate: Annotated[float, Field(ge=0, le=1)]
    goodput_requests_per_s: NonNegativeFloat
    # Reasoning models: the time to the first answer token (after the reasoning), and the
    # tokens counted apart; the mean token counts of the successful requests.
    ttft_answer_s: LatencyStats = LatencyStats()
    prompt_tokens_mean: NonNegativeFloat | None = None
    cached_prompt_tokens_mean: NonNegativeFloat | None = None
    output_tokens_mean: NonNegativeFloat | None = None
    reasoning_tokens_mean: NonNegativeFloat | None = None
    turns: tuple[TurnSummary, ...] = ()  # multi-turn levels: per turn index
    cost: LoadCost | None = None  # with a price table
