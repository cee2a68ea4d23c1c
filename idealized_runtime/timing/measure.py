"""Time a black-box OpenAI-compatible API over a grid of prompt and output sizes, at one load
level: ``measure(config, output)`` sends every (grid point, repeat) request that ``output`` does
not hold yet and appends one row per finished request (``timing.rows``), so a killed run
resumes where it stopped by running it again. The rows feed the denoised fit.

The run, in order: the API key and the output are checked before any request; the plan
(``timing.plan``) leaves out what the output holds; prompts are calibrated or read from their
cache (``timing.prompts``); the requests go out at the level's pattern (``timing.load_patterns``)
through the transport (``timing.transport``) and their rows are written as they finish. An
open-loop level stops offering requests when the server is over-saturated. Ctrl-C cancels the
requests in flight and returns with ``interrupted=True``. Several levels into one file, and
sweeps: ``timing.levels``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.config import MeasureConfig, MeasureSummary
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.load_patterns import (
    run_at_arrivals,
    run_poisson,
    run_with_concurrency,
)
from idealized_runtime.timing.plan import (
    Job,
    SessionJob,
    plan_jobs,
    plan_sessions,
    planned_requests,
    trace_zero,
)
from idealized_runtime.timing.progress import ProgressBar
from idealized_runtime.timing.prompts import PromptBuilder, calibration_cache_path, prepare_prompts
from idealized_runtime.timing.rows import RowWriter, TurnPlace, prepare_output, request_row
from idealized_runtime.timing.transport import (
    Attempt,
    ConnectionPool,
    EndpointClient,
    api_key_from_env,
    request_headers,
)


@dataclass
class _Tally:
    """Requests of this run: started, finished (written), ok, failed, usage mismatches."""

    started: int = 0
    written: int = 0
    ok: int = 0
    failed: int = 0
    usage_mismatches: int = 0

    def note_sent(self) -> None:
        self.started += 1

    def over_saturation(self, config: MeasureConfig) -> str | None:
        """Why an open-loop level must stop offering requests, or None: more than
        ``stop_in_flight`` open at once (a growing queue), or too many of those finished
        failed."""
        finished = self.written
        in_flight = self.started - finished
        if config.stop_in_flight is not None and in_flight > config.stop_in_flight:
            return f"{in_flight} requests in flight (limit {config.stop_in_flight})"
        if finished >= config.stop_min_finished and self.failed > config.stop_error_rate * finished:
            return f"{self.failed} of {finished} requests failed"
        return None


async def _measure_request(
    client: EndpointClient,
    builder: PromptBuilder,
    point: GridPoint,
    repeat: int,
    text: str,
    origin: float,
    run_id: str,
    *,
    history: Sequence[tuple[str, str]] = (),
    place: TurnPlace | None = None,
) -> tuple[dict[str, Any], Attempt]:
    """Send one request (with its retries) and make its row; ``origin`` is the perf_counter at
    the start of this run of the level."""
    config = client.config
    started_at_s = time.perf_counter() - origin
    result, attempts, waits = await client.request(
        client.payload(text, point[1], stream=config.stream, fixed=True, history=history)
    )
    finished_at_s = time.perf_counter() - origin
    row = request_row(
        config,
        point,
        repeat,
        result,
        attempts=attempts,
        waits=waits,
        started_at_s=started_at_s,
        finished_at_s=finished_at_s,
        prompt_source=builder.recipe.source,
        dropped_fields=sorted(client.dropped),
        run_id=run_id,
        place=place,
    )
    return row, result


async def _measure_job(
    client: EndpointClient, builder: PromptBuilder, job: Job, origin: float, run_id: str
) -> dict[str, Any]:
    p, _ = job.point
    text = builder.text(p, job.repeat + client.config.prompt_variant)
    row, _ = await _measure_request(client, builder, job.point, job.repeat, text, origin, run_id)
    return row


# Prompt variants of a conversation's messages: its index and the turn (distinct texts per
# session, so that one session's history is not a cache hit of another's).
_TURN_VARIANTS = 4096


async def _measure_session(
    client: EndpointClient,
    builder: PromptBuilder,
    job: SessionJob,
    origin: float,
    run_id: str,
    record: Callable[[dict[str, Any]], None],
    sending: Callable[[], None],
) -> None:
    """Hold one conversation: its turns in order, each after its think time and resending the
    history (the earlier prompts and answers). A turn sent by an earlier run, or one that
    failed, stands in the history with filler text of its requested output length (answers
    are not stored); a resumed conversation sends its first missing turn at once."""
    conversation = job.conversation
    history: list[tuple[str, str]] = []
    sent = False
    sizes = conversation.requested_prompt_tokens()
    for turn, (spec, size) in enumerate(zip(conversation.turns, sizes, strict=True)):
        variant = job.index * _TURN_VARIANTS + turn
        if turn == 0:
            user = builder.text(spec.prompt_tokens, variant)
        else:
            user = builder.piece(spec.prompt_tokens, variant)
        if turn in job.done_turns:
            history.append((user, builder.piece(spec.output_tokens, -1 - variant)))
            continue
        wait = spec.think_time_s if (sent or turn == 0) else 0.0
        if wait > 0:
            await asyncio.sleep(wait)
        sending()
        row, result = await _measure_request(
            client, builder, GridPoint(size, spec.output_tokens), job.index, user, origin,
            run_id, history=history, place=TurnPlace(conversation.session, turn, wait),
        )  # fmt: skip
        record(row)
        sent = True
        answer = "".join(result.answer_text)
        if not result.ok:
            answer = builder.piece(spec.output_tokens, -1 - variant)
        history.append((user, answer))


async def measure(
    config: MeasureConfig,
    output: Path,
    progress: bool = False,
    *,
    handle_sigint: bool = True,
    calibration_cache: Path | None = None,
) -> MeasureSummary:
    """Measure every (grid point, repeat), trace request or conversation turn not yet in
    ``output``; Ctrl-C (SIGINT) cancels the requests in flight and returns with
    ``interrupted=True`` (rows written so far are kept). The prompt calibration is cached in
    ``calibration_cache`` (default: beside the output; runs into many outputs share one)."""
    output = Path(output)
    started = time.perf_counter()
    api_key = api_key_from_env(config)
    done, existed = prepare_output(output)
    sessions = config.conversations is not None
    jobs: Sequence[Job | SessionJob]
    jobs, already_done = plan_sessions(config, done) if sessions else plan_jobs(config, done)
    to_send = sum(job.turns_to_send if isinstance(job, SessionJob) else 1 for job in jobs)
    open_loop = config.rate is not None or config.workload is not None
    open_loop = open_loop or (sessions and config.sessions_in_flight is None)
    # An open loop (a rate, a trace, conversations at their arrivals) sends at its arrival
    # times, whatever is still in flight.
    limit = config.max_in_flight if open_loop else config.concurrency
    if sessions and config.sessions_in_flight is not None:
        limit = config.sessions_in_flight
    pool = ConnectionPool(limit, request_headers(api_key), config.timeout_s)
    tally = _Tally()
    client = EndpointClient(config, pool, api_key)
    builder: PromptBuilder | None = None
    interrupted = False
    writer: RowWriter | None = None
    stopped: list[str] = []

    def over_saturated() -> bool:
        reason = tally.over_saturation(config)
        if reason is not None:
            stopped.append(reason)
        return bool(stopped)

    async def work() -> None:
        nonlocal writer, builder
        if not jobs:
            return
        cache = calibration_cache or calibration_cache_path(output)
        try:
            builder = await prepare_prompts(config, client.probe, cache)
        except OSError as error:  # the cache beside the output cannot be written
            raise InputError(f"cannot write: {error.strerror or error}", path=str(cache)) from None
        writer = RowWriter(output)
        origin, run_id = time.perf_counter(), uuid.uuid4().hex[:12]
        with ProgressBar(progress, to_send) as bar:

            def record(row: dict[str, Any]) -> None:
                assert writer is not None
                writer.write(row)
                tally.written += 1
                if row["ok"]:
                    tally.ok += 1
                else:
                    tally.failed += 1
                tally.usage_mismatches += row["usage_mismatch"]
                bar.advance(tally.failed)

            async def run(job: Job | SessionJob) -> None:
                assert builder is not None
                if isinstance(job, SessionJob):
                    await _measure_session(
                        client, builder, job, origin, run_id, record, tally.note_sent
                    )
                    return
                tally.note_sent()
                record(await _measure_job(client, builder, job, origin, run_id))

            stop = over_saturated if open_loop else None
            if sessions and config.sessions_in_flight is not None:
                await run_with_concurrency(jobs, run, config.sessions_in_flight)
            elif sessions:
                await run_at_arrivals(jobs, [job.arrival_s for job in jobs], run, should_stop=stop)
            elif config.workload is not None:
                await run_at_arrivals(
                    jobs, [job.arrival_s for job in jobs], run, should_stop=stop,
                    zero_at_wall_s=trace_zero(config),
                )  # fmt: skip
            elif config.rate is not None:
                await run_poisson(
                    jobs,
                    run,
                    config.rate,
                    seed=config.seed,
                    max_in_flight=config.max_in_flight,
                    should_stop=stop,
                )
            else:
                await run_with_concurrency(jobs, run, config.concurrency)

    task = asyncio.ensure_future(work())
    loop = asyncio.get_running_loop()
    sigint_installed = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    if handle_sigint and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            sigint_installed = True
    try:
        await task
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        if sigint_installed:
            loop.remove_signal_handler(signal.SIGINT)
        if writer is not None:
            writer.close()
        await pool.aclose()
        if not existed and tally.written == 0:
            # Nothing measured (bad input, an unreachable server): leave no empty file behind.
            with contextlib.suppress(OSError):
                if output.stat().st_size == 0:
                    output.unlink()
    if writer is not None:
        writer.check()
    recipe = builder.recipe if builder else None
    return MeasureSummary(
        output=str(output),
        planned=planned_requests(config),
        already_done=already_done,
        written=tally.written,
        ok=tally.ok,
        failed=tally.failed,
        usage_mismatches=tally.usage_mismatches,
        interrupted=interrupted,
        elapsed_s=time.perf_counter() - started,
        dropped_fields=sorted(client.dropped),
        prompt_source=recipe.source if recipe else "none",
        prompt_offset=recipe.offset if recipe else 0,
        load=config.load,
        stopped=stopped[0] if stopped else None,
    )


def run_measure(config: MeasureConfig, output: Path, progress: bool = False) -> MeasureSummary:
    """Synchronous ``measure`` (its own event loop)."""
    return asyncio.run(measure(config, output, progress))
