"""The raw JSONL rows ``measure`` writes, one per request: their contract, how a request's outcome
becomes one, and how a run resumes from the rows already in its output.

Raw JSONL row (one object per line):
    model, endpoint, num_prompt_tokens, num_output_tokens (actual: the server's usage when it
    reports one, else requested), requested_prompt_tokens, requested_output_tokens, repeat, ok,
    runtime_s (null when failed), ttft_s (streaming only), inter_token_latencies_s (streaming),
    status, error, attempts, retry_waits_s, started_at, finished_at (ISO UTC, of the last attempt),
    usage_mismatch, usage_reported, usage, server_model, system_fingerprint, response_id,
    finish_reason, stream, num_chunks, prompt_source, dropped_fields, client,
    load (the level's label: "concurrency=8", "rate=4.0", "sweep:synchronous", "sweep:rate=3.2",
    "sweep:throughput", "trace", "sessions", "sessions:concurrency=4"), started_at_s and
    finished_at_s (seconds since the level's run started, monotonic clock, retries included),
    run_id (one uninterrupted run of the level),
    reasoning_tokens (the server's usage.completion_tokens_details.reasoning_tokens, else the
    streamed chunks of reasoning text; null when unknown), ttft_answer_s (streaming: to the first
    chunk of answer text, after any reasoning; ttft_s is to the first token of either),
    cached_prompt_tokens (usage.prompt_tokens_details.cached_tokens; null when not reported),
    session, turn and think_time_s (a conversation's id, the turn's index from 0 and the wait
    before it was sent; null outside conversations).
Files written before a field existed lack it; readers take a missing field as null.
The resume key is (model, endpoint, requested_prompt_tokens, requested_output_tokens, repeat,
load); a failed row (after its retries) counts as done, so a resumed run sends only the
requests the file does not hold. A conversation's turns share its repeat (its index in the
workload) and differ by their requested prompt tokens, which grow with the history. Rows are
appended by a writer thread, one fsync per batch; a trailing partial line (a run killed while
writing) is cut off before the next append.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from idealized_runtime import __version__
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import append_line_durably, truncate_partial_line
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.summary import load_label
from idealized_runtime.timing.transport import Attempt

# (model, endpoint, requested prompt tokens, requested output tokens, repeat, load)
Key = tuple[str, str, int, int, int, str]


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z") if moment else None


@dataclass(frozen=True)
class TurnPlace:
    """Where a request sits in a conversation: its session, turn index and the think time
    waited before it was sent."""

    session: str
    turn: int
    think_time_s: float = 0.0


def _detail(usage: dict[str, Any] | None, group: str, name: str) -> int | None:
    """A count of usage's ``<group>_details`` (OpenAI's reasoning and cached tokens)."""
    details = usage.get(group) if usage else None
    value = details.get(name) if isinstance(details, dict) else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reasoning_tokens(result: Attempt, usage: dict[str, Any] | None, stream: bool) -> int | None:
    """The server's count of reasoning tokens, else the streamed reasoning chunks (most
    servers send one token a chunk); unknown for an answer with reasoning but no count."""
    counted = _detail(usage, "completion_tokens_details", "reasoning_tokens")
    if counted is not None:
        return counted
    if stream and result.num_chunks:
        return result.reasoning_chunks
    return None if result.reasoning_seen else 0


def request_row(
    config: MeasureConfig,
    point: GridPoint,
    repeat: int,
    result: Attempt,
    *,
    attempts: int,
    waits: list[float],
    started_at_s: float,
    finished_at_s: float,
    prompt_source: str,
    dropped_fields: list[str],
    run_id: str,
    place: TurnPlace | None = None,
) -> dict[str, Any]:
    """The row of one request: ``result`` is its last attempt, after ``attempts`` attempts
    with ``waits`` between them; the actual token counts are the server's usage, if any (else
    for a stream with reasoning the text chunks counted, since a reasoning model decides its
    own length)."""
    p, o = point
    usage = result.usage if isinstance(result.usage, dict) else None
    reported_p = usage.get("prompt_tokens") if usage else None
    reported_o = usage.get("completion_tokens") if usage else None
    actual_p = int(reported_p) if isinstance(reported_p, (int, float)) else p
    actual_o = int(reported_o) if isinstance(reported_o, (int, float)) else o
    if reported_o is None and result.reasoning_chunks:
        actual_o = result.reasoning_chunks + result.answer_chunks
    body = result.body
    return {
        "model": config.recorded_model,
        "endpoint": config.endpoint,
        "num_prompt_tokens": actual_p,
        "num_output_tokens": actual_o,
        "requested_prompt_tokens": p,
        "requested_output_tokens": o,
        "repeat": repeat,
        "ok": result.ok,
        "runtime_s": result.runtime_s if result.ok else None,
        "ttft_s": result.ttft_s if result.ok else None,
        "inter_token_latencies_s": result.inter_token_latencies_s if config.stream else [],
        "status": result.status,
        "error": None if result.ok else result.error,
        "attempts": attempts,
        "retry_waits_s": [round(wait, 6) for wait in waits],
        "started_at": _iso(result.started_at),
        "finished_at": _iso(result.finished_at),
        "usage_mismatch": bool(result.ok and usage and (actual_p, actual_o) != (p, o)),
        "usage_reported": usage is not None,
        "usage": usage,
        "server_model": body.get("model"),
        "system_fingerprint": body.get("system_fingerprint"),
        "response_id": body.get("id"),
        "finish_reason": result.finish_reason,
        "stream": config.stream,
        "num_chunks": result.num_chunks,
        "prompt_source": prompt_source,
        "dropped_fields": dropped_fields,
        "load": config.load,
        "started_at_s": round(started_at_s, 6),
        "finished_at_s": round(finished_at_s, 6),
        "run_id": run_id,
        "client": f"idealized-runtime {__version__}",
        "reasoning_tokens": _reasoning_tokens(result, usage, config.stream) if result.ok else None,
        "ttft_answer_s": result.ttft_answer_s if result.ok else None,
        "cached_prompt_tokens": _detail(usage, "prompt_tokens_details", "cached_tokens"),
        "session": place.session if place else None,
        "turn": place.turn if place else None,
        "think_time_s": round(place.think_time_s, 6) if place else None,
    }


def row_key(row: dict[str, Any]) -> Key | None:
    """The resume key of a row; None for a row that lacks one of its parts."""
    try:
        return (
            str(row["model"]),
            str(row.get("endpoint", "completions")),
            int(row.get("requested_prompt_tokens", row["num_prompt_tokens"])),
            int(row.get("requested_output_tokens", row["num_output_tokens"])),
            int(row["repeat"]),
            load_label(row.get("load")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def read_done_keys(path: Path) -> set[Key]:
    """Keys of the rows already in ``path``. A trailing partial line (a run killed while
    writing) is cut off so that the next append starts a fresh line."""
    keys: set[Key] = set()
    for line in truncate_partial_line(path).splitlines():
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        key = row_key(row) if isinstance(row, dict) else None
        if key is not None:
            keys.add(key)
    return keys


def prepare_output(output: Path) -> tuple[set[Key], bool]:
    """Check that ``output`` can be appended to before any request is sent (its parent folders
    are created); the keys it already holds and whether it existed."""
    if output.is_dir():
        raise InputError("is a folder; -o names the JSONL file to write", path=str(output))
    existed = output.exists()
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("a", encoding="utf-8"):
            pass
        return read_done_keys(output), existed
    except OSError as error:
        raise InputError(f"cannot write: {error.strerror or error}", path=str(output)) from None


def level_rows(output: Path, config: MeasureConfig, load: str) -> list[dict[str, Any]]:
    """The rows in ``output`` of the config's model at the load level ``load``."""
    rows = []
    for line in truncate_partial_line(output).splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if (
                isinstance(row, dict)
                and row.get("model") == config.recorded_model
                and load_label(row.get("load")) == load
            ):
                rows.append(row)
    return rows


class RowWriter:
    """Appends rows from a background thread, one fsync per batch (group commit), so the
    event loop that timestamps responses never waits on the disk."""

    _STOP = object()

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._handle = path.open("a", encoding="utf-8")
        self._queue: queue.Queue[Any] = queue.Queue()
        self.error: OSError | None = None  # a failed write (disk full): the run must stop
        self._thread = threading.Thread(target=self._loop, name="row-writer", daemon=True)
        self._thread.start()

    def write(self, row: dict[str, Any]) -> None:
        self.check()
        self._queue.put(json.dumps(row, separators=(",", ":"), allow_nan=False))

    def check(self) -> None:
        if self.error is not None:
            raise InputError(
                f"cannot write rows: {self.error.strerror or self.error}", path=str(self._path)
            )

    def _loop(self) -> None:
        while True:
            lines = [self._queue.get()]
            while True:
                try:
                    lines.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = lines[-1] is self._STOP
            lines = [line for line in lines if line is not self._STOP]
            if lines and self.error is None:
                try:
                    self._handle.write("".join(line + "\n" for line in lines[:-1]))
                    append_line_durably(self._handle, lines[-1])
                except OSError as error:
                    self.error = error
            if stop:
                return

    def close(self) -> None:
        self._queue.put(self._STOP)
        self._thread.join()
        with contextlib.suppress(OSError):  # already reported by check()
            self._handle.close()
