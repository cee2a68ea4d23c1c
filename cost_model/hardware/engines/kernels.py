"""Kernel time models of an engine on one GPU: GEMMs, attention, MoE, collectives.

Each operation's time is a small physical formula whose few parameters are fitted, per engine,
GPU and number format, to that engine's measured kernels (``kernel_fit``):

- GEMM (M tokens x K -> N): ``latency + soft_max(flops / (peak x compute x M / (M + m_half)),
  bytes / (bandwidth x HBM))`` with softness ``sharpness`` (the roofline's max as it grows);
  flops at the format's tensor-core peak (bf16, fp8 per-tensor and block-scaled, nvfp4, and
  weight-only int4 / mxfp4 at the bf16 peak). Where it predicts held-out shapes better (fp8
  above all: a 4096 x 4096 weight runs at 60% of the rate of a 65536-wide one at the same M),
  the rate grows with N and K too, ``x N / (N + n_half) x K / (K + k_half)``.
- attention of prompt chunks (FlashAttention / FlashInfer style): ``latency + flops / (peak x
  compute x S / (S + s_half))``, causal flops over the attended positions; at a per-GPU layout
  (heads, KV heads, head dim; MLA: heads) the engine measured, the measured seconds per causal
  FLOP over (chunks in the step, chunk length) instead: the rate depends on the heads as much as
  on the length (the kernels parallelise over heads x chunks x tiles), which the one formula
  fitted over 1-96 heads misses (vLLM on H100, 32-64 heads: 15-30% slow; 8 heads: up to 25%
  fast);
- attention of decode tokens: ``latency + KV bytes / (bandwidth x HBM) + per_sequence x
  sequences``; at a per-GPU layout (heads, KV heads, head dim) and cache format the engine
  measured, its measured (batch, context) grid instead, as MLA decode below;
- MLA (DeepSeek) likewise, the decode side reading the 576-value latent per token; MLA decode
  at a heads count and cache format the engine measured takes its measured (batch, context)
  grid instead (log-log bilinear; beyond the grid, linear in batch and context);
- MoE grouped GEMM: the GEMM formula over the rank's routed work, with the matmul rate growing
  with the tokens per expert and the bytes of the experts the step touches, for expert layouts
  the engine did not measure; a layout it measured (format, hidden and expert widths, experts,
  top-k, MoE TP and EP) reads its measured curve over tokens at every size (log-log; below the
  smallest measured, that one; beyond the largest, linear in tokens). The one formula fitted
  on every layout of a format misses the exact shape by 12-37% in the median (its held-out
  errors), both ways: at equal bytes and FLOPs it reads every TP / EP split alike, where
  DeepSeek's experts at MoE TP 8 (256 experts, each 256 wide on a GPU) take 1.3-2.5x the time
  of the same work at EP 8 (32 whole experts) at 1-16 tokens (TensorRT-LLM on H200: the
  formula 16-43% under the measured rows at 1-512 tokens), and compute-bound prompt steps run at an
  efficiency set by the tiles over the expert width and the tokens per expert (DeepSeek's at
  TP 8 on SGLang: 1.6-2.1x slow at 4k-16k tokens);
- an elementwise pass over a step's activations (RMSNorm, rotary embedding, KV-cache write,
  top-k routing, gated activation: the small kernels between the matmuls):
  ``latency + bytes / (bandwidth x HBM)``, fitted on a measured one-pass kernel
  (``ELEMENTWISE_BYTES`` per element read and written);
- all-reduce and all-to-all: at a GPU count the engine measured, its measured latency curve
  over message sizes (interpolated in log-log; beyond the largest message, at that message's
  bandwidth): the curve bends where the algorithm changes (one-shot, two-shot, NVLS rings),
  which one line cannot follow; elsewhere ``latency(GPUs) + message x ring factor / (link x
  efficiency)``.

``OpFit`` holds one fitted formula; ``GpuKernels`` all of an engine's on one GPU, with what
they were fitted on and their held-out errors; both round-trip through JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Hardware

Array = np.ndarray
# Bytes per element of each kernel number format's weights (scales included) and activations.
WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "nvfp4": 0.5625,
    "int4_wo": 0.53125,
    "mxfp4": 0.53125,
    "mxfp4_mxfp8": 0.53125,
}
ACTIVATION_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "nvfp4": 0.5625,
    "int4_wo": 2.0,
    "mxfp4": 2.0,
    "mxfp4_mxfp8": 1.03125,  # MXFP8: a one-byte scale per 32 values
}
# Formats whose matmuls run on the fp8 / fp4 tensor cores; the others at the bf16 peak (MXFP4
# weights times MXFP8 activations run at the fp8 rate on Blackwell).
FP8_FORMATS = ("fp8", "fp8_block", "mxfp4_mxfp8")
FP4_FORMATS = ("nvfp4",)
# A MoE fit of another runner than the engine's default is keyed "format@runner" ("bf16@triton":
# SGLang's Triton fused MoE for bf16 experts): the engine's flag that picks its MoE runner.
RUNNER_SEPARATOR = "@"


def base_format(fmt: str) -> str:
    """The number format of a MoE fit's key ("bf16@triton" -> "bf16")."""
    return fmt.split(RUNNER_SEPARATOR, 1)[0]


# Bytes an elementwise pass moves per activation element: a 16-bit read and a 16-bit write.
ELEMENTWISE_BYTES = 4.0
# The FLOPs a prompt-attention grid's seconds are per (a tera-FLOP: seconds of a few digits)
PROMPT_GRID_FLOPS = 1e12
MLA_LATENT = 576  # DeepSeek's kv_lora_rank 512 + RoPE key 64, cached per token and layer
MLA_QK_DIM, MLA_V_DIM = 192, 128  # per head: nope 128 + rope 64 for q.k, 128 for values


def moe_layout(
    fmt: str, hidden: float, inter: float, experts: float, topk: float, moe_tp: float, ep: float
) -> str:
    """The key of a measured MoE curve: format/hidden/expert width/experts/top-k/MoE TP/EP."""
    return "/".join([fmt, *(f"{v:g}" for v in (hidden, inter, experts, topk, moe_tp, ep))])


def decode_layout(
    heads: float, element: float, kv_heads: float | None = None, head_dim: int | None = None
) -> str:
    """The key of a measured decode-attention grid, per GPU: MLA's "heads/cache bytes per
    element" (``kv_heads`` None), other attention's "heads/KV heads/head dim/bytes"."""
    if kv_heads is None:
        return f"{heads:g}/{element:g}"
    return f"{heads:g}/{kv_heads:g}/{head_dim}/{element:g}"


def prompt_layout(heads: float, kv_heads: float | None = None, head_dim: int | None = None) -> str:
    """The key of a measured prompt-attention grid, per GPU: MLA's "heads" (``kv_heads`` None),
    other attention's "heads/KV heads/head dim"."""
    if kv_heads is None:
        return f"{heads:g}"
    return f"{heads:g}/{kv_heads:g}/{head_dim}"


def peak_flops(hardware: Hardware, fmt: str) -> float:
    """FLOP/s of the tensor cores a kernel format's matmuls run on."""
    if fmt in FP4_FORMATS:
        peak = hardware.peak_fp4_tflops
    elif fmt in FP8_FORMATS:
        peak = hardware.peak_fp8_tflops
    else:
        peak = hardware.peak_dense_tflops
    if peak is None:
        raise InputError(f"{hardware.name} has no tensor cores for {fmt} matmuls")
    return peak * 1e12


def _soft_max(a: Array, b: Array, sharpness: float) -> Array:
    top = np.maximum(a, b)
    safe = np.where(top > 0, top, 1.0)
    k = max(sharpness, 1.0)
    return np.where(top > 0, safe * ((a / safe) ** k + (b / safe) ** k) ** (1.0 / k), 0.0)


@dataclass(frozen=True)
class OpFit:
    """One fitted kernel formula (see the module docstring); unused parameters stay 0."""

    latency_s: float = 0.0
    compute: float = 1.0  # fraction of the format's tensor-core peak at full occupancy
    half: float = 0.0  # rows (tokens, positions) at which the matmul rate is half of that
    half_n: float = 0.0  # GEMMs: output width N at which the rate is half (0: not a factor)
    half_k: float = 0.0  # GEMMs: inner width K at which the rate is half (0: not a factor)
    bandwidth: float = 1.0  # fraction of peak HBM bandwidth
    sharpness: float = 4.0  # soft max between compute and memory time (large: the max)
    per_sequence_s: float = 0.0  # decode attention: per sequence in the batch
    link: float = 1.0  # collectives: fraction of the link bandwidth
    latency_by_gpus: dict[int, float] = field(default_factory=dict)  # collectives
    # collectives: measured (message bytes, seconds) by GPU count, bytes ascending
    curve_by_gpus: dict[int, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    def compute_memory(
        self, flops: Array, rows: Array, nbytes: Array, peak: float, hbm: float
    ) -> Array:
        """latency + soft max of the matmul time (rate growing with ``rows``) and the bytes'."""
        rate = (
            peak * self.compute * rows / (rows + self.half)
            if self.half > 0
            else peak * self.compute
        )
        math_s = flops / rate
        memory_s = nbytes / (hbm * self.bandwidth)
        return self.latency_s + _soft_max(math_s, memory_s, self.sharpness)

    def shape_efficiency(self, n: ArrayLike, k: ArrayLike) -> Array:
        """The share of the matmul rate a GEMM of output width ``n`` and inner width ``k``
        reaches (1 where the fit has no such factors)."""
        share = np.ones_like(np.asarray(n, dtype=np.float64) * np.asarray(k, dtype=np.float64))
        if self.half_n > 0:
            share = share * n / (n + self.half_n)
        if self.half_k > 0:
            share = share * k / (k + self.half_k)
        return share

    def collective(
        self, message_bytes: Array, gpus: int, ring: float, link_bytes_s: float
    ) -> Array:
        """The measured curve at ``gpus`` where there is one, else latency at ``gpus``
        (interpolated in log GPUs) + message x ``ring`` / link rate."""
        if gpus <= 1:
            return np.zeros_like(np.asarray(message_bytes, dtype=np.float64))
        curve = self._curves.get(gpus)
        if curve is not None:
            return curve.at(message_bytes)
        known = sorted(self.latency_by_gpus)
        latency = float(
            np.interp(math.log2(gpus), np.log2(known), [self.latency_by_gpus[n] for n in known])
        )
        return latency + np.asarray(message_bytes) * ring / (link_bytes_s * self.link)

    @cached_property
    def _curves(self) -> dict[int, MeasuredCurve]:
        """The measured curves over message bytes (built once: a step time reads them for
        every layer)."""
        return {
            gpus: MeasuredCurve(*(tuple(column) for column in zip(*curve, strict=True)))
            for gpus, curve in self.curve_by_gpus.items()
            if curve
        }

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            name: round(float(getattr(self, name)), 9)
            for name in (
                "latency_s",
                "compute",
                "half",
                "bandwidth",
                "sharpness",
                "per_sequence_s",
                "link",
            )
        }
        for name in ("half_n", "half_k"):  # only where fitted: the other fits stay as they were
            if getattr(self, name):
                data[name] = round(float(getattr(self, name)), 9)
        if self.latency_by_gpus:
            data["latency_by_gpus"] = {str(n): round(v, 9) for n, v in self.latency_by_gpus.items()}
        if self.curve_by_gpus:
            data["curve_by_gpus"] = {
                str(n): [[float(b), round(t, 9)] for b, t in curve]
                for n, curve in sorted(self.curve_by_gpus.items())
            }
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpFit:
        values = dict(data)
        by_gpus = {int(n): float(v) for n, v in dict(values.pop("latency_by_gpus", {})).items()}
        curves = {
            int(n): tuple((float(b), float(t)) for b, t in curve)
            for n, curve in dict(values.pop("curve_by_gpus", {})).items()
        }
        return cls(
            **{k: float(v) for k, v in values.items()},
            latency_by_gpus=by_gpus,
            curve_by_gpus=curves,
        )


@dataclass(frozen=True)
class MeasuredCurve:
    """Measured seconds over a size (MoE tokens, collective message bytes), sizes ascending,
    read log-log; below the smallest, its value; beyond the largest, linear in the size (at the
    largest measured rate: compute- or bandwidth-bound work grows so)."""

    sizes: tuple[float, ...]
    seconds: tuple[float, ...]

    @cached_property
    def _logs(self) -> tuple[Array, Array]:
        return np.log(self.sizes), np.log(self.seconds)

    def at(self, size: ArrayLike) -> Array:
        log_sizes, log_seconds = self._logs
        x = np.maximum(np.asarray(size, dtype=np.float64), self.sizes[0])
        inside = np.exp(np.interp(np.log(np.minimum(x, self.sizes[-1])), log_sizes, log_seconds))
        return inside * np.maximum(x / self.sizes[-1], 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes), "seconds": [round(t, 9) for t in self.seconds]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasuredCurve:
        sizes = tuple(float(x) for x in data["sizes"])
        seconds = tuple(float(t) for t in data["seconds"])
        if len(sizes) < 2 or len(sizes) != len(seconds):
            raise ValueError("a measured curve needs two or more (size, seconds) points")
        return cls(sizes, seconds)


@dataclass(frozen=True)
class MeasuredGrid:
    """Measured seconds over a (batch, positions) grid, read log-log bilinearly; beyond its
    largest batch or positions, linear in each (attention over a cache grows so)."""

    batches: tuple[float, ...]
    positions: tuple[float, ...]
    seconds: tuple[tuple[float, ...], ...]  # [batch][positions]

    @cached_property
    def _logs(self) -> tuple[Array, Array, Array]:
        """log batches, log positions, log seconds (built once: a step time reads them for
        every layer)."""
        return np.log(self.batches), np.log(self.positions), np.log(np.array(self.seconds))

    def at(self, batch: ArrayLike, positions: ArrayLike) -> Array:
        lb, lp, table = self._logs
        b = np.maximum(np.asarray(batch, dtype=np.float64), self.batches[0])
        p = np.maximum(np.asarray(positions, dtype=np.float64), self.positions[0])
        x, y = np.minimum(np.log(b), lb[-1]), np.minimum(np.log(p), lp[-1])
        i = np.clip(np.searchsorted(lb, x, side="right") - 1, 0, len(lb) - 2)
        j = np.clip(np.searchsorted(lp, y, side="right") - 1, 0, len(lp) - 2)
        tx, ty = (x - lb[i]) / (lb[i + 1] - lb[i]), (y - lp[j]) / (lp[j + 1] - lp[j])
        inside = (
            (1 - tx) * (1 - ty) * table[i, j]
            + tx * (1 - ty) * table[i + 1, j]
            + (1 - tx) * ty * table[i, j + 1]
            + tx * ty * table[i + 1, j + 1]
        )
        beyond = np.maximum(b / self.batches[-1], 1.0) * np.maximum(p / self.positions[-1], 1.0)
        return np.exp(inside) * beyond

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": list(self.batches),
            "positions": list(self.positions),
            "seconds": [[round(t, 9) for t in row] for row in self.seconds],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasuredGrid:
        return cls(
            batches=tuple(float(b) for b in data["batches"]),
            positions=tuple(float(p) for p in data["positions"]),
            seconds=tuple(tuple(float(t) for t in row) for row in data["seconds"]),
        )


# GpuKernels' measured grids, in the order an engine file stores them.
GRID_FIELDS = ("mla_decode_grids", "decode_grids", "prompt_grids", "mla_prompt_grids")


def _grids(data: Mapping[str, Any], name: str) -> dict[str, MeasuredGrid]:
    """The measured grids stored under ``name`` in an engine file (none: empty)."""
    return {key: MeasuredGrid.from_json(grid) for key, grid in dict(data.get(name, {})).items()}


@dataclass(frozen=True)
class GpuKernels:
    """An engine's kernel fits on one GPU: GEMMs and MoE per kernel format, attention, MLA,
    collectives; the engine version and files they come from; held-out errors per operation."""

    gpu: str
    version: str
    gemm: dict[str, OpFit]
    moe: dict[str, OpFit]
    context_attention: OpFit
    decode_attention: OpFit
    allreduce: OpFit
    alltoall: OpFit
    mla_context: OpFit | None = None
    mla_decode: OpFit | None = None
    # One elementwise pass over a step's activations (None: not measured, costs nothing)
    elementwise: OpFit | None = None
    # Decode attention measured (``decode_layout``): MLA's by "heads/cache bytes per element",
    # e.g. "16/2" (bf16 cache); other attention's by "heads/KV heads/head dim/bytes" per GPU
    mla_decode_grids: dict[str, MeasuredGrid] = field(default_factory=dict)
    decode_grids: dict[str, MeasuredGrid] = field(default_factory=dict)
    # Prompt attention measured: seconds per ``PROMPT_GRID_FLOPS`` causal FLOPs over (chunks,
    # chunk length), by ``prompt_layout``; MLA's by heads per GPU
    prompt_grids: dict[str, MeasuredGrid] = field(default_factory=dict)
    mla_prompt_grids: dict[str, MeasuredGrid] = field(default_factory=dict)
    # MoE measured over tokens, by ``moe_layout`` (a step of a measured layout reads it)
    moe_curves: dict[str, MeasuredCurve] = field(default_factory=dict)
    # The measured MoE format the engine runs a checkpoint format's experts in, where it is
    # not the format's own kernels (TensorRT-LLM on Blackwell: MXFP4 experts times MXFP8
    # activations, "mxfp4" -> "mxfp4_mxfp8")
    moe_served: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    errors: dict[str, dict[str, float]] = field(default_factory=dict)

    def gemm_fit(self, fmt: str) -> tuple[OpFit, str]:
        """The fit of ``fmt``'s GEMMs, or of the nearest format measured (block-scaled fp8 for
        per-tensor fp8 and back; bf16 for anything else), and the format it is."""
        return _nearest(self.gemm, fmt)

    def moe_fit(self, fmt: str, runner: str = "") -> tuple[OpFit, str]:
        """The fit of the MoE kernels the engine serves ``fmt`` experts with (``moe_served``),
        by ``runner`` where it was measured for that format (else the engine's default), or of
        the nearest format measured, and the key it is under."""
        served = self.moe_served.get(fmt, fmt)
        key = f"{served}{RUNNER_SEPARATOR}{runner}"
        if runner and key in self.moe:
            return self.moe[key], key
        if served in self.moe:  # a key of either kind, as a fit on trial asks for its own
            return self.moe[served], served
        return _nearest(self._default_moe, served)

    @cached_property
    def _default_moe(self) -> dict[str, OpFit]:
        """The MoE fits of the engine's default runner (the stand-ins ``_nearest`` picks from),
        once per kernels: ``moe_fit`` runs for every layer of every step estimated."""
        return {f: fit for f, fit in self.moe.items() if RUNNER_SEPARATOR not in f}

    def runner_formats(self, runner: str) -> tuple[str, ...]:
        """The expert formats ``runner``'s kernels were measured in."""
        suffix = RUNNER_SEPARATOR + runner
        return tuple(sorted(f.removesuffix(suffix) for f in self.moe if f.endswith(suffix)))

    @property
    def moe_runners(self) -> tuple[str, ...]:
        """The MoE runners measured beside the engine's default (its flag's values)."""
        names = {f.split(RUNNER_SEPARATOR, 1)[1] for f in self.moe if RUNNER_SEPARATOR in f}
        return tuple(sorted(names))

    # --- operation times (seconds, arrays broadcast) ----------------------------------------

    def gemm_time(self, hardware: Hardware, m: ArrayLike, n: float, k: float, fmt: str) -> Array:
        fit, measured = self.gemm_fit(fmt)
        m = np.asarray(m, dtype=np.float64)
        flops = 2.0 * m * n * k
        nbytes = n * k * WEIGHT_BYTES[measured] + m * k * ACTIVATION_BYTES[measured] + 2.0 * m * n
        peak = peak_flops(hardware, measured) * fit.shape_efficiency(n, k)
        hbm = hardware.memory_bandwidth_gbps * 1e9
        return np.where(
            m > 0, fit.compute_memory(flops, np.maximum(m, 1.0), nbytes, peak, hbm), 0.0
        )

    def moe_time(
        self,
        hardware: Hardware,
        tokens: ArrayLike,
        *,
        hidden: ArrayLike,
        inter: ArrayLike,
        experts: ArrayLike,
        topk: ArrayLike,
        ep: ArrayLike,
        moe_tp: ArrayLike,
        fmt: str,
        runner: str = "",
    ) -> Array:
        """One MoE layer's grouped GEMMs (gate+up and down) on one rank for ``tokens`` tokens
        routed over ``experts`` (each ``inter`` wide), the rank holding experts / ep of them at
        inter / moe_tp; by ``runner``'s kernels where measured (``moe_fit``)."""
        fit, key = self.moe_fit(fmt, runner)
        measured = base_format(key)
        t = np.asarray(tokens, dtype=np.float64)
        hidden, inter, experts, topk, ep, moe_tp = (
            np.asarray(v, dtype=np.float64) for v in (hidden, inter, experts, topk, ep, moe_tp)
        )
        layout = (hidden, inter, experts, topk, moe_tp, ep)
        if self.moe_curves and all(np.ndim(v) == 0 for v in layout):
            curve = self.moe_curves.get(moe_layout(key, *(float(v) for v in layout)))
            if curve is not None:  # a measured layout: its curve, the formula not needed
                return np.where(t > 0, curve.at(t), 0.0)
        width = inter / moe_tp
        local = experts / ep
        assignments = t * topk / ep
        flops = 2.0 * assignments * 3.0 * hidden * width
        touched = local * (1.0 - (1.0 - topk / experts) ** t)
        nbytes = touched * 3.0 * hidden * width * WEIGHT_BYTES[measured]
        nbytes = nbytes + assignments * (hidden * ACTIVATION_BYTES[measured] + 2.0 * hidden)
        per_expert = np.maximum(t * topk / experts, 1e-3)
        peak = peak_flops(hardware, measured)
        hbm = hardware.memory_bandwidth_gbps * 1e9
        seconds = fit.compute_memory(flops, per_expert, nbytes, peak, hbm)
        return np.where(t > 0, seconds, 0.0)

    def context_attention_time(
        self,
        hardware: Hardware,
        flops: ArrayLike,
        positions: ArrayLike,
        mla: bool = False,
        grid: tuple[str, ArrayLike] | None = None,
    ) -> Array:
        """Prompt-chunk attention of ``flops`` causal FLOPs, chunks of ``positions`` each;
        ``grid``: (``prompt_layout``, chunks in the step), to read the measured seconds per
        FLOP where the engine measured that layout (within its measured chunks and lengths:
        beyond them, at the largest measured, the rate a saturated GPU keeps)."""
        f = np.asarray(flops, dtype=np.float64)
        s = np.maximum(np.asarray(positions, dtype=np.float64), 1.0)
        if grid is not None:
            layout, chunks = grid
            measured = (self.mla_prompt_grids if mla else self.prompt_grids).get(layout)
            if measured is not None:
                c = np.minimum(np.maximum(np.asarray(chunks, dtype=np.float64), 1.0),
                               measured.batches[-1])  # fmt: skip
                per_tera = measured.at(c, np.minimum(s, measured.positions[-1]))
                return np.where(f > 0, f / PROMPT_GRID_FLOPS * per_tera, 0.0)
        fit = self.mla_context if mla and self.mla_context is not None else self.context_attention
        peak = peak_flops(hardware, "bf16")
        return np.where(f > 0, fit.compute_memory(f, s, 0.0 * f, peak, 1.0), 0.0)

    def decode_attention_time(
        self,
        hardware: Hardware,
        kv_bytes: ArrayLike,
        flops: ArrayLike,
        sequences: ArrayLike,
        mla: bool = False,
        grid: tuple[str, ArrayLike, ArrayLike] | None = None,
    ) -> Array:
        """Decode attention reading ``kv_bytes`` of cache for ``sequences`` sequences;
        ``grid``: (``decode_layout``, query tokens, positions they attend in all), to read the
        measured grid where the engine measured that layout."""
        if grid is not None:
            layout, queries, attended = grid
            measured = (self.mla_decode_grids if mla else self.decode_grids).get(layout)
            if measured is not None:
                q = np.asarray(queries, dtype=np.float64)
                positions = np.asarray(attended, dtype=np.float64) / np.maximum(q, 1e-9)
                return np.where(q > 0, measured.at(q, positions), 0.0)
        fit = self.mla_decode if mla and self.mla_decode is not None else self.decode_attention
        b = np.asarray(kv_bytes, dtype=np.float64)
        seqs = np.asarray(sequences, dtype=np.float64)
        peak = peak_flops(hardware, "bf16")
        hbm = hardware.memory_bandwidth_gbps * 1e9
        body = fit.compute_memory(np.asarray(flops, dtype=np.float64), 1.0 + 0.0 * b, b, peak, hbm)
        return np.where(seqs > 0, body + fit.per_sequence_s * seqs, 0.0)

    def elementwise_time(
        self, hardware: Hardware, tokens: ArrayLike, width: float, passes: float = 1.0
    ) -> Array:
        """``passes`` elementwise kernels over ``tokens`` x ``width`` activations (zero where
        the engine's kernels have no elementwise fit, or no tokens)."""
        t = np.asarray(tokens, dtype=np.float64)
        if self.elementwise is None or passes <= 0:
            return 0.0 * t
        nbytes = t * width * ELEMENTWISE_BYTES
        hbm = hardware.memory_bandwidth_gbps * 1e9
        one = self.elementwise.latency_s + nbytes / (hbm * self.elementwise.bandwidth)
        return np.where(t > 0, passes * one, 0.0)

    def allreduce_time(self, hardware: Hardware, message_bytes: ArrayLike, gpus: int) -> Array:
        link = hardware.interconnect_gbps * 1e9
        return self.allreduce.collective(message_bytes, gpus, 2.0 * (gpus - 1) / gpus, link)

    def alltoall_time(self, hardware: Hardware, message_bytes: ArrayLike, gpus: int) -> Array:
        link = hardware.interconnect_gbps * 1e9
        return self.alltoall.collective(message_bytes, gpus, (gpus - 1) / gpus, link)

    # --- files ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "files": list(self.files),
            "gemm": {fmt: fit.to_json() for fmt, fit in sorted(self.gemm.items())},
            "moe": {fmt: fit.to_json() for fmt, fit in sorted(self.moe.items())},
            "context_attention": self.context_attention.to_json(),
            "decode_attention": self.decode_attention.to_json(),
            "allreduce": self.allreduce.to_json(),
            "alltoall": self.alltoall.to_json(),
            "errors": self.errors,
        }
        if self.mla_context is not None:
            data["mla_context"] = self.mla_context.to_json()
        if self.mla_decode is not None:
            data["mla_decode"] = self.mla_decode.to_json()
        if self.elementwise is not None:
            data["elementwise"] = self.elementwise.to_json()
        for name in GRID_FIELDS:
            if grids := getattr(self, name):
                data[name] = {key: grid.to_json() for key, grid in sorted(grids.items())}
        if self.moe_curves:
            data["moe_curves"] = {
                key: curve.to_json() for key, curve in sorted(self.moe_curves.items())
            }
        if self.moe_served:
            data["moe_served"] = dict(sorted(self.moe_served.items()))
        return data

    @classmethod
    def from_json(cls, gpu: str, data: Mapping[str, Any]) -> GpuKernels:
        try:
            optional = {
                name: OpFit.from_json(data[name]) if name in data else None
                for name in ("mla_context", "mla_decode", "elementwise")
            }
            return cls(
                gpu=gpu,
                version=str(data["version"]),
                files=tuple(data.get("files", ())),
                gemm={f: OpFit.from_json(v) for f, v in dict(data["gemm"]).items()},
                moe={f: OpFit.from_json(v) for f, v in dict(data.get("moe", {})).items()},
                context_attention=OpFit.from_json(data["context_attention"]),
                decode_attention=OpFit.from_json(data["decode_attention"]),
                allreduce=OpFit.from_json(data["allreduce"]),
                alltoall=OpFit.from_json(data["alltoall"]),
                errors=dict(data.get("errors", {})),
                **{name: _grids(data, name) for name in GRID_FIELDS},
                moe_curves={
                    key: MeasuredCurve.from_json(curve)
                    for key, curve in dict(data.get("moe_curves", {})).items()
                },
                moe_served={str(k): str(v) for k, v in dict(data.get("moe_served", {})).items()},
                **optional,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InputError(
                f"not an engine kernel file for {gpu}: missing or bad {error}"
            ) from None


# Which measured format stands in for one that was not measured, in order.
_STAND_INS: dict[str, tuple[str, ...]] = {
    "fp8": ("fp8", "fp8_block", "bf16"),
    "fp8_block": ("fp8_block", "fp8", "bf16"),
    "nvfp4": ("nvfp4", "fp8_block", "fp8", "bf16"),
    "int4_wo": ("int4_wo", "mxfp4", "bf16"),
    "mxfp4": ("mxfp4", "int4_wo", "bf16"),
    "mxfp4_mxfp8": ("mxfp4_mxfp8", "mxfp4", "int4_wo", "bf16"),
}


def _nearest(fits: Mapping[str, OpFit], fmt: str) -> tuple[OpFit, str]:
    for candidate in _STAND_INS.get(fmt, (fmt, "bf16")):
        if candidate in fits:
            return fits[candidate], candidate
    if fits:
        first = sorted(fits)[0]
        return fits[first], first
    raise InputError(f"no kernel measurements for {fmt} matmuls")
