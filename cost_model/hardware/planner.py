"""The memory planner: how many GPUs of a kind a model needs, and in which layout.

``plan_gpus`` / ``min_gpus``: the fewest GPUs of a kind that hold the weights and the KV cache of
``batch_size`` sequences of ``context_tokens``, keeping ``reserve_fraction`` of each GPU's memory
for activations, the CUDA context and allocator slack (0.10, as vLLM's default
gpu_memory_utilization 0.9). Layouts tried, fewest GPUs first: tensor parallelism over tp = 1, 2,
4, 8 GPUs of one node (tp must divide num_heads, and divide or be a multiple of num_kv_heads,
since a KV head cannot be split; it is replicated when tp > num_kv_heads). Beyond one node, tensor
parallelism would all-reduce every layer over the network, so the planner adds pipeline stages
instead: pp groups of the largest valid tp, each holding ceil(layers / pp) layers (and the
embedding or the LM head on the end stages). The bytes per GPU come from
``counts.memory_per_gpu``.
"""

from __future__ import annotations

from dataclasses import dataclass

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    BF16,
    IDEAL,
    Architecture,
    Deployment,
    Efficiency,
    Hardware,
    Precision,
)
from idealized_runtime.cost_model.hardware.counts import memory_per_gpu

GPUS_PER_NODE = 8
DEFAULT_RESERVE_FRACTION = 0.10
# Beyond this many GPUs a "deployment" is not a serving plan any more.
MAX_GPUS = 1024
GB = 1e9


@dataclass(frozen=True)
class GpuPlan:
    """A layout that fits: ``tp`` GPUs per pipeline stage, ``pp`` stages."""

    num_gpus: int
    tp: int
    pp: int
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    usable_bytes_per_gpu: float

    @property
    def used_fraction(self) -> float:
        return (self.weight_bytes_per_gpu + self.kv_bytes_per_gpu) / self.usable_bytes_per_gpu


def valid_tensor_parallel_sizes(arch: Architecture, max_tp: int = GPUS_PER_NODE) -> list[int]:
    """Powers of two up to ``max_tp`` that split the heads evenly (see the module docstring)."""
    sizes = []
    tp = 1
    while tp <= max_tp:
        if arch.num_heads % tp == 0 and (arch.kv_heads % tp == 0 or tp % arch.kv_heads == 0):
            sizes.append(tp)
        tp *= 2
    return sizes


def plan_gpus(
    arch: Architecture,
    hardware_or_memory_gb: Hardware | float,
    *,
    context_tokens: int,
    batch_size: int = 1,
    precision: Precision = BF16,
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
    gpus_per_node: int = GPUS_PER_NODE,
    tp: int | None = None,
) -> GpuPlan:
    """The smallest layout that fits (see the module docstring); InputError if none does.

    ``tp`` fixes the tensor-parallel size (then only pipeline stages are added)."""
    memory_gb = (
        hardware_or_memory_gb.memory_gb
        if isinstance(hardware_or_memory_gb, Hardware)
        else float(hardware_or_memory_gb)
    )
    if not memory_gb > 0:
        raise InputError(f"GPU memory must be positive, got {memory_gb} GB")
    if not 0 <= reserve_fraction < 1:
        raise InputError(f"reserve_fraction must be in [0, 1), got {reserve_fraction}")
    if context_tokens < 1 or batch_size < 1:
        raise InputError("context_tokens and batch_size must be >= 1")
    usable = memory_gb * GB * (1.0 - reserve_fraction)
    sizes = valid_tensor_parallel_sizes(arch, gpus_per_node)
    if tp is not None:
        if tp not in valid_tensor_parallel_sizes(arch, max(tp, gpus_per_node)):
            raise InputError(
                f"tensor-parallel size {tp} is not valid for {arch.name} (num_heads "
                f"{arch.num_heads}, num_kv_heads {arch.kv_heads}); valid: "
                + ", ".join(map(str, sizes))
            )
        sizes = [tp]

    def plan(tp: int, pp: int) -> GpuPlan | None:
        weights, kv = memory_per_gpu(
            arch, precision, tp=tp, pp=pp, context_tokens=context_tokens, batch_size=batch_size
        )
        if weights + kv > usable:
            return None
        return GpuPlan(tp * pp, tp, pp, weights, kv, usable)

    for size in sizes:
        if found := plan(size, 1):
            return found
    widest = sizes[-1]
    for pp in range(2, min(arch.num_layers, MAX_GPUS // widest) + 1):
        if found := plan(widest, pp):
            return found
    weights, kv = memory_per_gpu(
        arch,
        precision,
        tp=widest,
        pp=arch.num_layers,
        context_tokens=context_tokens,
        batch_size=batch_size,
    )
    raise InputError(
        f"{arch.name} ({precision.label}, {batch_size} x {context_tokens} tokens of context) does "
        f"not fit on {memory_gb:g} GB GPUs: even one layer per pipeline stage at tensor-parallel "
        f"size {widest} needs {(weights + kv) / GB:.1f} GB per GPU, {usable / GB:.1f} GB usable"
    )


def min_gpus(
    arch: Architecture,
    hardware_or_memory_gb: Hardware | float,
    *,
    context_tokens: int,
    batch_size: int = 1,
    precision: Precision = BF16,
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
) -> int:
    """Minimum number of GPUs of a kind to serve ``arch`` (see ``plan_gpus`` for the layout)."""
    return plan_gpus(
        arch,
        hardware_or_memory_gb,
        context_tokens=context_tokens,
        batch_size=batch_size,
        precision=precision,
        reserve_fraction=reserve_fraction,
    ).num_gpus


def plan_deployment(
    arch: Architecture,
    hardware: Hardware,
    *,
    context_tokens: int,
    batch_size: int = 1,
    precision: Precision = BF16,
    tp: int | None = None,
    efficiency: Efficiency = IDEAL,
    stack: str | None = None,
) -> Deployment:
    """The ``Deployment`` of ``arch`` on the fewest GPUs of ``hardware`` that hold it (``tp``
    fixes the tensor-parallel size; pipeline stages are added when one stage does not fit),
    timed at ``efficiency`` (the stack named ``stack``)."""
    plan = plan_gpus(
        arch,
        hardware,
        context_tokens=context_tokens,
        batch_size=batch_size,
        precision=precision,
        tp=tp,
    )
    return Deployment(
        architecture=arch,
        hardware=hardware,
        tp=plan.tp,
        pp=plan.pp,
        precision=precision,
        batch_size=batch_size,
        efficiency=efficiency,
        stack=stack,
    )
