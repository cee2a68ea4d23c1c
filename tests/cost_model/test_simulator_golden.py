"""The simulator's rows and their summaries, bit for bit, against the reference results in
simulator_golden.json (``simulator_golden_cases``): a faster simulator must serve every request
exactly as before; and the step times the closed loop's passes share."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from idealized_runtime.cost_model.serving.step_time import RememberedStepTime, StepWork
from tests.cost_model.simulator_golden_cases import CASES, STEPS, figures

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


class _CountingStepTime:
    """A step time that counts the steps it was asked for."""

    def __init__(self) -> None:
        self.steps = 0

    def seconds(self, work: StepWork) -> np.ndarray:
        self.steps += len(work.tokens)
        return STEPS.seconds(work)


def test_remembered_step_times_are_the_step_times_own_computed_once() -> None:
    inner = _CountingStepTime()
    remembered = RememberedStepTime(inner)
    work = StepWork.of_totals(3, 1200, [(64, 10), (5, 0)])
    again = StepWork.of_totals(3, 1200, [(64, 10), (5, 0)])  # equal values, other arrays
    other = StepWork.of_totals(3, 1201, [(64, 10), (5, 0)])
    first = remembered.seconds(work)
    assert first.tobytes() == STEPS.seconds(work).tobytes()
    assert remembered.seconds(again) is first and inner.steps == 1
    assert remembered.seconds(other).tobytes() == STEPS.seconds(other).tobytes()
    assert inner.steps == 2
    with pytest.raises(ValueError):
        first[0] = 0.0  # shared with every later caller: read-only


def test_remembered_step_times_start_afresh_past_their_memory() -> None:
    inner = _CountingStepTime()
    remembered = RememberedStepTime(inner, max_bytes=1)
    work = StepWork.of_totals(2, 100, [])
    remembered.seconds(work)
    remembered.seconds(StepWork.of_totals(2, 101, []))
    assert remembered.seconds(work).tobytes() == STEPS.seconds(work).tobytes()
    assert inner.steps == 3  # the first work was forgotten
