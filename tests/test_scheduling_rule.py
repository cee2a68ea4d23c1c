"""The continuous-batching step rule shared by the serving engine and the simulator."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.scheduling import prompt_chunks


def test_prompt_chunks_by_hand() -> None:
    # Budget 8 with 3 decode tokens: 5 prompt tokens, first come first served.
    assert prompt_chunks(3, [2, 6, 4], 8) == [2, 3]
    assert prompt_chunks(0, [10], 8) == [8]  # a long prompt is read in chunks
    assert prompt_chunks(8, [4], 8) == []  # decode tokens fill the step
    assert prompt_chunks(9, [4], 8) == []  # more decode tokens than the budget: none
    assert prompt_chunks(0, [], 8) == []


@given(
    decoding=st.integers(0, 20),
    left=st.lists(st.integers(1, 50), max_size=8),
    budget=st.integers(1, 64),
)
def test_prompt_chunks_fill_the_budget_in_order(
    decoding: int, left: list[int], budget: int
) -> None:
    sizes = prompt_chunks(decoding, left, budget)
    assert len(sizes) <= len(left)
    assert all(1 <= size <= rest for size, rest in zip(sizes, left, strict=False))
    # Every chunk but the last is a whole prompt; the step holds no more than the budget, and
    # no less unless every prompt is read.
    assert sizes[:-1] == left[: max(len(sizes) - 1, 0)]
    total = decoding + sum(sizes)
    assert sum(sizes) == 0 or total <= budget
    assert total >= budget or sizes == left
