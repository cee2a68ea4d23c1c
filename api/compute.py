"""Bounds on expensive reads (plans, batch and hardware-model estimates, comparisons): at most
``max_concurrent_computations`` at once per server process, one more refused at once with 503
and Retry-After; and per-request bounds on a plan's work, refused in one line (422) before it
starts. The slot is taken after the body is read and validated, so a slow client holds no slot,
and on the event loop, so a refused request never waits for a worker thread: health and the
other reads keep their threads.

A plan (seconds of pure-Python CPU) runs in a worker process (``run_computation``): in the
server's own process it would hold the interpreter lock against the event loop, and health
and the catalog would wait for it. The workers run at a lower priority and are replaced after
``_TASKS_PER_WORKER`` plans, so that what a plan allocates goes back to the system."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import lru_cache
from itertools import islice
from typing import Any, TypeVar

from fastapi import HTTPException, Request, status
from starlette.concurrency import run_in_threadpool

from idealized_runtime.api import metrics
from idealized_runtime.api.memory import trim_heap
from idealized_runtime.api.settings import Settings, get_settings
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.planning.request import PlanRequest


class ComputeSlots:
    """A counter of computations running in this process, refusing beyond ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        return self._running

    def try_take(self) -> bool:
        with self._lock:
            if self._running >= self.limit:
                return False
            self._running += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._running -= 1


@lru_cache(maxsize=1)
def compute_slots() -> ComputeSlots:
    slots = ComputeSlots(get_settings().max_concurrent_computations)
    metrics.track_computations(slots)
    return slots


async def compute_slot(request: Request) -> AsyncIterator[None]:
    """A dependency holding one computation slot for the request (declare it after the body)."""
    slots, settings = compute_slots(), get_settings()
    if not slots.try_take():
        metrics.mark_refusal(request, "computations_busy")
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"this server is computing {slots.limit} requests at once, its limit "
            "(IDEALIZED_RUNTIME_MAX_CONCURRENT_COMPUTATIONS): retry after "
            f"{settings.compute_retry_after_s} s",
            headers={"Retry-After": str(settings.compute_retry_after_s)},
        )
    try:
        yield
    finally:
        slots.give_back()
        await run_in_threadpool(trim_heap)  # a plan's simulation leaves heap behind


T = TypeVar("T")
_TASKS_PER_WORKER = 50
_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _worker_started() -> None:
    with contextlib.suppress(OSError):
        os.nice(5)  # the server's own process answers first
    # End with the server, however it ends (a killed server leaves no worker behind). Not
    # PR_SET_PDEATHSIG: it fires when the thread that started the worker ends, and the pool
    # starts workers from threads that come and go.
    server = os.getppid()

    def watch() -> None:
        while os.getppid() == server:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="server-watch", daemon=True).start()


def _compute_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(
                max_workers=get_settings().max_concurrent_computations,
                # Not fork: the server's threads would be copied in an unknown state.
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_started,
                max_tasks_per_child=_TASKS_PER_WORKER,
            )
        return _pool


@atexit.register
def _drop_pool() -> None:
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


def run_computation(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a worker process (IDEALIZED_RUNTIME_COMPUTE_IN_PROCESSES, on by
    default), else in the calling thread. Called from a worker thread holding a slot."""
    if not get_settings().compute_in_processes:
        return function(*args)
    try:
        return _compute_pool().submit(function, *args).result()
    except BrokenProcessPool:  # a worker died (killed, out of memory): start afresh
        _drop_pool()
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the computation's worker process ended unexpectedly: retry",
            headers={"Retry-After": str(get_settings().compute_retry_after_s)},
        ) from None


def simulated_requests(request: PlanRequest, widest_attention_dp: int = 1) -> int:
    """The most requests a plan's verification may simulate (``search.verify``): at the most
    clients a point can have, the largest level per attention-DP rank on the widest rank count
    searched (``widest_attention_dp``), within ``max_concurrency``."""
    if not request.verify:
        return 0
    import numpy as np

    from idealized_runtime.cost_model.planning.search import (
        most_verification_requests,
        replica_levels,
    )

    top = np.array([max(request.concurrency)], dtype=np.float64)
    clients = replica_levels(top, widest_attention_dp, request.max_concurrency)[-1]
    return most_verification_requests(request, int(clients))


def check_plan_work(
    request: PlanRequest, http: Request | None = None, settings: Settings | None = None
) -> None:
    """InputError in one line when the plan would evaluate more deployments x concurrency
    levels, verify more candidates in turn, or simulate more requests for one, than the server
    allows."""
    from idealized_runtime.cost_model.hardware.engines.catalog import engine_names
    from idealized_runtime.cost_model.planning.request import IDEAL_STACK
    from idealized_runtime.cost_model.planning.space import candidates

    settings = settings or get_settings()
    levels = len(set(request.concurrency))
    # Unknown stacks are left to the plan's own one-line refusal.
    known = [*engine_names(), IDEAL_STACK]
    stacks = [s for s in dict.fromkeys(request.stacks or known) if s in known]
    most_deployments = settings.max_plan_evaluations // levels
    deployments, widest = 0, 1  # the widest: attention-DP ranks of a (decode) instance
    try:
        for candidate in islice(candidates(request, stacks), most_deployments + 1):
            deployments += 1
            widest = max(widest, candidate.deployment.attention_dp)
    except InputError:
        return  # an unknown format or the like: the plan refuses it in its own words
    if deployments > most_deployments:
        if http is not None:
            metrics.mark_refusal(http, "plan_too_large")
        raise InputError(
            f"this plan evaluates more than {settings.max_plan_evaluations} deployments x "
            "concurrency levels, the server's limit (IDEALIZED_RUNTIME_MAX_PLAN_EVALUATIONS): "
            "name fewer hardware, stacks, weights, KV-cache formats, modes or concurrency "
            "levels, or a smaller max_gpus"
        )
    if request.verify and request.verify_candidates > settings.max_verify_candidates:
        if http is not None:
            metrics.mark_refusal(http, "plan_too_large")
        raise InputError(
            f"this plan may verify {request.verify_candidates} candidates in turn, over the "
            f"server's limit of {settings.max_verify_candidates} (IDEALIZED_RUNTIME_MAX_VERIFY_"
            "CANDIDATES): lower verify_candidates, or verify: false"
        )
    simulated = simulated_requests(request, widest)
    if simulated > settings.max_simulated_requests:
        if http is not None:
            metrics.mark_refusal(http, "plan_too_large")
        raise InputError(
            f"this plan's verification may simulate {simulated} requests, over the server's "
            f"limit of {settings.max_simulated_requests} (IDEALIZED_RUNTIME_MAX_SIMULATED_"
            "REQUESTS): lower max_verify_requests, the largest concurrency or max_concurrency "
            "(an attention-DP instance's levels count per rank), or verify: false"
        )
