"""The runner's pre-flight memory check counts bytes as the serving planner does."""

from __future__ import annotations

import pytest

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.types import Precision
from idealized_runtime.cost_model.hardware.counts import memory_per_gpu
from idealized_runtime.local_runner.memory import bytes_needed


def test_llama_8b_bf16_weights_and_cache() -> None:
    arch = get_architecture("llama-3.1-8b")
    needed = bytes_needed(arch, "bfloat16", tp=1, layers=None, batch=1, seq_len=4096)
    # 8.03B parameters x 2 bytes + 4096 tokens x 128 KiB of KV cache per token.
    assert needed == pytest.approx(8.03e9 * 2 + 4096 * 131072, rel=5e-3)
    weights, kv = memory_per_gpu(
        arch, Precision.from_dtype("bfloat16"), tp=1, pp=1, context_tokens=4096, batch_size=1
    )
    assert needed == int(weights + kv)


def test_layer_sampling_and_tensor_parallelism_shrink_the_need() -> None:
    arch = get_architecture("llama-3.1-70b")
    full = bytes_needed(arch, "bfloat16", tp=1, layers=None, batch=1, seq_len=2048)
    sampled = bytes_needed(arch, "bfloat16", tp=1, layers=8, batch=1, seq_len=2048)
    split = bytes_needed(arch, "bfloat16", tp=4, layers=None, batch=1, seq_len=2048)
    assert sampled < full / 5
    assert split == pytest.approx(full / 4, rel=1e-6)
