"""The simulator's rows and their summaries, bit for bit, against the reference results in
simulator_golden.json (``simulator_golden_cases``): a faster simulator must serve every request
exactly as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cost_model.simulator_golden_cases import CASES, figures

GOLDEN = json.loads(Path(__file__).with_name("simulator_golden.json").read_text("utf-8"))


def test_every_case_has_a_reference() -> None:
    assert sorted(GOLDEN) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_and_summaries_match_the_reference(name: str) -> None:
    found, expected = figures(CASES[name]()), GOLDEN[name]
    # Per row first: a difference names the request.
    for row, reference in zip(found["per_row"], expected["per_row"], strict=True):
        assert row == reference
    assert found == expected
