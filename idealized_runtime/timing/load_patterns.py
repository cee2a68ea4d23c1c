"""How requests are offered to a server: a fixed number in flight, Poisson arrivals, or the
arrival times of a recorded trace.

Each takes the jobs in order and an async ``run(job)``; cancelling the pattern cancels every
request in flight (Ctrl-C). The open-loop patterns take ``should_stop()``, asked before each
arrival: a level that over-saturates the server stops offering new requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime
import json
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import read_text_file
from idealized_runtime.core.types import MAX_TOKENS

Job = TypeVar("Job")


async def run_with_concurrency(
    jobs: Sequence[Job], run: Callable[[Job], Awaitable[None]], concurrency: int
) -> None:
    """``concurrency`` workers, each taking the next job as soon as its last one finishes."""
    pending = iter(jobs)

    async def worker() -> None:
        # A shared iterator is safe: next() runs between awaits, on one thread.
        for job in pending:
            await run(job)

    workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(jobs))))]
    await _wait_all(workers)


@contextlib.asynccontextmanager
async def _cancelled_together(tasks: list[asyncio.Task[None]]) -> AsyncIterator[None]:
    """While jobs are being started: if the starter is cancelled, cancel every job started so
    far and wait for them, so that no request outlives its level."""
    try:
        yield
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_poisson(
    jobs: Sequence[Job],
    run: Callable[[Job], Awaitable[None]],
    rate: float,
    *,
    seed: int = 0,
    max_in_flight: int = 256,
    should_stop: Callable[[], bool] | None = None,
) -> None:
    """Start jobs at exponentially distributed gaps (mean 1/rate s), an open-loop load like
    independent users; ``max_in_flight`` bounds the requests open at once if the server falls
    behind (the arrivals then slip, which the rows' timestamps show)."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(max_in_flight)
    tasks: list[asyncio.Task[None]] = []

    async def start(job: Job) -> None:
        try:
            await run(job)
        finally:
            slots.release()

    async with _cancelled_together(tasks):
        next_at = loop.time()
        for job in jobs:
            next_at += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if should_stop is not None and should_stop():
                break
            await slots.acquire()
            tasks.append(asyncio.create_task(start(job)))
    await _wait_all(tasks)


async def run_at_arrivals(
    jobs: Sequence[Job],
    arrivals_s: Sequence[float],
    run: Callable[[Job], Awaitable[None]],
    *,
    should_stop: Callable[[], bool] | None = None,
    zero_at_wall_s: float | None = None,
) -> None:
    """Start each job at its arrival time: seconds counted from the earliest one given, or,
    with ``zero_at_wall_s``, from that wall-clock time (``time.time()``), so that clients in
    other processes can replay one schedule together; arrivals already past go out at once."""
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    if zero_at_wall_s is None:
        origin = loop.time() - (min(arrivals_s) if arrivals_s else 0.0)
    else:  # the event loop's clock is monotonic: place the wall-clock time on it once
        origin = loop.time() + (zero_at_wall_s - time.time())
    async with _cancelled_together(tasks):
        for job, arrival in sorted(zip(jobs, arrivals_s, strict=True), key=lambda pair: pair[1]):
            await asyncio.sleep(max(0.0, origin + arrival - loop.time()))
            if should_stop is not None and should_stop():
                break
            tasks.append(asyncio.create_task(run(job)))
    await _wait_all(tasks)


class TraceRequest(NamedTuple):
    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int


# Column names accepted for a trace's fields (ours first, then common spellings).
TRACE_COLUMNS = {
    "arrival_s": ("arrival_s", "arrival_time", "timestamp"),
    "num_prompt_tokens": ("num_prompt_tokens", "prompt_tokens", "input_length"),
    "num_output_tokens": ("num_output_tokens", "output_tokens", "output_length"),
}
MAX_TRACE_REQUESTS = 1_000_000


def read_records(path: str | Path, what: str = "workload") -> list[dict[str, Any]]:
    """The records of a workload file: CSV with a header, or JSON objects one a line (a
    ``.jsonl``, ``.json`` or ``.ndjson`` file). InputError naming the file (and line)."""
    path = Path(path)
    text = read_text_file(path, what)
    records: list[dict[str, Any]] = []
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                raise InputError("not a JSON object", path=str(path), row=number)
            records.append(record)
    else:
        try:
            reader = csv.DictReader(text.splitlines())
            records = [{(k or "").strip(): v for k, v in row.items()} for row in reader]
        except csv.Error as error:
            raise InputError(f"malformed CSV ({error})", path=str(path)) from None
    if not records:
        raise InputError(f"the {what} has no requests", path=str(path))
    if len(records) > MAX_TRACE_REQUESTS:
        raise InputError(f"more than {MAX_TRACE_REQUESTS} requests", path=str(path))
    return records


def read_workload(path: str | Path) -> list[TraceRequest]:
    """A request trace: CSV with a header, or JSONL objects, with an arrival time (seconds) and
    prompt and output lengths per request (see TRACE_COLUMNS). Sorted by arrival; arrival times
    are relative to the first one."""
    return trace_from_records(read_records(path), str(path))


def trace_from_records(records: list[dict[str, Any]], path: str) -> list[TraceRequest]:
    """A trace's requests from its file's records, sorted and relative to the first arrival."""
    requests = [_trace_request(record, path, row) for row, record in enumerate(records, 1)]
    requests.sort(key=lambda request: request.arrival_s)
    first = requests[0].arrival_s
    return [request._replace(arrival_s=request.arrival_s - first) for request in requests]


def first_present(record: dict[str, Any], names: Sequence[str]) -> str | None:
    """The first of ``names`` that ``record`` has a value for."""
    return next((name for name in names if record.get(name) not in (None, "")), None)


def seconds_value(value: Any, what: str, *, path: str, row: int, scale: float = 1.0) -> float:
    """A non-negative finite number of seconds (``scale``: seconds per unit of ``value``)."""
    try:
        number = float(value) * scale
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise InputError(
            f"{what} must be a non-negative number of seconds, got {value!r}", path=path, row=row
        )
    return number


def token_count(value: Any, field: str, *, path: str, row: int) -> int:
    """A token count from 1 to MAX_TOKENS (an integral float or numeric text is accepted)."""
    shown = value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise InputError(
            f"{field} must be an integer from 1 to {MAX_TOKENS}, got {shown!r}", path=path, row=row
        )
    return value


def _trace_request(record: dict[str, Any], path: str, row: int) -> TraceRequest:
    values: dict[str, Any] = {}
    for field, names in TRACE_COLUMNS.items():
        name = first_present(record, names)
        if name is None:
            raise InputError(f"missing {' or '.join(names)}", path=path, row=row)
        values[field] = record[name]
    arrival = seconds_value(values["arrival_s"], "arrival time", path=path, row=row)
    return TraceRequest(
        arrival,
        token_count(values["num_prompt_tokens"], "num_prompt_tokens", path=path, row=row),
        token_count(values["num_output_tokens"], "num_output_tokens", path=path, row=row),
    )


def parse_start_time(text: str) -> float:
    """A wall-clock time as Unix seconds: Unix seconds themselves ("1795480000.5") or an ISO 8601
    time with its zone ("2026-11-24T00:30:00Z", "2026-11-24T01:30:00+01:00")."""
    try:
        seconds = float(text)
    except ValueError:
        return _iso_time(text)
    if not math.isfinite(seconds) or seconds < 0:
        raise InputError(f"--start-at must be a time after 1970, got {text!r}")
    return seconds


def _iso_time(text: str) -> float:
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(
            f"--start-at must be Unix seconds or an ISO 8601 time, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        raise InputError(f"--start-at {text!r}: give the time zone (e.g. 2026-11-24T00:30Z)")
    return moment.timestamp()


async def _wait_all(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for all; on cancellation or a failure cancel the rest and wait until they end."""
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
