"""The runner's CUDA paths on a real GPU: graph-captured decode, CUDA-event timing, the quantized
kernels, the memory pre-flight and ``profile --device cuda``.

Skipped where no CUDA device is visible (CI); run on a GPU with
``python -m pytest tests/local_runner/test_cuda.py``. The CPU paths these mirror are checked
against HF transformers in the other runner tests, so CPU == CUDA (same weights) closes the loop.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.generate import GRAPH_BUCKET, Generator
from idealized_runtime.local_runner.quantize import weight_bytes
from tests.test_architectures import TINY

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# Dense GQA, learned positions, ring caches with sinks, MLA with shared-expert MoE.
ARCHS = ["tiny-llama", "tiny-gpt2", "gemma2", "gpt_oss", "deepseek_v3"]


def _arch(name: str) -> Architecture:
    if name in TINY:
        return architecture_from_hf_config(TINY[name], name=name)
    return get_architecture(name)


@pytest.fixture(autouse=True)
def _exact_float32():
    # TF32 would make CPU and CUDA float32 matmuls differ by ~1e-3: keep full float32 here.
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _prompt(arch: Architecture, batch: int, length: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, arch.vocab_size, (batch, length), generator=generator)


@pytest.mark.parametrize("name", ARCHS)
def test_cuda_logits_equal_cpu_logits_with_the_same_weights(name: str) -> None:
    arch = _arch(name)
    cpu = Generator(arch, max_batch_size=2, max_seq_len=64, seed=1)
    gpu = Generator(arch, device="cuda", max_batch_size=2, max_seq_len=64, seed=1)
    gpu.model.load_state_dict(cpu.model.state_dict())
    tokens = _prompt(arch, 2, 20)
    expected = cpu.logits(tokens)
    got = gpu.logits(tokens).cpu()
    assert (got - expected).abs().max().item() < 1e-3 * max(1.0, expected.abs().max().item())


@pytest.mark.parametrize("name", ARCHS)
def test_graph_decode_equals_eager_decode_across_buckets(name: str) -> None:
    """Prompt ends just before a bucket boundary, so decoding crosses into the next bucket's
    graph (a longer KV length, more padding masked)."""
    arch = _arch(name)
    seq = 2 * GRAPH_BUCKET
    prompt = _prompt(arch, 2, GRAPH_BUCKET - 4).cuda()
    eager = Generator(
        arch, device="cuda", max_batch_size=2, max_seq_len=seq, seed=1, cuda_graphs=False
    )
    graphs = Generator(arch, device="cuda", max_batch_size=2, max_seq_len=seq, seed=1)
    assert graphs.use_graphs
    expected = eager.generate(prompt, 12)
    got = graphs.generate(prompt, 12)
    assert torch.equal(got, expected)
    if graphs._static_shapes(2):
        assert {key[1] for key in graphs._graphs} == {GRAPH_BUCKET, 2 * GRAPH_BUCKET}
    # A second run replays the captured graphs and gives the same tokens.
    assert torch.equal(graphs.generate(prompt, 12), expected)


def test_graph_decode_to_the_last_cache_slot() -> None:
    arch = get_architecture("tiny-llama")
    seq = GRAPH_BUCKET
    prompt = _prompt(arch, 1, seq - 8).cuda()
    eager = Generator(arch, device="cuda", max_seq_len=seq, seed=3, cuda_graphs=False)
    graphs = Generator(arch, device="cuda", max_seq_len=seq, seed=3)
    assert torch.equal(graphs.generate(prompt, 9), eager.generate(prompt, 9))


def test_compiled_graph_decode_equals_eager() -> None:
    arch = get_architecture("tiny-llama")
    prompt = _prompt(arch, 1, 30).cuda()
    eager = Generator(arch, device="cuda", max_seq_len=128, seed=2, cuda_graphs=False)
    compiled = Generator(arch, device="cuda", max_seq_len=128, seed=2, compile=True)
    assert torch.equal(compiled.generate(prompt, 10), eager.generate(prompt, 10))


@pytest.mark.parametrize(
    ("weights", "tolerance"), [("int8", 0.02), ("fp8", 0.07), ("int4-g32", 0.2), ("int4", 0.25)]
)
def test_quantized_cuda_kernels_close_to_bf16(weights: str, tolerance: float) -> None:
    # Hidden 64 packs int4's 64 input features in tiles of 4 x 16 (the widest, 8, needs 128).
    hidden = 128 if weights == "int4" else 64
    arch = get_architecture("tiny-llama").model_copy(
        update={"name": "q-dense", "hidden_size": hidden, "ffn_hidden_size": 256}
    )
    kwargs = {"device": "cuda", "dtype": "bfloat16", "max_batch_size": 2, "max_seq_len": 64}
    dense = Generator(arch, **kwargs)
    quantized = Generator(arch, weights=weights, **kwargs)
    tokens = _prompt(arch, 2, 12)
    reference = dense.logits(tokens).float()
    logits = quantized.logits(tokens).float()
    assert torch.isfinite(logits).all()
    assert float((logits - reference).norm() / reference.norm()) < tolerance
    assert weight_bytes(quantized.model) < weight_bytes(dense.model)
    # Decode through the graphs with quantized weights runs and is deterministic.
    prompt = tokens.cuda()
    first = quantized.generate(prompt, 6)
    assert torch.equal(quantized.generate(prompt, 6), first)


@pytest.mark.parametrize("kv_cache", ["fp8", "int8"])
def test_quantized_kv_cache_graph_decode(kv_cache: str) -> None:
    arch = get_architecture("tiny-llama")
    kwargs = {"device": "cuda", "dtype": "bfloat16", "max_seq_len": 64, "seed": 4}
    eager = Generator(arch, kv_cache=kv_cache, cuda_graphs=False, **kwargs)
    graphs = Generator(arch, kv_cache=kv_cache, **kwargs)
    prompt = _prompt(arch, 1, 10).cuda()
    assert torch.equal(graphs.generate(prompt, 8), eager.generate(prompt, 8))


def test_memory_preflight_refuses_a_model_larger_than_the_gpu() -> None:
    from idealized_runtime.local_runner.grids import make_grid
    from idealized_runtime.local_runner.memory import check_fits

    small, large = get_architecture("tiny-llama"), get_architecture("llama-3.1-405b")
    assert check_fits(small, "bfloat16", 1, None, make_grid("quick", small)) == ""
    message = check_fits(large, "bfloat16", 1, None, make_grid("quick", large))
    assert "--layers" in message and "GB" in message


def test_profile_on_cuda_writes_rows_and_the_gpu_stack(tmp_path) -> None:
    out = tmp_path / "m.csv"
    command = [sys.executable, "-m", "idealized_runtime", "profile", "--arch", "tiny-llama"]
    command += ["--device", "cuda", "--grid", "quick", "--repeats", "2", "--no-progress"]
    command += ["-o", str(out)]
    subprocess.run(command, check=True, timeout=300)
    lines = out.read_text().strip().splitlines()
    assert len(lines) > 1
    import pandas as pd

    frame = pd.read_csv(out)
    assert (frame["runtime_s"] > 0).all() and (frame["ttft_s"] <= frame["runtime_s"] * 1.5).all()
    meta = json.loads(out.with_name(out.name + ".meta.json").read_text())
    text = json.dumps(meta).lower()
    assert torch.cuda.get_device_name().lower() in text
