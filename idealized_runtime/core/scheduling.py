"""The continuous-batching step rule (Dynamic SplitFuse), one definition for the serving engine
(``local_runner.batching``) and the serving simulator (``cost_model.serving``), so that the
simulated server schedules each step exactly as the real one does.

A step is one forward pass: every running request past its prompt decodes one token, and what
is left of the token budget goes to prompt chunks of the requests still reading their prompt,
in the order they joined, each chunk as large as fits.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_TOKEN_BUDGET = 256


def prompt_chunks(num_decoding: int, prompt_left: Iterable[int], token_budget: int) -> list[int]:
    """The prompt tokens each still-prefilling request reads in this step: ``prompt_left`` are
    their unread prompt tokens, in the order they joined; the result has one chunk size (>= 1)
    for each of the first requests that get one (the rest wait for a later step)."""
    budget = token_budget - num_decoding
    sizes: list[int] = []
    for left in prompt_left:
        if budget <= 0:
            break
        size = min(budget, left)
        sizes.append(size)
        budget -= size
    return sizes
