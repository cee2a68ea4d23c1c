"""Tensor parallelism: TP=2 under torchrun/gloo gives the tokens and logits of TP=1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.parallel import ShardSpec, TensorParallel, check_divisible
from tests.local_runner.tp_worker import run
from tests.servers import REPO_ROOT, free_port
from tests.test_architectures import TINY

TOLERANCE = 1e-4


def _archs() -> list[Architecture]:
    moe_alibi = get_architecture("tiny-gpt2").model_copy(
        update={
            "name": "tiny-moe-alibi",
            "position": "alibi",
            "vocab_size": 500,  # not a multiple of the TP size: exercises vocab padding
            "num_experts": 4,
            "experts_per_token": 2,
            "tie_embeddings": False,
        }
    )
    new_families = [
        architecture_from_hf_config(TINY[family], name=family)
        for family in ("qwen3", "qwen3_moe", "gemma2", "gpt_oss", "deepseek_v3")
    ]
    return [get_architecture("tiny-llama"), get_architecture("tiny-gpt2"), moe_alibi, *new_families]


def test_tp2_equals_tp1(tmp_path: Path) -> None:
    archs = _archs()
    out = tmp_path / "tp2.pt"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}",
        str(REPO_ROOT / "tests" / "local_runner" / "tp_worker.py"),
        json.dumps([arch.model_dump(mode="json") for arch in archs]), str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    sharded = torch.load(out)
    for arch in archs:
        single = run(arch, TensorParallel())
        assert torch.equal(sharded[arch.name]["tokens"], single["tokens"]), arch.name
        diff = (sharded[arch.name]["logits"] - single["logits"]).abs().max().item()
        assert diff < TOLERANCE, (arch.name, diff)


def test_shard_spec_keeps_fused_parts_per_rank() -> None:
    full = torch.arange(12).view(12, 1)  # q: 0-5, k: 6-8, v: 9-11
    spec = ShardSpec(0, (6, 3, 3))
    ranks = [spec.shard(full, TensorParallel(rank, 3)).flatten().tolist() for rank in range(3)]
    assert ranks == [[0, 1, 6, 9], [2, 3, 7, 10], [4, 5, 8, 11]]


def test_tp_size_must_divide_heads() -> None:
    with pytest.raises(InputError, match="does not divide num_heads=4"):
        check_divisible(get_architecture("tiny-llama"), 3)
    with pytest.raises(InputError, match="num_kv_heads=2"):
        check_divisible(get_architecture("tiny-llama"), 4)


def test_tp_size_must_divide_expert_columns() -> None:
    moe = architecture_from_hf_config(TINY["qwen3_moe"], name="moe")  # experts 32 wide
    check_divisible(moe, 2)
    with pytest.raises(InputError, match="moe_ffn_hidden_size=31"):
        check_divisible(moe.model_copy(update={"moe_ffn_hidden_size": 31}), 2)
