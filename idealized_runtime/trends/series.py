"""A provider's rounds as time series: one series per (provider, model), rounds in time order,
the shifts of each detected statistic (``changes``), and medians and spread over a window.

Shifts are looked for over the whole series, whatever window is shown: a window that starts
after a shift still flags it, and the baseline of a shift near the window's start lies before
it. A failed round has no latency: it counts in the error rate and the rounds, and is left out
of the latency statistics' series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
from pydantic import AwareDatetime, BaseModel, ConfigDict

from idealized_runtime.core.rounds import RoundPoint
from idealized_runtime.trends.changes import ChangeSettings, find_shifts


@dataclass(frozen=True)
class Statistic:
    name: str  # the RoundPoint field
    label: str
    unit: str
    detected: bool  # shifts are looked for


STATISTICS = (
    Statistic("ttft_s", "TTFT p50", "s", True),
    Statistic("itl_s", "ITL p50", "s", True),
    Statistic("output_tokens_per_s", "output speed", "tokens/s", True),
    Statistic("denoised_runtime_s", "denoised runtime", "s", True),
    Statistic("idealized_runtime_s", "idealized runtime", "s", False),
    Statistic("discrepancy", "denoised / idealized", "x", False),
    Statistic("error_rate", "error rate", "fraction", False),
    Statistic("usd", "dollars per round", "USD", False),
)
DETECTED = tuple(statistic.name for statistic in STATISTICS if statistic.detected)
# The spread shown beside a window's median: the 10th and 90th percentiles.
SPREAD_PERCENTILES = (10.0, 90.0)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class Change(_Out):
    """A shift of one statistic: flagged at one round, begun (estimated) at an earlier one."""

    statistic: str
    direction: Literal["up", "down"]
    round_id: str  # the round at which it was flagged
    round_index: int
    at: AwareDatetime
    start_round_id: str  # the first round of the new level (the estimate)
    start_round_index: int
    start_at: AwareDatetime
    before: float  # median of the baseline rounds
    after: float  # median of the rounds from the start to the flag
    relative: float  # (after - before) / before
    rounds_to_flag: int  # rounds of the new level up to and including the flag


class Spread(_Out):
    """Median and spread (10th-90th percentile) of a statistic's values in a window."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    values: int = 0


class WindowSummary(_Out):
    start: AwareDatetime | None
    end: AwareDatetime | None
    rounds: int
    failed_rounds: int
    degraded_rounds: int = 0  # most requests failed
    requests: int
    failed_requests: int
    usd_total: float
    statistics: dict[str, Spread]


class ProviderSeries(_Out):
    provider: str
    model: str
    reference: str | None  # the idealized runtime's reference (the latest round's)
    points: tuple[RoundPoint, ...]
    changes: tuple[Change, ...]

    def between(self, start: datetime | None, end: datetime | None) -> ProviderSeries:
        """The same series with the points and changes of [start, end] only."""
        return self.model_copy(
            update={
                "points": tuple(p for p in self.points if _within(p.started_at, start, end)),
                "changes": tuple(c for c in self.changes if _within(c.at, start, end)),
            }
        )

    def window(self, start: datetime | None = None, end: datetime | None = None) -> WindowSummary:
        inside = [p for p in self.points if _within(p.started_at, start, end)]
        return window_summary(inside, start, end)


def _within(moment: datetime, start: datetime | None, end: datetime | None) -> bool:
    return (start is None or moment >= start) and (end is None or moment <= end)


def spread(values: Sequence[float]) -> Spread:
    if not values:
        return Spread()
    low, high = SPREAD_PERCENTILES
    p10, median, p90 = np.percentile(np.asarray(values, dtype=float), [low, 50.0, high])
    return Spread(median=float(median), p10=float(p10), p90=float(p90), values=len(values))


def window_summary(
    points: Sequence[RoundPoint], start: datetime | None = None, end: datetime | None = None
) -> WindowSummary:
    """Medians and spread of every statistic over ``points`` (rounds of one series)."""
    statistics = {
        statistic.name: spread(
            [value for p in points if (value := getattr(p, statistic.name)) is not None]
        )
        for statistic in STATISTICS
    }
    return WindowSummary(
        start=start,
        end=end,
        rounds=len(points),
        failed_rounds=sum(p.status == "failed" for p in points),
        degraded_rounds=sum(p.status == "degraded" for p in points),
        requests=sum(p.requests for p in points),
        failed_requests=sum(p.failed_requests for p in points),
        usd_total=math.fsum(p.usd or 0.0 for p in points),
        statistics=statistics,
    )


def series_changes(
    points: Sequence[RoundPoint], settings: ChangeSettings | None = None
) -> list[Change]:
    """The shifts of every detected statistic of one series (``points`` in time order), in
    time order of their flags."""
    changes = []
    for name in DETECTED:
        present = [p for p in points if getattr(p, name) is not None]
        for shift in find_shifts([getattr(p, name) for p in present], settings):
            flagged, first = present[shift.alarm], present[shift.start]
            changes.append(
                Change(
                    statistic=name,
                    direction="up" if shift.direction == "up" else "down",
                    round_id=flagged.round_id,
                    round_index=flagged.round_index,
                    at=flagged.started_at,
                    start_round_id=first.round_id,
                    start_round_index=first.round_index,
                    start_at=first.started_at,
                    before=shift.before,
                    after=shift.after,
                    relative=shift.relative,
                    rounds_to_flag=shift.alarm - shift.start + 1,
                )
            )
    return sorted(changes, key=lambda c: (c.at, c.statistic))


def build_series(
    points: Iterable[RoundPoint], settings: ChangeSettings | None = None
) -> list[ProviderSeries]:
    """One series per (provider, model), rounds in time order, with their shifts."""
    groups: dict[tuple[str, str], list[RoundPoint]] = {}
    for point in points:
        groups.setdefault((point.provider, point.model), []).append(point)
    series = []
    for (provider, model), members in sorted(groups.items()):
        members.sort(key=lambda p: (p.started_at, p.round_index))
        references = [p.reference for p in members if p.reference]
        series.append(
            ProviderSeries(
                provider=provider,
                model=model,
                reference=references[-1] if references else None,
                points=tuple(members),
                changes=tuple(series_changes(members, settings)),
            )
        )
    return series
