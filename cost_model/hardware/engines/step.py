"""A serving step's time on an engine: the forward pass over a step's decode tokens and prompt
chunks, operation by operation, each timed by the engine's fitted kernels on the GPU.

Per layer and GPU (``Deployment``: tp GPUs, ``attention_dp`` attention groups of
``attention_tp`` GPUs, ``ep`` expert ranks of ``moe_tp`` GPUs):

- attention projections: GEMMs over the group's tokens (a 1 / attention_dp share of the step's),
  split over attention_tp (MLA: its low-rank projections, the latent up-projections absorbed);
- attention: prompt chunks as causal attention over their attended positions (at the measured
  rate of the step's chunk count and mean length where the engine measured the layout), decode
  tokens as reads of their cached K/V (or MLA latent), in the KV-cache format;
- an all-reduce of the hidden states over attention_tp;
- dense MLP GEMMs, or the router, the routed experts' grouped GEMM for all the step's tokens on
  the rank's experts, the shared experts; when the ranks hold different tokens (attention_dp >
  1), an all-to-all dispatch and combine to the experts' ranks under expert parallelism, or,
  with every expert split over all the ranks (ep 1), an all-gather of the tokens and a
  reduce-scatter of the outputs, an all-reduce's traffic (TensorRT-LLM's attention DP with
  MoE TP, all-to-all off); else an all-reduce: with tensor-parallel attention every rank holds
  every token, so expert parallelism computes each rank's experts on all of them and sums the
  partial outputs as tensor parallelism does (SGLang's and TensorRT-LLM's expert parallelism
  without attention DP; no tokens travel);
- the small elementwise kernels between them (norms, rotary embedding, KV-cache write, top-k
  routing, activations: ``elementwise_passes``), each a pass over the group's tokens;
- the LM head for the sampled positions.

Multi-token prediction (``Deployment.speculative``) verifies draft + 1 tokens per decoding
sequence and runs the draft layers once per draft token. A step pays the engine's host time:
``decode_overhead_s`` for a decode-only step replayed from a captured CUDA graph (its batch
padded up to the graph's size), ``step_overhead_s`` for a step with prompt chunks, and
``decode_overhead_s`` again for each draft pass (a graph replay of its own). An engine whose
scheduler plans the next step while the GPU runs this one (``schedule_ahead_steps``:
TensorRT-LLM's and SGLang's overlap schedulers, vLLM's ``--async-scheduling``) does its host
work beside the GPU: a decode-only step's forward pass takes the longer of its kernels plus
``overlap_gap_s`` (what still runs between two graph replays: sampling, the next step's input
copies) and the host's ``decode_overhead_s``; each draft pass still pays the host time.

``kv_capacity_tokens`` is the KV cache an engine leaves next to the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture, Deployment, Precision
from idealized_runtime.cost_model.hardware.counts import (
    end_weight_parameters,
    kv_bytes_per_token_layer,
    layer_weights,
)
from idealized_runtime.cost_model.hardware.engines.kernels import (
    GpuKernels,
    decode_layout,
    prompt_layout,
)
from idealized_runtime.cost_model.hardware.engines.request_path import RequestPath

GB = 1e9
# How a server lets requests into its KV cache (``cost_model.serving.admission``): whole
# sequences reserved (TensorRT-LLM), the tokens allocated now with preemption (vLLM), SGLang's
# decaying estimate of future tokens with retraction, or SGLang's exact forecast for requests
# that ignore end-of-sequence tokens with its prefix cache off.
ADMISSIONS = ("reserve", "allocated", "ratio", "forecast")
# What an engine that does not chunk prompts holds to its token budget (``SchedulerDefaults.
# unchunked_limit``): the prompt (TensorRT-LLM refuses a longer one), the whole sequence (vLLM
# will not start with max_model_len above max_num_batched_tokens), or nothing (SGLang runs a
# longer prompt alone, first of its prefill batch).
UNCHUNKED_LIMITS = ("prompt", "sequence", "none")


@dataclass(frozen=True)
class SchedulerDefaults:
    """How an engine schedules and sizes its batches out of the box.

    ``token_budget``: tokens per step (vLLM ``max_num_batched_tokens``, SGLang
    ``chunked_prefill_size``, TensorRT-LLM ``max_num_tokens``); ``max_running``: sequences
    decoded together; ``chunked_prefill``: prompts longer than what is left of the budget are
    split (else a prompt waits until it fits whole); ``prefill_first``: a step with waiting
    prompts runs prompts only (SGLang), else decode tokens first and prompts in what is left
    (vLLM, TensorRT-LLM); ``memory_fraction`` of the GPU memory (``of_free``: of what the
    weights leave) holds weights and KV cache; ``cuda_graph_max_batch``: decode-only steps up
    to this batch replay a captured graph, padded to ``cuda_graph_step`` sequences;
    ``admission``: how requests come into the KV cache (``ADMISSIONS``); ``recv_interval``: the
    scheduler takes new requests in every this many decode steps (SGLang's
    --scheduler-recv-interval); ``balance_timeout_steps``: TensorRT-LLM's attention-DP balance
    (``attention_dp_config: enable_balance, timeout_iters``; 0: off): prompts join a step when
    every rank has one, or on the step its counter reaches this many (``ServerConfig``);
    ``limits_per_rank``: ``max_running`` and ``token_budget`` hold per attention-DP rank
    (TensorRT-LLM's ``max_batch_size`` and ``max_num_tokens``; each of vLLM's data-parallel
    engine cores takes ``max_num_seqs`` and ``max_num_batched_tokens``), else for the whole
    instance, shared among its ranks (SGLang divides its flags among them);
    ``request_http_s``, ``tokenize_s_per_token``, ``detokenize_s_per_token``, ``stream_s``,
    ``schedule_ahead_steps``: the request path outside the forward passes (``request_path``;
    ``engines.request_path``); ``request_overhead_s`` + ``request_overhead_s_per_layer`` x the
    model's layers (``residual_overhead_s``): what the request path and the kernels leave of
    published TTFTs, fitted across models (0 where fewer than two models have figures; see the
    stack's notes; per layer, as the residuals of the models with figures scale);
    ``fuse_shared_experts``: a MoE layer's shared experts run
    as more routed experts that every token picks, inside the grouped MoE kernel (SGLang's
    shared-experts fusion for DeepSeek-V3/R1, which it turns off with expert parallelism,
    attention DP and FP4 experts), else as GEMMs of their own; ``unchunked_limit``: without
    chunked prefill, what must fit the token budget (``UNCHUNKED_LIMITS``), else the engine
    refuses the request; ``sized_budget``: unless the budget is given, it is sized for the
    workload's longest prompt beside the running sequences when prompts are not chunked (as
    deployments size TensorRT-LLM's max_num_tokens; ``serving.engines.sized_token_budget``);
    ``budget_setting``: the engine's name for its token budget, named in refusals and
    warnings; ``unchunked_budget``: the budget per step when prompts are not chunked, where the
    engine has another one for that (SGLang's max_prefill_tokens; 0: ``token_budget``);
    ``overlap_gap_s``: the GPU's time between two decode graph replays when the host plans
    ahead (``schedule_ahead_steps``): an overlapped decode step's forward pass costs the
    longer of its kernels + this and ``decode_overhead_s``;
    ``norms_in_allreduce``: the residual add and RMSNorm run inside the tensor-parallel
    all-reduce kernel (TensorRT-LLM's fused all-reduce), not as kernels of their own;
    ``rope_in_attention``: the rotary embedding and the KV-cache write are one kernel before
    the attention (TensorRT-LLM's attention pre-processing), else two
    (``elementwise_passes``); ``moe_runner``: the experts' kernels, where the engine was
    launched with another MoE runner than its default and the kernel database measured it
    (``GpuKernels.moe_runners``: SGLang's "triton" for bf16 experts on Blackwell, its
    --moe-runner-backend); "" the default; ``wide_tp_graph_max_batch``: CUDA graphs up to
    this batch at tensor-parallel size 4 or more (SGLang's cuda_graph_max_bs; 0: no such
    rule; ``EngineStack.defaults_for``)."""

    token_budget: int
    max_running: int
    chunked_prefill: bool = True
    prefill_first: bool = False
    memory_fraction: float = 0.9
    of_free: bool = False
    cuda_graph_max_batch: int = 256
    cuda_graph_step: int = 8
    decode_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    overlap_gap_s: float = 0.0
    admission: str = "reserve"
    recv_interval: int = 1
    balance_timeout_steps: int = 0
    limits_per_rank: bool = False
    request_overhead_s: float = 0.0
    request_overhead_s_per_layer: float = 0.0
    fuse_shared_experts: bool = False
    unchunked_limit: str = "none"
    sized_budget: bool = False
    budget_setting: str = "token budget"
    unchunked_budget: int = 0
    request_http_s: float = 0.0
    tokenize_s_per_token: float = 0.0
    detokenize_s_per_token: float = 0.0
    stream_s: float = 0.0
    schedule_ahead_steps: int = 0
    norms_in_allreduce: bool = False
    rope_in_attention: bool = False
    moe_runner: str = ""
    wide_tp_graph_max_batch: int = 0

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_running < 1:
            raise InputError("an engine's token budget and running sequences must be >= 1")
        if not 0 < self.memory_fraction <= 1:
            raise InputError(f"memory fraction must be in (0, 1], got {self.memory_fraction}")
        if self.admission not in ADMISSIONS:
            raise InputError(
                f"unknown admission rule {self.admission!r}; known: {', '.join(ADMISSIONS)}"
            )
        if self.recv_interval < 1:
            raise InputError("an engine's receive interval must be >= 1 step")
        if self.unchunked_limit not in UNCHUNKED_LIMITS:
            raise InputError(
                f"unknown unchunked limit {self.unchunked_limit!r}; known: "
                f"{', '.join(UNCHUNKED_LIMITS)}"
            )
        for overhead in (self.request_overhead_s, self.request_overhead_s_per_layer):
            if not (math.isfinite(overhead) and overhead >= 0):
                raise InputError(f"request overhead must be >= 0 s, got {overhead}")
        _ = self.request_path  # checks the path's figures

    def residual_overhead_s(self, layers: int) -> float:
        """The fitted residual of a request to a model of ``layers`` layers (seconds before
        the scheduler sees it)."""
        return self.request_overhead_s + self.request_overhead_s_per_layer * layers

    @property
    def request_path(self) -> RequestPath:
        """The engine's request path (HTTP, tokenization, detokenization, streaming, the
        scheduler's look-ahead)."""
        return RequestPath(
            http_s=self.request_http_s,
            tokenize_s_per_token=self.tokenize_s_per_token,
            detokenize_s_per_token=self.detokenize_s_per_token,
            stream_s=self.stream_s,
            schedule_ahead_steps=self.schedule_ahead_steps,
        )

    def graph_batch(self, sequences: np.ndarray) -> np.ndarray:
        """The captured graph's batch a decode-only step of ``sequences`` runs at."""
        small = 2.0 ** np.ceil(np.log2(np.maximum(sequences, 1.0)))
        step = float(self.cuda_graph_step)
        padded = np.where(sequences <= step, small, np.ceil(sequences / step) * step)
        return np.where(sequences <= self.cuda_graph_max_batch, padded, sequences)


# Deployments size a budget for their prompts in whole multiples of this many tokens, with
# this many to spare (InferenceX's TensorRT-LLM launch scripts: max_num_tokens =
# ceil64(clients + prompt + 64), at least the engine's 8192).
BUDGET_GRAIN = 64


def sized_token_budget(
    default: int, prompt_tokens: int, running: int, decode_tokens: int = 1
) -> int:
    """The token budget a deployment sets so that its longest prompt joins a step beside every
    running sequence's decode tokens: ceil64(prompt + running x decode tokens + 64), at least
    the engine's ``default`` (per attention-DP rank)."""
    need = prompt_tokens + running * decode_tokens + BUDGET_GRAIN
    return max(default, -(-need // BUDGET_GRAIN) * BUDGET_GRAIN)


def budget_refusal(
    limit: str, chunked: bool, budget: int, prompt_tokens: int, output_tokens: int, flag: str
) -> str | None:
    """The one line an engine that does not chunk prompts refuses a request with when it does
    not fit ``budget`` (``UNCHUNKED_LIMITS``: the prompt, TensorRT-LLM's request check; prompt +
    output, vLLM's start-up check of max_model_len against max_num_batched_tokens), naming the
    setting to raise (``flag``); None when the engine serves it."""
    if chunked or limit == "none":
        return None
    whole = limit == "sequence"
    tokens = prompt_tokens + (output_tokens if whole else 0)
    if tokens <= budget:
        return None
    what = "prompt + output" if whole else "prompt"
    return (
        f"a {what} of {tokens} tokens exceeds the {budget}-token step budget of an engine "
        f"that does not chunk prompts, which refuses it: raise {flag} to >= {tokens} or chunk "
        "prompts (engine setting chunked_prefill)"
    )


def kernel_format(precision: Precision, experts: bool = False) -> str:
    """The kernel number format of a precision's linear layers (``experts``: of the routed
    experts, which gpt-oss-style checkpoints quantize alone)."""
    if precision.scope == "experts" and not experts:
        return "bf16"
    fmt = precision.weight_format
    if fmt == "fp8":
        return "fp8_block" if precision.block_scaled else "fp8"
    if fmt == "mxfp4" and precision.activations == "fp8":
        return "mxfp4_mxfp8"  # W4A8: MXFP4 weights times MXFP8 activations
    if fmt in ("nvfp4", "mxfp4"):
        return fmt
    if fmt == "int4":
        return "int4_wo"
    if fmt == "int8":
        return "fp8"  # 8-bit weights: the nearest measured kernels
    return "bf16"


def elementwise_passes(
    arch: Architecture,
    layer: int,
    scheduler: SchedulerDefaults,
    attention_tp: int,
    shared_fused: bool = False,
) -> float:
    """The small elementwise kernels a layer's forward pass runs between its matmuls,
    attention and collectives (each a pass over the step's activations), as the engines' model
    code runs them: the input and post-attention RMSNorms (none of their own where the engine
    fuses them into the all-reduce), the rotary embedding and the KV-cache write (one kernel
    where the engine fuses them), Qwen3's per-head q and k norms, MLA's q and latent norms, the
    MoE router's top-k, the gated activation of a dense MLP or of shared experts and the sum of
    shared and routed outputs (unless the shared experts run inside the routed kernel)."""
    fused_norms = scheduler.norms_in_allreduce and attention_tp > 1
    passes = (0 if fused_norms else 2) + (1 if scheduler.rope_in_attention else 2)
    passes += 2 if arch.qk_norm else 0
    passes += 2 if arch.mla else 0
    if not arch.is_moe_layer(layer):
        return passes + 1
    passes += 1  # top-k routing
    if arch.num_shared_experts and not shared_fused:
        passes += 2  # the shared experts' activation, and their sum with the routed output
    return passes


def attention_format(precision: Precision, mla: bool) -> str:
    """The kernel number format of the attention block's projections: ModelOpt's NVFP4
    checkpoints of DeepSeek-style (MLA) models leave the whole self-attention block
    unquantized (nvidia/DeepSeek-R1-FP4 and -R1-0528-FP4: ``exclude_modules`` lists every
    layer's ``self_attn*``), so the engines load those projections, and the absorbed
    up-projections, in 16 bits; else the linear layers' format."""
    if mla and precision.weight_format == "nvfp4":
        return "bf16"
    return kernel_format(precision)


# Steps priced at once up to which ``EngineStepModel`` remembers the layers' time per token
# count (a simulation's stretches of a step or two; the estimate's tables price hundreds).
TOKEN_MEMO_STEPS = 16


@dataclass(frozen=True)
class EngineStepModel:
    """Step times of one deployment on one engine's kernels (see the module docstring)."""

    deployment: Deployment
    kernels: GpuKernels
    scheduler: SchedulerDefaults

    def seconds(
        self,
        decode_sequences: ArrayLike,
        decode_attended: ArrayLike,
        prompt_tokens: ArrayLike,
        prompt_attended: ArrayLike,
        prompt_chunks: ArrayLike,
    ) -> np.ndarray:
        """Seconds of each step: ``decode_sequences`` decoding sequences attending to
        ``decode_attended`` positions in all, prompt chunks of ``prompt_tokens`` tokens in all
        attending to ``prompt_attended`` positions, in ``prompt_chunks`` chunks."""
        d = np.asarray(decode_sequences, dtype=np.float64)
        ld = np.asarray(decode_attended, dtype=np.float64)
        p = np.asarray(prompt_tokens, dtype=np.float64)
        lp = np.asarray(prompt_attended, dtype=np.float64)
        chunks = np.asarray(prompt_chunks, dtype=np.float64)
        d, ld, p, lp, chunks = np.broadcast_arrays(d, ld, p, lp, chunks)
        decode_only = p <= 0
        graphed = decode_only & (d <= self.scheduler.cuda_graph_max_batch)
        padded = np.where(graphed, self.scheduler.graph_batch(d), d)
        spec = self.deployment.speculative
        verify = 1.0 + (spec.draft_tokens if spec is not None else 0)
        tokens = padded * verify + p
        mean_chunk = np.where(chunks > 0, p / np.maximum(chunks, 1.0), 0.0)
        seconds = self._layers((tokens, d * verify, ld * verify, p, lp, mean_chunk, d))
        seconds = seconds + self._head(padded * verify + chunks)
        host = self.scheduler.decode_overhead_s
        if self.scheduler.schedule_ahead_steps:
            # The host plans the next step while this one runs: it costs only when slower.
            host = np.maximum(seconds + self.scheduler.overlap_gap_s, host) - seconds
        overhead = np.where(graphed, host, self.scheduler.step_overhead_s)
        if spec is not None:  # the draft: its layers once per draft token, over the decoders
            zero = 0.0 * p
            one = self._layer(len(self._layer_kinds) - 1, (padded, d, ld, zero, zero, zero, d))
            seconds = seconds + spec.draft_tokens * spec.draft_layers * (one + self._head(padded))
            # Each draft pass is a graph replay of its own, with its own host time.
            drafting = np.where(d > 0, spec.draft_tokens * self.scheduler.decode_overhead_s, 0.0)
            overhead = overhead + drafting
        return seconds + overhead

    # --- the pass ---------------------------------------------------------------------------

    @property
    def _layer_kinds(self) -> list[int]:
        return list(range(self.deployment.architecture.num_layers))

    @cached_property
    def _decode_layout(self) -> str:
        """The measured decode-attention grid this deployment's layers read, per GPU (built
        once: every step time reads it)."""
        arch, tp = self.deployment.architecture, self.deployment.attention_tp
        element = self.deployment.precision.kv_bytes_per_element
        if arch.mla:
            return decode_layout(arch.num_heads / tp, element)
        kv_heads = max(arch.kv_heads / tp, 1.0)
        return decode_layout(arch.num_heads / tp, element, kv_heads, arch.dim_per_head)

    @cached_property
    def _prompt_layout(self) -> str:
        """The measured prompt-attention grid this deployment's layers read, per GPU."""
        arch, tp = self.deployment.architecture, self.deployment.attention_tp
        if arch.mla:
            return prompt_layout(arch.num_heads / tp)
        return prompt_layout(arch.num_heads / tp, max(arch.kv_heads / tp, 1.0), arch.dim_per_head)

    @cached_property
    def _layer_groups(self) -> list[tuple[int, bool, int]]:
        """(a layer of the group, whether its attention slides, layers in the group): the
        layers grouped by MLP (dense or MoE) and attention kind (full or sliding window),
        built once."""
        arch = self.deployment.architecture
        groups: dict[tuple[bool, bool], list[int]] = {}
        for layer in range(arch.num_layers):
            sliding = arch.attention_kind(layer) == "sliding" and bool(arch.sliding_window)
            groups.setdefault((arch.is_moe_layer(layer), sliding), []).append(layer)
        return [(layers[-1], sliding, len(layers)) for (_, sliding), layers in groups.items()]

    def _layers(self, work: tuple[np.ndarray, ...]) -> np.ndarray:
        """All layers over ``work``: (tokens, decode tokens, decode attended positions, prompt
        tokens, prompt attended positions, mean chunk length, decoding sequences). A sliding-
        window layer (gpt-oss: every other) attends to at most the window per token."""
        total = self._token_layers(work[0])
        for layer, sliding, count in self._layer_groups:
            windowed = self._windowed(work) if sliding else work
            total = total + count * self._attention(layer, windowed)
        return total

    @cached_property
    def _token_memo(self) -> dict[float, float]:
        return {}

    def _token_layers(self, tokens: np.ndarray) -> np.ndarray:
        """The layers' time that depends on the step's tokens alone (all but the attention
        over the cache), remembered per token count for the few steps a simulation prices at
        a time (``TOKEN_MEMO_STEPS``): it prices thousands of stretches of one or two steps
        whose batch sizes repeat, each of a few dozen kernel look-ups."""
        if tokens.size > TOKEN_MEMO_STEPS:
            return self._token_work(tokens)
        memo = self._token_memo
        counts = tokens.ravel().tolist()
        missing = [n for n in dict.fromkeys(counts) if n not in memo]
        if missing:
            memo.update(zip(missing, self._token_work(np.array(missing)).tolist(), strict=True))
        return np.array([memo[n] for n in counts], dtype=np.float64).reshape(tokens.shape)

    def _token_work(self, tokens: np.ndarray) -> np.ndarray:
        total = 0.0 * tokens
        for layer, _, count in self._layer_groups:
            total = total + count * self._token_layer(layer, tokens)
        return total

    def _windowed(self, work: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """``work`` as a sliding-window layer sees it: each decode token and prompt token
        attends to at most the window (the mean context standing for each sequence's)."""
        tokens, decode_tokens, decode_attended, prompt, prompt_attended, chunk, sequences = work
        window = float(self.deployment.architecture.sliding_window or 0)
        return (
            tokens,
            decode_tokens,
            np.minimum(decode_attended, decode_tokens * window),
            prompt,
            np.minimum(prompt_attended, prompt * window),
            chunk,
            sequences,
        )

    def _layer(self, layer: int, work: tuple[np.ndarray, ...]) -> np.ndarray:
        """One layer over ``work`` (see ``_layers``)."""
        return self._token_layer(layer, work[0]) + self._attention(layer, work)

    def _attention(self, layer: int, work: tuple[np.ndarray, ...]) -> np.ndarray:
        """One layer's attention over the cache: decode reads, prompt chunks compute."""
        _, decode_tokens, decode_attended, _, prompt_attended, chunk, sequences = work
        dep, k, hw = self.deployment, self.kernels, self.deployment.hardware
        arch, precision = dep.architecture, dep.precision
        dp, atp = dep.attention_dp, dep.attention_tp
        kv_token = kv_bytes_per_token_layer(arch, precision, atp)
        heads = arch.num_heads / atp
        if arch.mla:
            decode_flops = (
                2.0 * heads * (2 * (arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0))
            )
            prompt_flops = (
                2.0
                * heads
                * (
                    (arch.qk_nope_head_dim or 0)
                    + (arch.qk_rope_head_dim or 0)
                    + (arch.v_head_dim or 0)
                )
            )
        else:
            decode_flops = prompt_flops = 4.0 * heads * arch.dim_per_head
        time = k.decode_attention_time(
            hw,
            kv_token * decode_attended / dp,
            decode_flops * decode_attended / dp,
            sequences / dp,
            mla=arch.mla,
            grid=(self._decode_layout, decode_tokens / dp, decode_attended / dp),
        )
        prompt = work[3]
        chunks = np.where(chunk > 0, prompt / np.maximum(chunk, 1.0), 0.0) / dp
        # A chunk of n new tokens over c cached ones attends as many keys per query as a
        # cache-free prompt of 2c + n tokens: the measured rate of that length, not of n's (the
        # last few tokens of a prompt over its 8k cached ones are no prompt of a few tokens,
        # whose fixed kernel time per FLOP would cost them seconds).
        per_query = prompt_attended / np.maximum(prompt, 1.0)
        span = np.where(prompt > 0, np.maximum(chunk, 2.0 * per_query - 1.0), chunk)
        time = time + k.context_attention_time(
            hw,
            prompt_flops * prompt_attended / dp,
            span,
            mla=arch.mla,
            grid=(self._prompt_layout, chunks),
        )
        return time

    def _token_layer(self, layer: int, tokens: np.ndarray) -> np.ndarray:
        """One layer's time that depends on the step's tokens alone: the projections, the
        all-reduces, the element-wise passes and the MLP or experts."""
        dep, k, hw = self.deployment, self.kernels, self.deployment.hardware
        arch, precision = dep.architecture, dep.precision
        dp, atp = dep.attention_dp, dep.attention_tp
        h = arch.hidden_size
        linear = kernel_format(precision)
        local = tokens / dp  # the tokens of one attention group
        w = layer_weights(arch, layer)
        time = self._attention_gemms(local, attention_format(precision, arch.mla))
        if atp > 1:
            time = time + k.allreduce_time(hw, local * h * 2.0, atp)
        shared_fused = bool(w.num_experts) and self._fuses_shared_experts(
            kernel_format(precision, experts=True)
        )
        passes = elementwise_passes(arch, layer, self.scheduler, atp, shared_fused)
        time = time + k.elementwise_time(hw, local, h, passes)
        if w.num_experts:
            time = time + self._moe(w, tokens, local)
        else:
            ffn = arch.ffn_hidden_size
            up = (2 if arch.gated_mlp else 1) * ffn / atp
            time = (
                time
                + k.gemm_time(hw, local, up, h, linear)
                + k.gemm_time(hw, local, h, ffn / atp, linear)
            )
            if atp > 1:
                time = time + k.allreduce_time(hw, local * h * 2.0, atp)
        return time

    def _attention_gemms(self, local: np.ndarray, fmt: str) -> np.ndarray:
        dep, k, hw = self.deployment, self.kernels, self.deployment.hardware
        arch, atp, h = dep.architecture, dep.attention_tp, dep.architecture.hidden_size
        heads = arch.num_heads / atp
        if arch.mla:
            rank, rope = arch.kv_lora_rank or 0, arch.qk_rope_head_dim or 0
            nope, v_dim = arch.qk_nope_head_dim or 0, arch.v_head_dim or 0
            q_in = arch.q_lora_rank or h
            shapes = [(q_in + rank + rope, h)] if arch.q_lora_rank else [(rank + rope, h)]
            shapes += [
                (heads * (nope + rope), q_in),  # q up-projection
                (heads * rank, nope),  # absorbed key up-projection (per head, batched)
                (heads * v_dim, rank),  # absorbed value up-projection
                (h, heads * v_dim),  # output
            ]
        else:
            d = arch.dim_per_head
            q, kv = arch.num_heads * d / atp, max(arch.kv_heads / atp, 1.0) * d
            shapes = [(q + 2 * kv, h), (h, q)]
        return sum(k.gemm_time(hw, local, n, kk, fmt) for n, kk in shapes)

    def _moe(self, w, tokens: np.ndarray, local: np.ndarray) -> np.ndarray:
        dep, k, hw = self.deployment, self.kernels, self.deployment.hardware
        arch, h = dep.architecture, dep.architecture.hidden_size
        experts_fmt = kernel_format(dep.precision, experts=True)
        fused = arch.num_shared_experts if self._fuses_shared_experts(experts_fmt) else 0
        time = k.gemm_time(hw, local, arch.num_experts, h, "bf16")  # the router
        time = time + k.moe_time(
            hw,
            tokens,
            hidden=h,
            inter=arch.expert_ffn_hidden_size,
            experts=arch.num_experts + fused,
            topk=arch.experts_per_token + fused,
            ep=dep.ep,
            moe_tp=dep.moe_tp,
            fmt=experts_fmt,
            runner=self.scheduler.moe_runner,
        )
        if arch.num_shared_experts and not fused:
            width = arch.num_shared_experts * arch.expert_ffn_hidden_size / dep.attention_tp
            fmt = kernel_format(dep.precision)
            time = (
                time
                + k.gemm_time(hw, local, 2 * width, h, fmt)
                + k.gemm_time(hw, local, h, width, fmt)
            )
        if dep.attention_dp > 1 and dep.ep > 1:
            # Dispatch (fp8 or bf16 activations) and combine (bf16) of the group's tokens.
            sent = local * arch.experts_per_token * h
            time = (
                time
                + k.alltoall_time(hw, sent * 1.0, dep.tp)
                + k.alltoall_time(hw, sent * 2.0, dep.tp)
            )
        elif dep.tp > 1:
            # An all-reduce; with attention DP over split experts an all-gather of the
            # tokens and a reduce-scatter of the outputs, the same traffic.
            time = time + k.allreduce_time(hw, tokens * h * 2.0, dep.tp)
        return time

    def _fuses_shared_experts(self, experts_fmt: str) -> bool:
        """Whether the engine runs the shared experts inside the routed experts' kernel here:
        only where every GPU holds every expert's slice (no expert parallelism, no attention DP)
        and the experts are not FP4 (SGLang serves those with FlashInfer's kernels, unfused)."""
        dep = self.deployment
        return (
            self.scheduler.fuse_shared_experts
            and dep.ep == 1
            and dep.attention_dp == 1
            and experts_fmt not in ("nvfp4", "mxfp4")
        )

    def _head(self, rows: np.ndarray) -> np.ndarray:
        dep = self.deployment
        arch = dep.architecture
        local = rows / dep.attention_dp
        return self.kernels.gemm_time(
            dep.hardware, local, arch.vocab_size / dep.attention_tp, arch.hidden_size, "bf16"
        )


def weight_bytes_per_gpu(deployment: Deployment) -> float:
    """Bytes of weights on each GPU: the attention split over attention_tp (each attention
    group holds a copy), experts over all tp GPUs (ep x moe_tp), the rest over tp."""
    from idealized_runtime.cost_model.hardware.counts import layer_weight_bytes

    arch, precision, tp = deployment.architecture, deployment.precision, deployment.tp
    total = 0.0
    dense_bytes = float(precision.dense_weight_bytes)
    for layer in range(arch.num_layers):
        w = layer_weights(arch, layer)
        whole = float(layer_weight_bytes(arch, layer, precision))
        linear = precision.bytes_per_weight if precision.scope == "linear" else dense_bytes
        served = linear  # the attention block kept in 16 bits where ``attention_format`` says
        if attention_format(precision, arch.mla) == "bf16":
            served = dense_bytes
        counted = w.attention_matrices * linear + w.attention_other * dense_bytes
        attention = w.attention_matrices * served + w.attention_other * dense_bytes
        total += attention / deployment.attention_tp + (whole - counted) / tp
    embedding, head = end_weight_parameters(arch)
    return total + (embedding + head) * dense_bytes / tp


def kv_capacity_tokens(deployment: Deployment, scheduler: SchedulerDefaults) -> int:
    """Tokens of KV cache the engine holds over all its attention groups, next to the weights
    in ``scheduler.memory_fraction`` of each GPU's memory (of what the weights leave, for
    engines that size the cache so); InputError in one line when the weights do not fit."""
    arch, hardware = deployment.architecture, deployment.hardware
    weights = weight_bytes_per_gpu(deployment)
    memory = hardware.device_memory_bytes
    if scheduler.of_free:
        free = (memory - weights) * scheduler.memory_fraction
    else:
        free = memory * scheduler.memory_fraction - weights
    if free <= 0:
        raise InputError(
            f"{arch.name} ({deployment.precision.label}) needs {weights / GB:.1f} GB of weights "
            f"per GPU at tensor-parallel size {deployment.tp}; {hardware.name} leaves "
            f"{memory * scheduler.memory_fraction / GB:.1f} GB (raise the GPU count)"
        )
    per_token = kv_bytes_per_token_layer(arch, deployment.precision, deployment.attention_tp)
    per_token *= arch.num_layers
    return int(free // per_token) * deployment.attention_dp
