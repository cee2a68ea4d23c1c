"""The (prompt tokens, output tokens, batch) grids the profiler times: HELM's grid (HELM's 27
prompt sizes x outputs 1..64, plus long-context prompts up to the context length) and a quick one,
cut to a model's context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture

# HELM's 27 prompt sizes (Narayanan et al. 2023), plus 2048.
HELM_PROMPT_SIZES = (
    1,
    16,
    32,
    64,
    128,
    192,
    256,
    320,
    384,
    428,
    472,
    512,
    576,
    640,
    704,
    768,
    832,
    896,
    960,
    1024,
    1152,
    1280,
    1408,
    1536,
    1664,
    1792,
    1920,
    2048,
)
HELM_OUTPUT_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
LONG_CONTEXT_OUTPUT_SIZES = (1, 8, 32)
QUICK_PROMPT_SIZES = (1, 16, 64, 128)
QUICK_OUTPUT_SIZES = (1, 4, 16)
GRIDS = ("helm", "quick")


@dataclass(frozen=True, order=True)
class GridPoint:
    num_prompt_tokens: int
    num_output_tokens: int
    batch_size: int = 1

    @property
    def max_seq_len(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens - 1


def make_grid(
    name: str,
    arch: Architecture,
    *,
    max_prompt_tokens: int | None = None,
    batch_sizes: Sequence[int] = (1,),
) -> list[GridPoint]:
    """The ``helm`` or ``quick`` grid, cut to the model's context (and ``max_prompt_tokens``).

    ``helm``: HELM's prompt sizes x outputs 1..64, plus long-context prompts 4096, 8192, ... up
    to the context length with fewer outputs. A point whose prompt plus outputs exceed the
    context is left out."""
    if name not in GRIDS:
        raise InputError(f"unknown grid {name!r}; known: {', '.join(GRIDS)}")
    if max_prompt_tokens is not None and max_prompt_tokens < 1:
        raise InputError(f"--max-prompt-tokens must be >= 1, got {max_prompt_tokens}")
    if max_prompt_tokens is not None and max_prompt_tokens > arch.max_context:
        raise InputError(
            f"--max-prompt-tokens {max_prompt_tokens} exceeds the context length "
            f"{arch.max_context} of {arch.name!r}"
        )
    limit = min(arch.max_context, max_prompt_tokens or arch.max_context)
    if name == "quick":
        sizes = [(p, QUICK_OUTPUT_SIZES) for p in QUICK_PROMPT_SIZES]
    else:
        sizes = [(p, HELM_OUTPUT_SIZES) for p in HELM_PROMPT_SIZES]
        long_prompt = 4096
        while long_prompt <= limit:
            sizes.append((long_prompt, LONG_CONTEXT_OUTPUT_SIZES))
            long_prompt *= 2
    points = [
        GridPoint(p, o, b)
        for b in batch_sizes
        for p, outputs in sizes
        if p <= limit
        for o in outputs
        if p + o - 1 <= arch.max_context
    ]
    if not points:
        raise InputError(f"grid {name!r} has no point within {limit} tokens")
    return points
