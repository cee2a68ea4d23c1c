"""The change detector on seeded noise: few false alarms on a steady provider, shifts found
within a few rounds, robust to outlier rounds, and never looking ahead."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.trends.changes import ChangeSettings, find_shifts
from tests.trends.noise import steady_rounds


def test_a_steady_provider_raises_almost_no_alarm() -> None:
    """100,000 rounds of seeded noise (a 10% spread per request, 2% slow spikes): the false
    alarms counted here are the rate docs/monitoring.md states."""
    rng = np.random.default_rng(20261126)
    alarms = sum(len(find_shifts(list(steady_rounds(rng, 1000, 0.1)))) for _ in range(100))
    print(f"false alarms: {alarms} in 100,000 rounds")
    assert alarms <= 2


def test_no_false_alarm_in_the_first_rounds_of_steady_providers() -> None:
    # The baseline is shortest at the start: 200 steady series of 60 rounds, 5% spread.
    rng = np.random.default_rng(7)
    flagged = sum(bool(find_shifts(list(steady_rounds(rng, 60, 0.05)))) for _ in range(200))
    assert flagged == 0


@pytest.mark.parametrize("factor", [2.0, 1.5, 1.3, 0.7, 0.5])
def test_a_shift_is_flagged_within_a_few_rounds(factor: float) -> None:
    """A step of ``factor`` at round 60 of 200 seeded series (10% spread per request): found
    after 4 rounds in the median (1 = at the first shifted round), its size and start
    estimated. One of the series has a false alarm before the step (the same noise for every
    factor)."""
    rng = np.random.default_rng(11)
    delays, starts, sizes, early, missed = [], [], [], 0, 0
    for _ in range(200):
        values = steady_rounds(rng, 100, 0.1)
        values[60:] *= factor
        shifts = find_shifts(list(values))
        early += sum(s.alarm < 60 for s in shifts)
        after = [s for s in shifts if s.alarm >= 60]
        if not after:
            missed += 1
            continue
        delays.append(after[0].alarm - 60 + 1)
        starts.append(after[0].start - 60)
        sizes.append(after[0].relative)
        assert after[0].direction == ("up" if factor > 1 else "down")
    print(f"x{factor}: delay median {np.median(delays)}, p90 {np.percentile(delays, 90)}")
    assert early <= 1 and missed <= 1
    assert np.median(delays) == 4 and np.percentile(delays, 90) <= 5
    assert np.median(sizes) == pytest.approx(factor - 1, abs=0.03)
    assert np.median(starts) == 0 and np.mean(np.abs(starts) <= 1) >= 0.95


def test_outlier_rounds_alone_raise_no_alarm() -> None:
    rng = np.random.default_rng(3)
    values = steady_rounds(rng, 80, 0.05)
    values[40] *= 5  # one very slow round
    values[55:57] *= 4  # two in a row
    assert find_shifts(list(values)) == []


def test_a_shift_below_the_minimum_is_not_flagged() -> None:
    # A very steady provider (1% spread) moving by 5%: real, but below min_relative_shift.
    rng = np.random.default_rng(5)
    values = steady_rounds(rng, 120, 0.01, spikes=0.0)
    values[60:] *= 1.05
    assert find_shifts(list(values)) == []
    assert find_shifts(list(values), ChangeSettings(min_relative_shift=0.02))


def test_a_new_level_becomes_the_baseline() -> None:
    # Two steps: each flagged once, the second against the first's level.
    rng = np.random.default_rng(9)
    values = steady_rounds(rng, 150, 0.05)
    values[50:] *= 2.0
    values[100:] *= 0.5
    shifts = find_shifts(list(values))
    assert [s.direction for s in shifts] == ["up", "down"]
    assert 50 <= shifts[0].alarm < 56 and 100 <= shifts[1].alarm < 106
    assert shifts[1].before == pytest.approx(2.0, rel=0.1)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    cut=st.integers(0, 120),
    factor=st.sampled_from([0.5, 1.0, 1.6]),
)
def test_the_flags_of_the_first_rounds_do_not_depend_on_later_ones(
    seed: int, cut: int, factor: float
) -> None:
    rng = np.random.default_rng(seed)
    values = list(steady_rounds(rng, 120, 0.1))
    values[70:] = [v * factor for v in values[70:]]
    whole = [s for s in find_shifts(values) if s.alarm < cut]
    assert find_shifts(values[:cut]) == whole


def test_settings_are_checked() -> None:
    for bad in (
        {"min_baseline_rounds": 2},
        {"baseline_rounds": 10, "min_baseline_rounds": 20},
        {"clip": 0.5, "drift": 1.0},
        {"confirm_p": 0.0},
    ):
        with pytest.raises(ValueError):
            ChangeSettings(**bad)
