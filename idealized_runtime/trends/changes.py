"""Where a provider's series shifts beyond its own noise: a two-sided CUSUM on robust z-scores,
each flag confirmed by a rank test.

Each round's value is scored against a baseline of the provider's own recent rounds: the median
of the last ``baseline_rounds`` values that were in control, and their MAD (median absolute
deviation, x 1.4826: the standard deviation of normal noise; widened for a small baseline) as
the scale. A median and a MAD ignore a few slow rounds (a network hiccup, a neighbour's burst)
where a mean and a standard deviation would follow them. The z-score is clipped at ``clip``, so
that one outlier round can never raise the alarm alone, and the CUSUM sums what is left above
``drift``:

    up   = max(0, up   + z - drift)        down = max(0, down - z - drift)

A sustained shift of d scales adds about d - drift a round, so it is flagged after about
threshold / (d - drift) rounds, while noise keeps pulling both sums back to zero. The round
where the rising sum left zero estimates when the shift began. A candidate is flagged when

* the median of its rounds differs from the baseline median by at least
  ``min_relative_shift`` (a provider with very steady timings would otherwise be flagged for
  shifts of a percent; a smaller candidate is taken into the baseline and the sums restart), and
* a Mann-Whitney test of its rounds against the baseline's gives p < ``confirm_p``: the rank
  test makes no assumption on the noise's shape, and keeps the false alarms of a baseline
  whose median or MAD happened to come out low (20 to 40 rounds estimate both only roughly).

After a flag the new level is the baseline, and nothing is flagged until it holds
``min_baseline_rounds`` rounds. The detector reads the values in order and never looks ahead:
the flags of the first n rounds are the same whatever follows them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# MAD times this estimates the standard deviation of normal noise.
MAD_TO_SD = 1.4826
# Exact Mann-Whitney p-values up to this many values in all; a normal approximation beyond.
EXACT_RANK_TEST_VALUES = 60


@dataclass(frozen=True)
class ChangeSettings:
    """The detector's parameters (docs/monitoring.md gives their false alarms and delays)."""

    baseline_rounds: int = 40
    min_baseline_rounds: int = 20
    drift: float = 1.0
    threshold: float = 8.0
    clip: float = 4.0
    min_relative_shift: float = 0.1
    confirm_p: float = 1e-4
    # The baseline ends at most this many rounds back: a slow drift is followed rather than
    # summed up (a shift is flagged within a few rounds, before the baseline reaches it).
    follow_after: int = 10
    # The scale is at least this fraction of the median: a series of identical values has no
    # spread to score against.
    scale_floor: float = 0.01

    def __post_init__(self) -> None:
        if self.min_baseline_rounds < 3 or self.baseline_rounds < self.min_baseline_rounds:
            raise ValueError("need 3 <= min_baseline_rounds <= baseline_rounds")
        if not (self.drift >= 0 and self.threshold > 0 and self.clip > self.drift):
            raise ValueError("need drift >= 0, threshold > 0 and clip > drift")
        if not (self.min_relative_shift >= 0 and self.scale_floor > 0 and self.confirm_p > 0):
            raise ValueError("need min_relative_shift >= 0, scale_floor > 0 and confirm_p > 0")


@dataclass(frozen=True)
class Shift:
    """A flagged shift: ``start`` is the first value of the new level (the estimate), ``alarm``
    the value at which it was flagged (indices into the values given)."""

    start: int
    alarm: int
    before: float  # the baseline median
    after: float  # the median of the values from start to alarm

    @property
    def relative(self) -> float:
        return (self.after - self.before) / abs(self.before) if self.before else math.inf

    @property
    def direction(self) -> str:
        return "up" if self.after > self.before else "down"


def _baseline(values: Sequence[float], settings: ChangeSettings) -> tuple[float, float]:
    window = np.asarray(values, dtype=float)
    n = window.size
    median = float(np.median(window))
    mad = float(np.median(np.abs(window - median))) * MAD_TO_SD
    # A new value's spread about a median of n values, and MAD's small-sample bias.
    scale = mad * math.sqrt(1 + math.pi / (2 * n)) * n / (n - 0.8)
    return median, max(scale, settings.scale_floor * abs(median), 1e-12)


def _confirmed(new: Sequence[float], baseline: Sequence[float], settings: ChangeSettings) -> bool:
    from scipy.stats import mannwhitneyu  # loads only where a candidate needs it

    exact = len(new) + len(baseline) <= EXACT_RANK_TEST_VALUES
    test = mannwhitneyu(
        new, baseline, alternative="two-sided", method="exact" if exact else "asymptotic"
    )
    return bool(test.pvalue < settings.confirm_p)


def _change_point(
    values: Sequence[float],
    start: int,
    end: int,
    median: float,
    scale: float,
    settings: ChangeSettings,
) -> int:
    """Where in [start, end] the new level most likely began: the split that maximizes the
    evidence (sum of z-scores)^2 / count of the values after it. The sum's last zero (start)
    can lie a few noisy rounds early; this moves it to where the step is."""
    z = np.clip((np.asarray(values[start : end + 1], dtype=float) - median) / scale,
                -settings.clip, settings.clip)  # fmt: skip
    tail_sums = np.cumsum(z[::-1])[::-1]
    counts = np.arange(len(z), 0, -1)
    return start + int(np.argmax(tail_sums**2 / counts))


def find_shifts(values: Sequence[float], settings: ChangeSettings | None = None) -> list[Shift]:
    """The shifts of ``values`` (a series in time order, no missing values), in order."""
    settings = settings or ChangeSettings()
    shifts: list[Shift] = []
    level_start = 0  # first index of the current level
    in_control = -1  # last index that was in control: the baseline ends there
    up = down = 0.0
    up_start = down_start = 0
    for index, value in enumerate(values):
        if index - level_start < settings.min_baseline_rounds:
            in_control = index
            continue
        last = max(in_control, index - settings.follow_after)
        first = max(level_start, last - settings.baseline_rounds + 1)
        baseline = values[first : last + 1]
        median, scale = _baseline(baseline, settings)
        z = min(max((value - median) / scale, -settings.clip), settings.clip)
        if up == 0:
            up_start = index
        if down == 0:
            down_start = index
        up = max(0.0, up + z - settings.drift)
        down = max(0.0, down - z - settings.drift)
        if max(up, down) > settings.threshold:
            start = max(up_start if up > settings.threshold else down_start, last + 1)
            start = _change_point(values, start, index, median, scale, settings)
            candidate = values[start : index + 1]
            after = float(np.median(candidate))
            if abs(after - median) < settings.min_relative_shift * abs(median):
                up = down = 0.0  # too small to matter: it joins the baseline
            elif _confirmed(candidate, baseline, settings):
                shifts.append(Shift(start, index, median, after))
                level_start = start
                up = down = 0.0
            # else: not yet clear; the sums go on and the next round tests again
        if up == 0 and down == 0:
            in_control = index
    return shifts
