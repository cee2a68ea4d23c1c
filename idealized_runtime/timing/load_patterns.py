"""How requests are offered to a server: a fixed number in flight, or Poisson arrivals.

Both take the jobs in order and an async ``run(job)``; cancelling the pattern cancels every
request in flight (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

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


async def run_poisson(
    jobs: Sequence[Job],
    run: Callable[[Job], Awaitable[None]],
    rate: float,
    *,
    seed: int = 0,
    max_in_flight: int = 256,
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

    try:
        next_at = loop.time()
        for job in jobs:
            next_at += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            await slots.acquire()
            tasks.append(asyncio.create_task(start(job)))
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    await _wait_all(tasks)


async def _wait_all(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for all; on cancellation or a failure cancel the rest and wait until they end."""
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
