"""Megatron-style tensor parallelism over torch.distributed, in one small module.

Every rank builds the same model with *local* shapes: attention heads and MLP columns are split
``tp_size`` ways, the vocabulary too. Per layer that costs two all-reduces (after the row-parallel
attention output and MLP down projections) and, per forward, one all-reduce in the embedding and
one all-gather of the logits:

    column-parallel  qkv, gate/up     weight rows split, no communication
    row-parallel     out, down        weight columns split, all-reduce of the partial sums
    vocab-parallel   embedding, head  rows split; embedding all-reduced, logits all-gathered

Each parameter carries a ``ShardSpec`` saying how its full tensor is split, so that random
initialisation and HF weight loading both go through "make the full tensor, take my shard": a
model with TP=2 holds exactly the weights of the TP=1 model. Launch with ``torchrun``; NCCL on
GPU, gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in the tensor-parallel group (size 1: no communication at all)."""

    rank: int = 0
    size: int = 1

    @property
    def enabled(self) -> bool:
        return self.size > 1


SINGLE = TensorParallel()


@dataclass(frozen=True)
class ShardSpec:
    """How a full tensor is split across ranks: along ``dim``, where the dim is a concatenation
    of ``parts`` (e.g. fused q|k|v), each part split evenly so each rank keeps its own q, k, v."""

    dim: int
    parts: tuple[int, ...]

    def shard(self, full: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
        if not tp.enabled:
            return full
        pieces = torch.split(full, list(self.parts), dim=self.dim)
        return torch.cat(
            [piece.chunk(tp.size, dim=self.dim)[tp.rank] for piece in pieces], self.dim
        )


def check_divisible(arch: Architecture, tp_size: int) -> None:
    """TP splits whole heads (query and key/value) and whole MLP and expert columns (MLA's
    latent is replicated): refuse otherwise."""
    if tp_size < 1:
        raise InputError(f"tensor-parallel size must be >= 1, got {tp_size}")
    checks = [("num_heads", arch.num_heads), ("num_kv_heads", arch.kv_heads)]
    if arch.num_experts == 1 or arch.first_k_dense_layers:
        checks.append(("ffn_hidden_size", arch.ffn_hidden_size))
    if arch.num_experts > 1:
        checks.append(("moe_ffn_hidden_size", arch.expert_ffn_hidden_size))
    for what, count in checks:
        if count % tp_size:
            raise InputError(
                f"tensor-parallel size {tp_size} does not divide {what}={count} of "
                f"{arch.name!r}; use a TP size that divides {arch.num_heads} heads and "
                f"{arch.kv_heads} key/value heads"
            )


def padded_vocab_size(vocab_size: int, tp_size: int, multiple: int = 64) -> int:
    """Vocabulary padded so every rank holds the same number of rows (and GEMMs stay aligned)."""
    step = multiple * tp_size
    return -(-vocab_size // step) * step


def init_from_env(device: str) -> tuple[TensorParallel, str]:
    """Join the process group torchrun set up (WORLD_SIZE, RANK, ...); return the TP place and the
    device this rank uses. Without torchrun: a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return SINGLE, device
    rank = int(os.environ["RANK"])
    if device.startswith("cuda"):
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return TensorParallel(rank=rank, size=world_size), device


def all_reduce(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    """Sum of the ranks' partial results (row-parallel layers)."""
    if tp.enabled:
        dist.all_reduce(x)
    return x


def all_gather_last_dim(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    """Concatenate the ranks' slices along the last dimension (vocab-parallel logits)."""
    if not tp.enabled:
        return x
    pieces = [torch.empty_like(x) for _ in range(tp.size)]
    dist.all_gather(pieces, x.contiguous())
    return torch.cat(pieces, dim=-1)


def vocab_parallel_embedding(
    tokens: torch.Tensor, weight: torch.Tensor, tp: TensorParallel
) -> torch.Tensor:
    """Embedding whose rows are split across ranks: each rank looks up the tokens it owns,
    zeros the others, and the all-reduce assembles the full embedding."""
    if not tp.enabled:
        return torch.nn.functional.embedding(tokens, weight)
    rows = weight.shape[0]
    start = tp.rank * rows
    local = tokens - start
    outside = (local < 0) | (local >= rows)
    embedded = torch.nn.functional.embedding(local.masked_fill(outside, 0), weight)
    embedded = embedded.masked_fill(outside.unsqueeze(-1), 0.0)
    return all_reduce(embedded, tp)
