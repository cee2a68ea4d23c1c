"""Whether a profile's timings can be trusted: on a busy machine (other work on the cores) the
timed runs of a point spread apart and some points come out slower than larger ones, and a fit
of them fits the noise. The profiler measures what it can see:

* the spread of each point's repeats (their standard deviation over their median); a point
  beyond ``max_spread`` is timed again (at most ``reruns`` times) and the steadiest timing kept;
* the order the runtimes must have: at the same output length and batch a longer prompt never
  takes less time, so a point slower than a longer prompt by more than ``order_tolerance`` was
  slowed by something else; it is timed again and the faster timing kept (contention only adds
  time);
* the machine's load (``os.getloadavg``, per core) before and after.

What it found is kept in the profile's ``.meta.json`` (``timing_quality``) and, when the grid is
not trustworthy, said in one line (``warning_line``). The clock and the load are the timer's and
``load``: tests inject both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idealized_runtime.local_runner.grids import GridPoint

if TYPE_CHECKING:  # the timer imports torch; reading a profile's quality must not
    from idealized_runtime.local_runner.timer import Timing


def load_per_core() -> float | None:
    """The 1-minute load average over the cores this process may use (None where unknown)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return load / max(cores, 1)


@dataclass(frozen=True)
class NoiseCheck:
    """How the profiler judges its timings."""

    max_spread: float = 0.1  # standard deviation / median of a point's repeats
    reruns: int = 2  # extra timings of a noisy point, at most
    order_tolerance: float = 0.15  # slower than a longer prompt by more than this: out of order
    max_load_per_core: float = 1.0  # more runnable work than cores: the timings share them
    load: Callable[[], float | None] = load_per_core


def spread(timing: Timing) -> float:
    return timing.std_s / timing.runtime_s if timing.runtime_s > 0 else 0.0


def steadier(first: Timing, second: Timing) -> Timing:
    return second if spread(second) < spread(first) else first


def out_of_order(timings: Mapping[GridPoint, Timing], tolerance: float) -> list[GridPoint]:
    """Points slower than a point with a longer prompt at the same output length and batch."""
    groups: dict[tuple[int, int], list[GridPoint]] = {}
    for point in timings:
        groups.setdefault((point.num_output_tokens, point.batch_size), []).append(point)
    suspects = []
    for members in groups.values():
        members.sort(key=lambda p: p.num_prompt_tokens)
        # The fastest runtime of any longer prompt, from the longest down.
        fastest_after = float("inf")
        for point in reversed(members):
            runtime = timings[point].runtime_s
            if runtime > fastest_after * (1 + tolerance):
                suspects.append(point)
            fastest_after = min(fastest_after, runtime)
    return sorted(suspects)


@dataclass
class QualityReport:
    """What the checks found over one profile run (``.meta.json``'s ``timing_quality``)."""

    check: NoiseCheck
    points: int = 0
    load_before: float | None = None
    load_after: float | None = None
    rerun: int = 0  # points timed again (spread or order)
    noisy: list[GridPoint] = field(default_factory=list)  # still beyond max_spread
    out_of_order: list[GridPoint] = field(default_factory=list)  # still out of order
    max_spread: float = 0.0

    @property
    def busy(self) -> bool:
        loads = [load for load in (self.load_before, self.load_after) if load is not None]
        return any(load > self.check.max_load_per_core for load in loads)

    @property
    def trustworthy(self) -> bool:
        return not (self.noisy or self.out_of_order)

    def to_json(self) -> dict[str, Any]:
        def names(points: Sequence[GridPoint]) -> list[list[int]]:
            return [[p.num_prompt_tokens, p.num_output_tokens, p.batch_size] for p in points]

        return {
            "trustworthy": self.trustworthy,
            "points": self.points,
            "load_per_core_before": self.load_before,
            "load_per_core_after": self.load_after,
            "busy": self.busy,
            "max_spread": round(self.max_spread, 4),
            "rerun": self.rerun,
            "noisy_points": names(self.noisy),
            "out_of_order_points": names(self.out_of_order),
            "limits": {
                "max_spread": self.check.max_spread,
                "reruns": self.check.reruns,
                "order_tolerance": self.check.order_tolerance,
                "max_load_per_core": self.check.max_load_per_core,
            },
        }


def profile_warning(csv_path: str | Path) -> str | None:
    """The warning line of a profile CSV whose ``.meta.json`` says its timings are not
    trustworthy (None for any other file)."""
    import json

    meta = Path(str(csv_path) + ".meta.json")
    try:
        quality = json.loads(meta.read_text(encoding="utf-8")).get("timing_quality")
    except (OSError, ValueError, AttributeError):
        return None
    return warning_line(quality) if isinstance(quality, dict) else None


def warning_line(quality: Mapping[str, Any]) -> str | None:
    """One line when a profile's timings are not trustworthy (from ``QualityReport.to_json``,
    as kept in ``.meta.json``); None when they are."""
    if quality.get("trustworthy", True):
        return None
    limits = quality.get("limits", {})
    found = []
    if quality.get("noisy_points"):
        found.append(
            f"{len(quality['noisy_points'])} of {quality.get('points')} points spread more than "
            f"{limits.get('max_spread', 0):.0%} after {limits.get('reruns')} re-runs"
        )
    if quality.get("out_of_order_points"):
        found.append(
            f"{len(quality['out_of_order_points'])} slower than a longer prompt after a re-run"
        )
    loads = [
        load
        for load in (quality.get("load_per_core_before"), quality.get("load_per_core_after"))
        if load is not None
    ]
    if loads:
        found.append(f"load {max(loads):.1f} per core")
    return (
        "warning: timings not trustworthy (" + "; ".join(found) + "): a fit of them fits noise; "
        "profile again on an idle machine"
    )
