"""Multi-turn conversations for ``measure --workload``: sessions of turns, each turn a prompt and
an output length and the think time before it; every turn resends the session's history (its
earlier prompts and answers) as a shared prefix, as chat clients do, and as aiperf's multi_turn
and guidellm's multi-turn datasets replay them.

A workload file holds conversations when its records have ``turns`` or a session column; else it
is a trace of independent requests (``load_patterns.read_workload``). Two layouts, after aiperf's:

* one conversation a line (JSONL): ``{"session_id": "a", "arrival_s": 0, "turns": [{"input_length":
  100, "output_length": 20}, {"input_length": 30, "output_length": 40, "delay": 2000}]}``;
* one turn a line (JSONL or CSV), consecutive in file order per ``session_id``; the session's
  arrival is on its first turn.

Per turn: the new prompt tokens (``num_prompt_tokens``, ``prompt_tokens`` or ``input_length``),
the output tokens (``num_output_tokens``, ``output_tokens`` or ``output_length``) and the think
time before it, counted from the previous turn's end (from the session's start for its first
turn): ``think_time_s`` or ``delay_s`` in seconds, ``delay`` or ``delay_ms`` in milliseconds (as
aiperf's ``delay``). Per session: ``session_id`` (or ``session``, ``conversation_id``; a line
number when a one-line conversation has none) and an optional arrival time in seconds
(``arrival_s``, ``arrival_time``, ``timestamp``; default 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.load_patterns import (
    MAX_TRACE_REQUESTS,
    TRACE_COLUMNS,
    TraceRequest,
    first_present,
    read_records,
    seconds_value,
    token_count,
    trace_from_records,
)

SESSION_COLUMNS = ("session_id", "session", "conversation_id")
# Think time before a turn: (column, seconds per unit).
THINK_TIME_COLUMNS = (("think_time_s", 1.0), ("delay_s", 1.0), ("delay_ms", 1e-3), ("delay", 1e-3))
MAX_THINK_TIME_S = 86_400.0  # a day: longer is a unit mistake (seconds written as ms)


class Turn(NamedTuple):
    prompt_tokens: int  # the turn's new message, without the history
    output_tokens: int
    think_time_s: float = 0.0  # before it: after the previous turn's end (or the session start)


class Conversation(NamedTuple):
    session: str
    arrival_s: float
    turns: tuple[Turn, ...]

    def requested_prompt_tokens(self) -> list[int]:
        """Each turn's prompt as sent: the history (every earlier prompt and answer at its
        requested length) and the turn's own prompt."""
        sizes, total = [], 0
        for turn in self.turns:
            total += turn.prompt_tokens
            sizes.append(total)
            total += turn.output_tokens
        return sizes


def is_conversation_records(records: Sequence[dict[str, Any]]) -> bool:
    """Whether a workload file's records are conversations rather than a trace."""
    return any("turns" in record or first_present(record, SESSION_COLUMNS) for record in records)


def load_workload(path: str | Path) -> list[TraceRequest] | list[Conversation]:
    """The requests of ``measure --workload``: a trace or conversations, as the file holds."""
    records = read_records(path)
    if is_conversation_records(records):
        return conversations_from_records(records, str(path))
    return trace_from_records(records, str(path))


def read_conversations(path: str | Path) -> list[Conversation]:
    records = read_records(path, "conversations")
    if not is_conversation_records(records):
        raise InputError("no conversations: expected turns or a session_id", path=str(path))
    return conversations_from_records(records, str(path))


def conversations_from_records(records: list[dict[str, Any]], path: str) -> list[Conversation]:
    """Conversations in order of arrival (file order among equal arrivals), arrivals relative to
    the first; one line per conversation or per turn (not both in one file)."""
    nested = ["turns" in record for record in records]
    if any(nested) and not all(nested):
        row = nested.index(not nested[0]) + 1
        raise InputError(
            "mixes one-line conversations (turns) with one turn a line", path=path, row=row
        )
    if all(nested):
        conversations = [_nested(record, path, row) for row, record in enumerate(records, 1)]
    else:
        conversations = _flat(records, path)
    sessions = [conversation.session for conversation in conversations]
    if len(set(sessions)) < len(sessions):
        repeated = next(name for name in sessions if sessions.count(name) > 1)
        raise InputError(f"session {repeated!r} is listed twice", path=path)
    if sum(len(conversation.turns) for conversation in conversations) > MAX_TRACE_REQUESTS:
        raise InputError(f"more than {MAX_TRACE_REQUESTS} turns", path=path)
    conversations.sort(key=lambda conversation: conversation.arrival_s)
    first = conversations[0].arrival_s
    return [c._replace(arrival_s=c.arrival_s - first) for c in conversations]


def _arrival(record: dict[str, Any], path: str, row: int) -> float | None:
    name = first_present(record, TRACE_COLUMNS["arrival_s"])
    if name is None:
        return None
    return seconds_value(record[name], "arrival time", path=path, row=row)


def _turn(record: dict[str, Any], path: str, row: int) -> Turn:
    counts = []
    for field in ("num_prompt_tokens", "num_output_tokens"):
        name = first_present(record, TRACE_COLUMNS[field])
        if name is None:
            raise InputError(f"missing {' or '.join(TRACE_COLUMNS[field])}", path=path, row=row)
        counts.append(token_count(record[name], field, path=path, row=row))
    think = 0.0
    for name, scale in THINK_TIME_COLUMNS:
        if record.get(name) not in (None, ""):
            think = seconds_value(record[name], name, path=path, row=row, scale=scale)
            if think > MAX_THINK_TIME_S:
                raise InputError(
                    f"{name}: a think time of {think:g} s is over a day; delay and delay_ms are "
                    "milliseconds, think_time_s and delay_s seconds",
                    path=path,
                    row=row,
                )
            break
    return Turn(counts[0], counts[1], think)


def _nested(record: dict[str, Any], path: str, row: int) -> Conversation:
    turns = record["turns"]
    if not isinstance(turns, list) or not turns:
        raise InputError("turns must be a non-empty list of turns", path=path, row=row)
    if not all(isinstance(turn, dict) for turn in turns):
        raise InputError("each turn must be an object", path=path, row=row)
    name = first_present(record, SESSION_COLUMNS)
    session = str(record[name]) if name else f"line-{row}"
    return Conversation(
        session,
        _arrival(record, path, row) or 0.0,
        tuple(_turn(turn, path, row) for turn in turns),
    )


def _flat(records: list[dict[str, Any]], path: str) -> list[Conversation]:
    """One turn a line: a session's turns are consecutive lines with its id."""
    conversations: list[Conversation] = []
    row = 1
    for session, group in itertools.groupby(
        records, key=lambda record: _session_of(record, path, records)
    ):
        lines = list(group)
        if any(conversation.session == session for conversation in conversations):
            raise InputError(
                f"the turns of session {session!r} are not consecutive lines", path=path, row=row
            )
        for offset, line in enumerate(lines[1:], 1):
            if _arrival(line, path, row + offset) is not None:
                raise InputError(
                    f"a later turn of session {session!r} has an arrival time: a session's "
                    "turns after its first follow its think times (delay)",
                    path=path,
                    row=row + offset,
                )
        turns = tuple(_turn(line, path, row + offset) for offset, line in enumerate(lines))
        conversations.append(Conversation(session, _arrival(lines[0], path, row) or 0.0, turns))
        row += len(lines)
    return conversations


def _session_of(record: dict[str, Any], path: str, records: list[dict[str, Any]]) -> str:
    name = first_present(record, SESSION_COLUMNS)
    if name is None:
        row = next(i for i, r in enumerate(records, 1) if r is record)
        raise InputError(f"missing {' or '.join(SESSION_COLUMNS)}", path=path, row=row)
    return str(record[name]).strip()
