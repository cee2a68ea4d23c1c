"""One parser of load levels (``--rate``, ``--concurrency``) for ``measure`` and ``simulate``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.load_levels import parse_load_levels

positive_integers = st.lists(st.integers(min_value=1, max_value=10**6), min_size=1, max_size=8)
positive_numbers = st.lists(
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=8,
)


@given(positive_integers)
def test_integers_round_trip_in_order_without_duplicates(levels: list[int]) -> None:
    parsed = parse_load_levels(",".join(map(str, levels)), "--concurrency", integer=True)
    assert parsed == list(dict.fromkeys(levels))
    assert all(type(level) is int for level in parsed)


@given(positive_numbers, st.integers(min_value=1, max_value=3))
def test_a_repeated_option_reads_like_one_comma_list(levels: list[float], split: int) -> None:
    texts = [repr(level) for level in levels]
    repeated = [",".join(texts[:split]), ",".join(texts[split:])] if split < len(texts) else texts
    assert parse_load_levels(repeated, "--rate", integer=False) == parse_load_levels(
        ",".join(texts), "--rate", integer=False
    )
    assert parse_load_levels(",".join(texts), "--rate", integer=False) == list(
        dict.fromkeys(levels)
    )


@pytest.mark.parametrize(
    ("values", "integer", "bad"),
    [
        ("0", False, "'0'"),
        ("2,fast", False, "'fast'"),
        ("-2", False, "'-2'"),
        ("nan", False, "'nan'"),
        ("inf", False, "'inf'"),
        ("2,", False, "''"),
        ("1,0", True, "'0'"),
        ("2.5", True, "'2.5'"),
        (["4", "x"], True, "'x'"),
    ],
)
def test_bad_levels_name_the_option_and_the_bad_part(
    values: str | list[str], integer: bool, bad: str
) -> None:
    option = "--concurrency" if integer else "--rate"
    kind = "integers" if integer else "numbers"
    with pytest.raises(InputError) as caught:
        parse_load_levels(values, option, integer=integer)
    message = str(caught.value)
    assert message.startswith(f"{option} takes comma-separated positive {kind} (e.g. {option} ")
    assert message.endswith(f"got {bad}")
