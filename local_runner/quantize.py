"""Quantized weights and KV caches for the runner, through PyTorch's own kernels.

A model is built and initialised in its compute dtype (bf16 for quantized runs), then
``quantize_weights`` replaces each linear weight by a ``QuantizedWeight``: an object that holds the
packed data and its scales and takes part in torch's function dispatch (``__torch_function__``),
so ``F.linear(x, weight, bias)`` in model.py runs the packed kernel without model.py knowing:

    int8      per-output-channel symmetric scales; ``torch.ops.aten._weight_int8pack_mm``
    int4-gN   groups of N input channels with a scale and a zero point each (the "tinygemm"
              layout); ``_weight_int4pack_mm`` on CUDA, ``_weight_int4pack_mm_for_cpu`` on CPU
    fp8       e4m3 with per-output-channel scales, dequantized to the compute dtype per matmul
              (storage and bytes read are fp8; no fp8 GEMM is assumed)

Expert weights of a mixture of experts ([experts, out, in]) are quantized per expert, and index
like the dense tensor (``weight[experts]``) so the MoE code paths stay as they are. Embeddings,
the LM head, norms and routers stay in the compute dtype. ``quantize_kv_cache`` stores keys and
values (or MLA's latents) in fp8 (e4m3, no scale: the values of a normalised model are far inside
its range) or int8 (symmetric, one scale per cached vector), dequantized when attention reads
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    DEFAULT_INT4_GROUP,
    DENSE_FORMATS,
    FORMAT_OF_DTYPE,
    KV_CACHE_FORMATS,
    Architecture,
    parse_precision,
)
from idealized_runtime.local_runner.model import KVCache, LatentCache

# Group sizes the int4 kernels take (tinygemm); core's labels allow any power of two >= 8.
INT4_GROUPS = (32, 64, 128, 256)
KV_FORMATS = tuple(name for name in KV_CACHE_FORMATS if name not in DENSE_FORMATS)
FP8_MAX = 448.0  # largest finite float8_e4m3fn
# CUDA tinygemm tiles the input features in tiles of 16 x inner_k_tiles (2, 4 or 8): the widest
# tiling that divides a matrix's input features is used (any multiple of 32 takes 2).
INT4_INNER_K_TILES = (8, 4, 2)


@dataclass(frozen=True)
class WeightFormat:
    """How linear weights are stored: ``dense`` (the compute dtype), int8, int4 in groups, fp8."""

    kind: str  # "dense" | "int8" | "int4" | "fp8"
    group_size: int | None = None  # int4 only

    @property
    def label(self) -> str:
        if self.kind == "int4":
            return f"int4-g{self.group_size}"
        return self.kind

    @property
    def quantized(self) -> bool:
        return self.kind != "dense"


def _format_label(text: str) -> str:
    """A label as core's parser reads it; dtype names (``bfloat16``) mean their dense format.
    Anything else is passed on as typed, so that messages quote the user's own text."""
    return FORMAT_OF_DTYPE.get(text.strip().lower(), text)


def parse_weight_format(text: str) -> WeightFormat:
    """A weight-format label, read by core's parser (``parse_precision``: the same labels and
    messages as ``estimate --weights``), as the runner stores it; InputError for a label core
    refuses or a format the runner has no kernel for."""
    precision = parse_precision(weights=_format_label(text))
    name, group = precision.weight_format, precision.group_size
    if name in DENSE_FORMATS:
        return WeightFormat("dense")
    if name == "fp8" or (name == "int8" and group is None):
        return WeightFormat(name)
    if name == "int4":
        if group not in INT4_GROUPS:
            raise InputError(
                f"int4 group size must be one of {', '.join(map(str, INT4_GROUPS))}, got {group}"
            )
        return WeightFormat("int4", group)
    raise InputError(
        f"the local runner has no kernel for {precision.weights} weights; use bf16, fp16, fp32, "
        f"int8, int4[-gN] (N: {', '.join(map(str, INT4_GROUPS))}) or fp8"
    )


def parse_kv_format(text: str) -> str | None:
    """``bf16|fp16|fp32`` (None: the compute dtype), ``fp8`` or ``int8``."""
    value = _format_label(text).strip().lower()
    if value in DENSE_FORMATS:
        return None
    if value in KV_FORMATS:
        return value
    raise InputError(f"unknown KV-cache format {text!r}; use bf16, fp16, fp32, fp8 or int8")


# --- quantized weights ------------------------------------------------------------------------


class QuantizedWeight:
    """A linear weight [out, in] (or experts [E, out, in]) in a packed format.

    Subclasses implement ``_matmul_2d(x2d, index)`` (x @ W^T for one matrix) and
    ``dequantize()``; everything else in torch sees the dense weight (slow, but correct), so a
    model that uses a weight in some other way still computes the right thing."""

    def __init__(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> None:
        self.shape = torch.Size(shape)
        self.dtype, self.device = dtype, device

    # Subclass API
    def _matmul_2d(self, x: torch.Tensor, index: int | None) -> torch.Tensor:
        raise NotImplementedError

    def dequantize(self) -> torch.Tensor:
        raise NotImplementedError

    def _select(self, index: torch.Tensor | int) -> QuantizedWeight:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes held on the device: packed data plus scales (and zero points)."""
        raise NotImplementedError

    # The dense-tensor surface model.py uses
    def dim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index: torch.Tensor | int) -> QuantizedWeight:
        if self.dim() != 3:
            raise TypeError("only expert weights [E, out, in] can be indexed")
        return self._select(index)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        lead = x.shape[:-1]
        y = self._matmul_2d(x.reshape(-1, x.shape[-1]).to(self.dtype), None)
        y = y.reshape(*lead, self.shape[-2])
        return y + bias if bias is not None else y

    def bmm(self, x: torch.Tensor) -> torch.Tensor:
        """weight[i] @ x[i] for experts i: x [n, in, m] -> [n, out, m]."""
        outs = [
            self._matmul_2d(x[i].transpose(0, 1).to(self.dtype), i).transpose(0, 1)
            for i in range(self.shape[0])
        ]
        return torch.stack(outs)

    @classmethod
    def __torch_function__(
        cls, func: Callable, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func is F.linear and isinstance(args[1], QuantizedWeight):
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            return args[1].linear(args[0], bias)
        if func is torch.bmm and isinstance(args[0], QuantizedWeight):
            return args[0].bmm(args[1])

        def dense(value: Any) -> Any:
            return value.dequantize() if isinstance(value, QuantizedWeight) else value

        return func(*map(dense, args), **{key: dense(val) for key, val in kwargs.items()})


class _ChannelScaledWeight(QuantizedWeight):
    """Packed data [..., out, in] with one scale per output channel [..., out]."""

    def __init__(self, data: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__(data.shape, dtype, data.device)
        self.data, self.scales = data, scales

    def _select(self, index: torch.Tensor | int) -> QuantizedWeight:
        return type(self)(self.data[index], self.scales[index], self.dtype)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.scales.nbytes


class Int8Weight(_ChannelScaledWeight):
    """int8 data, scales in the compute dtype."""

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> Int8Weight:
        w = weight.float()
        scales = (w.abs().amax(dim=-1) / 127.0).clamp(min=1e-12)
        data = torch.round(w / scales.unsqueeze(-1)).clamp(-128, 127).to(torch.int8)
        return cls(data.contiguous(), scales.to(weight.dtype), weight.dtype)

    def _matmul_2d(self, x: torch.Tensor, index: int | None) -> torch.Tensor:
        data = self.data if index is None else self.data[index]
        scales = self.scales if index is None else self.scales[index]
        return torch.ops.aten._weight_int8pack_mm(x.contiguous(), data, scales)

    def dequantize(self) -> torch.Tensor:
        return (self.data.to(self.dtype) * self.scales.unsqueeze(-1)).to(self.dtype)


class Fp8Weight(_ChannelScaledWeight):
    """float8_e4m3fn data, float32 scales."""

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> Fp8Weight:
        w = weight.float()
        scales = (w.abs().amax(dim=-1) / FP8_MAX).clamp(min=1e-12)
        data = (w / scales.unsqueeze(-1)).to(torch.float8_e4m3fn)
        return cls(data.contiguous(), scales, weight.dtype)

    def _matmul_2d(self, x: torch.Tensor, index: int | None) -> torch.Tensor:
        data = self.data if index is None else self.data[index]
        scales = self.scales if index is None else self.scales[index]
        return F.linear(x, data.to(self.dtype)) * scales.to(self.dtype)

    def dequantize(self) -> torch.Tensor:
        return (self.data.float() * self.scales.unsqueeze(-1)).to(self.dtype)


class Int4Weight(QuantizedWeight):
    """4-bit groups with a scale and zero point each: w = (q - 8) * scale + zero, q in 0..15.
    Packed per matrix for the device's kernel; experts are a list of matrices."""

    def __init__(
        self,
        shape: Sequence[int],
        packed: list[torch.Tensor],
        scales_and_zeros: list[torch.Tensor],
        group_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__(shape, dtype, device)
        self.packed, self.scales_and_zeros, self.group_size = packed, scales_and_zeros, group_size

    @classmethod
    def quantize(cls, weight: torch.Tensor, group_size: int) -> Int4Weight:
        matrices = list(weight) if weight.dim() == 3 else [weight]
        packed, scales = zip(*(_int4_pack(m, group_size) for m in matrices), strict=True)
        return cls(
            weight.shape, list(packed), list(scales), group_size, weight.dtype, weight.device
        )

    def _matmul_2d(self, x: torch.Tensor, index: int | None) -> torch.Tensor:
        i = 0 if index is None else index
        packed, scales = self.packed[i], self.scales_and_zeros[i]
        if self.device.type == "cuda":
            return torch.ops.aten._weight_int4pack_mm(
                x.contiguous(), packed, self.group_size, scales
            )
        return torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.contiguous(), packed, self.group_size, scales
        )

    def dequantize(self) -> torch.Tensor:
        eye = torch.eye(self.shape[-1], dtype=self.dtype, device=self.device)
        mats = [self._matmul_2d(eye, i).t() for i in range(len(self.packed))]
        return torch.stack(mats) if self.dim() == 3 else mats[0]

    def _select(self, index: torch.Tensor | int) -> Int4Weight:
        if isinstance(index, int):
            ids = [index]
            shape = self.shape[1:]
        else:
            ids = [int(i) for i in index.reshape(-1).tolist()]
            shape = (len(ids), *self.shape[1:])
        return Int4Weight(
            shape,
            [self.packed[i] for i in ids],
            [self.scales_and_zeros[i] for i in ids],
            self.group_size,
            self.dtype,
            self.device,
        )

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.packed) + sum(s.nbytes for s in self.scales_and_zeros)


def _int4_pack(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    out_features, in_features = weight.shape
    groups = weight.float().reshape(out_features, in_features // group_size, group_size)
    low, high = groups.amin(dim=-1, keepdim=True), groups.amax(dim=-1, keepdim=True)
    scale = ((high - low) / 15.0).clamp(min=1e-12)
    q = torch.clamp(torch.round((groups - low) / scale), 0, 15).to(torch.int32)
    q = q.reshape(out_features, in_features)
    zero = low + 8.0 * scale
    scales_and_zeros = (
        torch.cat([scale, zero], dim=-1).transpose(0, 1).contiguous().to(weight.dtype)
    )  # [in / group, out, 2]
    if weight.device.type == "cuda":
        pairs = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        tiles = next(t for t in INT4_INNER_K_TILES if in_features % (16 * t) == 0)
        packed = torch.ops.aten._convert_weight_to_int4pack(pairs, tiles)
    else:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    return packed, scales_and_zeros


def _check_int4_shape(name: str, shape: torch.Size, group_size: int) -> None:
    out_features, in_features = shape[-2], shape[-1]
    if in_features % group_size or out_features % 8:
        raise InputError(
            f"int4 with groups of {group_size} needs input features divisible by {group_size} "
            f"and output features by 8; {name} is {out_features} x {in_features} (try another "
            f"group size ({', '.join(f'int4-g{g}' for g in INT4_GROUPS)}) or int8)"
        )


def _quantizable(name: str, param: torch.Tensor) -> bool:
    """Linear weights: matrices and expert stacks named ``*_weight``; not the embeddings, the
    LM head, norms or routers (as the hardware model counts them: small, read by lookup, or
    kept in 16 bits by the engines for accuracy)."""
    leaf = name.rsplit(".", 1)[-1]
    return param.dim() in (2, 3) and leaf.endswith("_weight")


def _targets(model: nn.Module) -> list[tuple[nn.Module, str, torch.Tensor]]:
    return [
        (module, leaf, param)
        for module_name, module in model.named_modules()
        for leaf, param in list(module.named_parameters(recurse=False))
        if _quantizable(f"{module_name}.{leaf}", param)
    ]


def check_weight_format(arch: Architecture, fmt: WeightFormat, tp_size: int = 1) -> None:
    """Refuse, before any work, a format the model's (per-rank) weight shapes cannot take:
    the shapes come from one layer built on the meta device, so nothing is allocated."""
    if fmt.kind != "int4":
        return
    from idealized_runtime.local_runner.model import Transformer
    from idealized_runtime.local_runner.parallel import TensorParallel

    shapes = Transformer(arch, num_layers=1, tp=TensorParallel(0, tp_size), device="meta")
    for module, leaf, param in _targets(shapes):
        _check_int4_shape(f"{type(module).__name__}.{leaf}", param.shape, fmt.group_size or 0)


def quantize_weights(model: nn.Module, fmt: WeightFormat) -> nn.Module:
    """Replace every linear weight of ``model`` by its quantized form, in place."""
    if not fmt.quantized:
        return model
    targets = _targets(model)
    if fmt.kind == "int4":
        if targets and targets[0][2].is_cuda and targets[0][2].dtype != torch.bfloat16:
            raise InputError("int4 weights on CUDA need bfloat16 activations (--dtype bfloat16)")
        for module, leaf, param in targets:
            _check_int4_shape(f"{type(module).__name__}.{leaf}", param.shape, fmt.group_size or 0)
    for module, leaf, param in targets:
        with torch.no_grad():
            if fmt.kind == "int8":
                quantized: QuantizedWeight = Int8Weight.quantize(param.data)
            elif fmt.kind == "fp8":
                quantized = Fp8Weight.quantize(param.data)
            else:
                quantized = Int4Weight.quantize(param.data, fmt.group_size or DEFAULT_INT4_GROUP)
        del module._parameters[leaf]
        object.__setattr__(module, leaf, quantized)
    return model


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every weight the model holds: dense parameters plus quantized weights."""
    dense = sum(param.nbytes for param in model.parameters())
    packed = sum(
        value.nbytes
        for module in model.modules()
        for value in vars(module).values()
        if isinstance(value, QuantizedWeight)
    )
    return dense + packed


# --- quantized KV cache -----------------------------------------------------------------------


def _encode(values: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fp8: a plain cast; int8: symmetric, one scale per vector along the last dim."""
    if fmt == "fp8":
        return values.to(torch.float8_e4m3fn), None
    scale = (values.abs().amax(dim=-1, keepdim=True).float() / 127.0).clamp(min=1e-12)
    return torch.round(values.float() / scale).to(torch.int8), scale.to(values.dtype)


def _decode(data: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    values = data.to(dtype)
    return values * scale if scale is not None else values


class _Store:
    """One cache tensor held in fp8 or int8 (buffers ``name`` and ``name_scale`` of ``owner``)."""

    def __init__(self, owner: nn.Module, name: str, like: torch.Tensor, fmt: str) -> None:
        self.owner, self.name, self.fmt, self.dtype = owner, name, fmt, like.dtype
        storage = torch.float8_e4m3fn if fmt == "fp8" else torch.int8
        owner.register_buffer(name, torch.zeros_like(like, dtype=storage), persistent=False)
        scale = torch.ones((*like.shape[:-1], 1), device=like.device, dtype=like.dtype)
        owner.register_buffer(f"{name}_scale", scale if fmt == "int8" else None, persistent=False)

    def data(self, batch: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        scale = getattr(self.owner, f"{self.name}_scale")
        data = getattr(self.owner, self.name)[:batch]
        return data, scale[:batch] if scale is not None else None

    def write(self, batch: int, dim: int, index: torch.Tensor, values: torch.Tensor) -> None:
        data, scale = self.data(batch)
        encoded, encoded_scale = _encode(values, self.fmt)
        # Copied as bytes: index_copy_ has no fp8 kernel on every device.
        data.view(torch.uint8).index_copy_(dim, index, encoded.view(torch.uint8))
        if scale is not None:
            scale.index_copy_(dim, index, encoded_scale)

    def read(self, batch: int, length: int | None = None, dim: int = 2) -> torch.Tensor:
        data, scale = self.data(batch)
        if length is not None:
            data = data.narrow(dim, 0, length)
            scale = scale.narrow(dim, 0, length) if scale is not None else None
        return _decode(data, scale, self.dtype)

    def bytes_per_slot(self, dim: int) -> int:
        """Bytes of one position (all heads) of one sequence: data plus scales."""
        data, scale = self.data(1)
        total = data.select(dim, 0).nbytes
        return total + (scale.select(dim, 0).nbytes if scale is not None else 0)


class QuantizedKVCache(KVCache):
    """A layer's keys and values stored in fp8 or int8 and handed to attention in the compute
    dtype; full caches and sliding-window rings alike (the same bookkeeping as ``KVCache``)."""

    def __init__(self, cache: KVCache, fmt: str) -> None:
        nn.Module.__init__(self)
        self.ring = cache.ring
        self.register_buffer("positions", cache.positions, persistent=False)
        self.keys, self.values = _Store(self, "k", cache.k, fmt), _Store(self, "v", cache.v, fmt)

    def update(
        self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_len: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = k.shape[0]
        self.keys.write(batch, 2, input_pos, k)
        self.values.write(batch, 2, input_pos, v)
        return self.keys.read(batch, kv_len), self.values.read(batch, kv_len)

    def update_ring(
        self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, slots, seq = k.shape[0], self.positions.shape[0], k.shape[2]
        if seq == 1:
            slot = input_pos % slots
            self.keys.write(batch, 2, slot, k)
            self.values.write(batch, 2, slot, v)
            self.positions.index_copy_(0, slot, input_pos)
            return self.keys.read(batch), self.values.read(batch), self.positions
        older = self.positions.masked_fill(self.positions >= input_pos[0], -1)
        keys = torch.cat([self.keys.read(batch), k], 2)
        values = torch.cat([self.values.read(batch), v], 2)
        key_pos = torch.cat([older, input_pos])
        keep = input_pos[-slots:]
        self.keys.write(batch, 2, keep % slots, k[:, :, -slots:])
        self.values.write(batch, 2, keep % slots, v[:, :, -slots:])
        self.positions.index_copy_(0, keep % slots, keep)
        return keys, values, key_pos

    @property
    def bytes_per_token(self) -> int:
        return self.keys.bytes_per_slot(2) + self.values.bytes_per_slot(2)


class QuantizedLatentCache(LatentCache):
    """MLA's latent cache (kv latent + RoPE key per token) stored in fp8 or int8."""

    def __init__(self, cache: LatentCache, fmt: str) -> None:
        nn.Module.__init__(self)
        self.store = _Store(self, "latent", cache.latent, fmt)

    def update(self, input_pos: torch.Tensor, latent: torch.Tensor, kv_len: int) -> torch.Tensor:
        batch = latent.shape[0]
        self.store.write(batch, 1, input_pos, latent)
        return self.store.read(batch, kv_len, dim=1)

    @property
    def bytes_per_token(self) -> int:
        return self.store.bytes_per_slot(1)


def quantize_kv_cache(model: nn.Module, fmt: str | None) -> nn.Module:
    """Swap every layer's cache for an fp8 or int8 one (after ``setup_cache``), in place."""
    if fmt is None:
        return model
    for module in model.modules():
        for name, child in list(module.named_children()):
            if type(child) is KVCache:
                setattr(module, name, QuantizedKVCache(child, fmt))
            elif type(child) is LatentCache:
                setattr(module, name, QuantizedLatentCache(child, fmt))
    return model


def kv_cache_bytes_per_token(model: nn.Module) -> int:
    """Bytes the runner's caches hold per cached position of one sequence, over all layers
    (keys, values or latents, and their scales)."""
    total = 0
    for module in model.modules():
        if isinstance(module, QuantizedKVCache | QuantizedLatentCache):
            total += module.bytes_per_token
        elif isinstance(module, KVCache):
            total += module.k[0, :, 0].nbytes + module.v[0, :, 0].nbytes
        elif isinstance(module, LatentCache):
            total += module.latent[0, 0].nbytes
    return total
