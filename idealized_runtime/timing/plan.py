"""Which requests one run of a load level sends: every (grid point, repeat), every request of a
trace, or every turn of a conversation, that the output does not hold yet, in the order they go
out (shuffled, unless the config says in order; a trace and conversations in arrival order, a
trace placed on the wall clock by ``start_at_s``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.conversations import Conversation
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.rows import Key


@dataclass(frozen=True)
class Job:
    """One request to send: its grid point and repeat (a trace: its index)."""

    point: GridPoint
    repeat: int
    arrival_s: float = 0.0  # trace replays only


@dataclass(frozen=True)
class SessionJob:
    """One conversation to hold: its turns that the output lacks, sent one after another."""

    index: int  # its place in the workload: the repeat of its turns' rows
    conversation: Conversation
    done_turns: frozenset[int] = frozenset()

    @property
    def arrival_s(self) -> float:
        return self.conversation.arrival_s

    @property
    def turns_to_send(self) -> int:
        return len(self.conversation.turns) - len(self.done_turns)


def trace_zero(config: MeasureConfig) -> float | None:
    """The wall-clock time of a trace's time 0 with ``start_at_s`` (its earliest arrival then
    goes out at ``start_at_s``, whichever of its requests a resumed run still has to send)."""
    if config.start_at_s is None or not config.workload:
        return None
    return config.start_at_s - min(request.arrival_s for request in config.workload)


def planned_requests(config: MeasureConfig) -> int:
    """Requests of the level in all: the conversations' turns, the trace's, or the grid's times
    the repeats."""
    if config.conversations is not None:
        return sum(len(conversation.turns) for conversation in config.conversations)
    if config.workload is not None:
        return len(config.workload)
    return config.repeats * len(config.grid)


def plan_sessions(config: MeasureConfig, done: set[Key]) -> tuple[list[SessionJob], int]:
    """The conversations with turns still to send (in arrival order), and the turns ``done``
    already holds. A turn's key has its requested prompt tokens, history included."""
    assert config.conversations is not None
    identity = (config.recorded_model, config.endpoint)
    jobs, already = [], 0
    for index, conversation in enumerate(config.conversations):
        sizes = conversation.requested_prompt_tokens()
        finished = frozenset(
            turn
            for turn, (size, spec) in enumerate(zip(sizes, conversation.turns, strict=True))
            if (*identity, size, spec.output_tokens, index, config.load) in done
        )
        already += len(finished)
        if len(finished) < len(conversation.turns):
            jobs.append(SessionJob(index, conversation, finished))
    return jobs, already


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
