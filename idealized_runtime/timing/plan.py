"""Which requests one run of a load level sends: every (grid point, repeat), or every request of
a trace, that the output does not hold yet, in the order they go out (shuffled, unless the
config says in order; a trace in arrival order, placed on the wall clock by ``start_at_s``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.rows import Key


@dataclass(frozen=True)
class Job:
    """One request to send: its grid point and repeat (a trace: its index)."""

    point: GridPoint
    repeat: int
    arrival_s: float = 0.0  # trace replays only


def trace_zero(config: MeasureConfig) -> float | None:
    """The wall-clock time of a trace's time 0 with ``start_at_s`` (its earliest arrival then
    goes out at ``start_at_s``, whichever of its requests a resumed run still has to send)."""
    if config.start_at_s is None or not config.workload:
        return None
    return config.start_at_s - min(request.arrival_s for request in config.workload)


def planned_requests(config: MeasureConfig) -> int:
    """Requests of the level in all: the trace's, or the grid's times the repeats."""
    if config.workload is not None:
        return len(config.workload)
    return config.repeats * len(config.grid)


def plan_jobs(config: MeasureConfig, done: set[Key]) -> tuple[list[Job], int]:
    """The requests still to send and how many of the planned ones ``done`` already holds."""
    identity = (config.recorded_model, config.endpoint)
    if config.workload is not None:
        # A trace's requests are told apart by their index (the repeat column).
        jobs = [
            Job(GridPoint(p, o), index, arrival)
            for index, (arrival, p, o) in enumerate(config.workload)
            if (*identity, p, o, index, config.load) not in done
        ]
        return jobs, planned_requests(config) - len(jobs)
    jobs = [
        Job(point, repeat)
        for repeat in range(config.repeats)
        for point in config.grid
        if (*identity, *point, repeat, config.load) not in done
    ]
    if config.shuffle:
        random.Random(config.seed).shuffle(jobs)
    return jobs, planned_requests(config) - len(jobs)
