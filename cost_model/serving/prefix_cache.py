"""Prefix caching: prompt tokens a server finds already in its KV cache and does not read again.

Two ways to say how much is cached:

- a workload's shared prefixes (``PrefixSharing.shared_tokens`` of every prompt are common to
  the requests of one of ``groups`` groups: a system prompt, few-shot examples, a document
  several questions are asked about): the first request of a group reads its prefix, every
  later one finds it cached, in whole cache blocks (vLLM and TensorRT-LLM cache full blocks of
  ``block_tokens``; SGLang's radix cache any token, block 1);
- a hit rate given directly (``PrefixSharing.hit_rate``): that fraction of every prompt, in
  whole blocks.

A server always computes at least the last prompt token (its logits give the first output
token), so a request finds at most ``prompt - 1`` tokens cached. The cache is assumed to keep the
groups' prefixes resident (a server with little KV memory to spare would evict some and hit less).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.serving.workload import RequestShape

DEFAULT_BLOCK_TOKENS = 16  # vLLM's and TensorRT-LLM's default KV-cache block


@dataclass(frozen=True)
class PrefixSharing:
    """How a workload's prompts share prefixes (see the module docstring): ``shared_tokens``
    common to the prompts of each of ``groups`` groups, or a ``hit_rate`` given directly."""

    shared_tokens: int = 0
    groups: int = 1
    hit_rate: float | None = None
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        if self.shared_tokens < 0 or self.groups < 1 or self.block_tokens < 1:
            raise InputError(
                "shared prefix tokens must be >= 0, prefix groups and cache block tokens >= 1"
            )
        if self.hit_rate is not None:
            if not (math.isfinite(self.hit_rate) and 0 <= self.hit_rate <= 1):
                raise InputError(f"prefix-cache hit rate must be in [0, 1], got {self.hit_rate}")
            if self.shared_tokens:
                raise InputError("give shared prefix tokens or a prefix-cache hit rate, not both")

    @property
    def active(self) -> bool:
        return bool(self.shared_tokens) or bool(self.hit_rate)

    def cached(self, prompt_tokens: int, first_of_group: bool) -> int:
        """Tokens of a ``prompt_tokens`` prompt found in the cache."""
        if self.hit_rate is not None:
            wanted = self.hit_rate * prompt_tokens
        elif first_of_group:
            return 0
        else:
            wanted = min(self.shared_tokens, prompt_tokens)
        blocks = int(wanted // self.block_tokens) * self.block_tokens
        return max(0, min(blocks, prompt_tokens - 1))


def apply_prefix_sharing(
    shapes: Sequence[RequestShape], sharing: PrefixSharing
) -> list[RequestShape]:
    """``shapes`` with their cached tokens: request i belongs to group i mod ``groups``, and
    the first of each group in arrival order (index order for closed loops) misses."""
    if not sharing.active:
        return list(shapes)
    order = sorted(
        range(len(shapes)),
        key=lambda i: (shapes[i].arrival_s is not None, shapes[i].arrival_s or 0.0, i),
    )
    seen: set[int] = set()
    cached = [0] * len(shapes)
    for i in order:
        group = i % sharing.groups
        cached[i] = sharing.cached(shapes[i].num_prompt_tokens, group not in seen)
        seen.add(group)
    return [replace(s, cached_tokens=c) for s, c in zip(shapes, cached, strict=True)]


def hit_rate(shapes: Sequence[RequestShape]) -> float:
    """Fraction of all prompt tokens found in the cache."""
    prompt = sum(s.num_prompt_tokens for s in shapes)
    return sum(s.cached_tokens for s in shapes) / prompt if prompt else 0.0
