"""Does a profile fit on the visible GPUs? Refuse early, with a hint, rather than OOM midway.

The serving planner (how many GPUs of a given memory a model needs, for deployment) belongs to
``cost_model.hardware.planner``. This is only the runner's pre-flight check of its own
allocation: the weights and static KV cache it is about to create (counted by
``cost_model.hardware.counts``), against the free memory of the GPU each rank uses, with a
suggested ``--layers`` when they do not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from idealized_runtime.core.types import Architecture, Precision
from idealized_runtime.cost_model.hardware.counts import memory_per_gpu

# Activations, CUDA graph pools, cuBLAS workspaces: kept free beyond weights and KV cache.
HEADROOM_FRACTION = 0.10


def bytes_needed(
    arch: Architecture, dtype: str, tp: int, layers: int | None, batch: int, seq_len: int
) -> int:
    """Per-GPU bytes for the weights and KV cache of a (possibly layer-sampled) profile: the
    serving planner's count for one pipeline stage of ``tp`` GPUs."""
    sampled = arch.model_copy(update={"num_layers": layers or arch.num_layers})
    precision = Precision.from_dtype(dtype)  # type: ignore[arg-type]
    weights, cache = memory_per_gpu(
        sampled, precision, tp=tp, context_tokens=seq_len, batch_size=batch
    )
    return int(weights + cache)


def check_fits(
    arch: Architecture, dtype: str, tp: int, layers: int | None, points: Sequence
) -> str:
    """An error message if the profile does not fit on one visible GPU per rank, else ''."""
    import torch

    batch = max(point.batch_size for point in points)
    seq_len = max(point.max_seq_len for point in points)
    free, _total = torch.cuda.mem_get_info()
    needed = bytes_needed(arch, dtype, tp, layers, batch, seq_len)
    usable = free * (1 - HEADROOM_FRACTION)
    if needed <= usable:
        return ""
    hint = _suggest_layers(arch, dtype, tp, batch, seq_len, usable)
    return (
        f"{arch.name} needs {needed / 1e9:.1f} GB per GPU for weights and KV cache "
        f"({dtype}, TP={tp}, batch {batch}, {seq_len} tokens) but {usable / 1e9:.1f} GB is "
        f"usable; {hint}"
    )


def _suggest_layers(
    arch: Architecture, dtype: str, tp: int, batch: int, seq_len: int, usable: float
) -> str:
    for depth in range(arch.num_layers, 0, -1):
        if bytes_needed(arch, dtype, tp, depth, batch, seq_len) <= usable:
            return f"profile a sample of the layers with --layers {depth} (or raise --tp)"
    return "it does not fit even with one layer; raise --tp or lower --max-prompt-tokens"
