"""Generation: KV-cached decoding equals full recomputation, and the Generator contract."""

from __future__ import annotations

import pytest
import torch

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.generate import Generator
from tests.test_architectures import TINY

# Catalog shapes, and tiny configs of the families with sliding windows (8 tokens: ring caches),
# soft-capping, sinks, MLA and shared-expert MoE.
ARCHS = ["tiny-llama", "tiny-gpt2", "gemma2", "gemma3_text", "gpt_oss", "deepseek_v3"]


def _arch(name: str) -> Architecture:
    if name in TINY:
        return architecture_from_hf_config(TINY[name], name=name)
    return get_architecture(name)


@pytest.mark.parametrize("name", ARCHS)
def test_cached_decode_equals_full_recomputation(name: str) -> None:
    arch = _arch(name)
    generator = Generator(arch, max_batch_size=2, max_seq_len=64, seed=1)
    prompt = torch.randint(0, arch.vocab_size, (2, 10), generator=torch.Generator().manual_seed(0))
    steps: list[torch.Tensor] = []
    tokens = generator.generate(prompt, 12, on_token=lambda t: steps.append(t.clone()))

    assert tokens.shape == (2, 12) and tokens.dtype == torch.long
    assert torch.equal(torch.stack(steps, dim=1), tokens)
    # Recompute every step from scratch: the logits of the full sequence at each position.
    sequence = torch.cat([prompt, tokens[:, :-1]], dim=1)
    full = Generator(arch, max_batch_size=2, max_seq_len=64, seed=1).logits(sequence)
    assert torch.equal(full[:, 9:].argmax(-1), tokens)
    # And the cached per-step logits equal the recomputed ones.
    generator.logits(prompt)  # prefill
    cached = [generator.logits(sequence[:, i : i + 1], start=i) for i in range(10, 21)]
    assert (torch.cat(cached, dim=1) - full[:, 10:]).abs().max().item() < 1e-4


def test_same_seed_same_weights_and_layer_count_independent() -> None:
    arch = get_architecture("tiny-llama")
    a = Generator(arch, seed=7).model.state_dict()
    b = Generator(arch, seed=7, num_layers=1).model.state_dict()
    assert all(torch.equal(b[key], a[key]) for key in b)


def test_rejects_too_long_and_bad_inputs() -> None:
    generator = Generator(get_architecture("tiny-llama"), max_seq_len=16)
    with pytest.raises(ValueError, match="max_seq_len"):
        generator.generate(torch.zeros((1, 10), dtype=torch.long), 8)
    with pytest.raises(ValueError, match="int64"):
        generator.generate(torch.zeros((1, 4), dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="batch size"):
        generator.generate(torch.zeros((2, 4), dtype=torch.long), 2)


def test_bfloat16_on_cpu_runs() -> None:
    generator = Generator(get_architecture("tiny-gpt2"), dtype="bfloat16", max_seq_len=32)
    assert generator.generate(torch.ones((1, 5), dtype=torch.long), 3).shape == (1, 3)


class _EagerGraph:
    """Stands in for a captured CUDA graph on CPU: replay runs the captured step eagerly."""

    def __init__(self, generator: Generator, batch: int, kv_len: int) -> None:
        self.generator, self.batch, self.kv_len = generator, batch, kv_len

    def replay(self) -> None:
        self.generator._decode_into_static(self.batch, self.kv_len)


def _graphs_on_cpu(generator: Generator, captured: list[tuple[int, int, int]]) -> None:
    """Run the CUDA-graph decode path on CPU: static buffers, KV-length buckets and masks, the
    side-stream warm-up, with an eager 'graph' that replays the same step."""

    def capture(key: tuple[int, int, int]) -> _EagerGraph:
        batch, kv_len, _ = key
        captured.append(key)
        generator._warm_up(batch, kv_len)
        graph = _EagerGraph(generator, batch, kv_len)
        generator._graphs[key] = graph  # type: ignore[assignment]
        return graph

    generator.use_graphs = True
    generator._capture = capture  # type: ignore[method-assign]


@pytest.mark.parametrize("name", ARCHS)
def test_graph_decode_path_across_buckets_up_to_the_last_cache_position(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("idealized_runtime.local_runner.generate.GRAPH_BUCKET", 8)
    arch = _arch(name)
    eager = Generator(arch, max_seq_len=20, seed=3)
    graphed = Generator(arch, max_seq_len=20, seed=3)
    captured: list[tuple[int, int, int]] = []
    _graphs_on_cpu(graphed, captured)
    rng = torch.Generator().manual_seed(0)
    # A bucket first captured at the very last cache position (19 of 20): the warm-up must not
    # step beyond it. Then a request that crosses buckets 8 -> 16 -> 20 (capped at the cache),
    # over stale cache entries of the previous request that the mask must hide.
    for prompt_len, outputs in ((19, 2), (3, 18), (7, 6)):
        prompt = torch.randint(0, arch.vocab_size, (1, prompt_len), generator=rng)
        assert torch.equal(graphed.generate(prompt, outputs), eager.generate(prompt, outputs))
    layers = arch.num_layers
    assert sorted(captured) == [(1, 8, layers), (1, 16, layers), (1, 20, layers)]


def test_moe_steps_that_group_tokens_by_expert_are_not_captured() -> None:
    arch = get_architecture("tiny-llama").model_copy(
        update={"name": "tiny-moe", "num_experts": 4, "experts_per_token": 2}
    )
    generator = Generator(arch, max_batch_size=3, max_seq_len=16)
    captured: list[tuple[int, int, int]] = []
    _graphs_on_cpu(generator, captured)
    prompt = torch.ones((3, 4), dtype=torch.long)
    generator.generate(prompt, 3)  # 3 tokens x top-2 > 4 experts: host-side grouping, eager
    assert captured == []
    generator.generate(prompt[:2], 3)  # 2 x 2 <= 4: gathered experts, static shapes
    assert [key[0] for key in captured] == [2]


def test_compiled_decode_without_graphs_uses_bucket_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("idealized_runtime.local_runner.generate.GRAPH_BUCKET", 8)
    arch = get_architecture("tiny-llama")
    compiled = Generator(arch, max_seq_len=24, compile=True)
    kv_lens: list[int] = []

    def step(tokens, positions, kv_len, **kwargs):  # records the shapes the compiler would see
        kv_lens.append(kv_len)
        return compiled.model.forward(tokens, positions, kv_len, **kwargs)

    compiled._step = step
    prompt = torch.arange(5, dtype=torch.long).view(1, 5)
    tokens = compiled.generate(prompt, 12)
    assert torch.equal(tokens, Generator(arch, max_seq_len=24).generate(prompt, 12))
    assert sorted(set(kv_lens)) == [8, 16]
