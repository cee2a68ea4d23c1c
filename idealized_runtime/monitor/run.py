"""The monitor's rounds: each round probes every endpoint in turn (``measure`` at the probe's
shapes and load), makes the round's record (``trends.round_statistics``), keeps it in the
state folder and sends every record the store does not have yet.

Schedule: round n + 1 is due ``interval_s`` after round n began, plus a jitter drawn uniformly
from [0, ``jitter_s``] with the monitor's seed and the round's number (the same on a resumed
run); a round that runs past its successor's time is followed at once. ``once`` runs one round
(the next, or the one a killed run left unfinished), for cron and systemd timers.

A failing endpoint (unreachable, a wrong key, a refusal of every request) is a failed round of
that endpoint, a round with most requests failed a degraded one; the others are probed as
usual. Retries wait at most ``probe.retry_budget_s`` per endpoint and round. A store that cannot
be reached keeps the rounds in the state folder; they are sent, oldest first, at the next
chance.

After each round the endpoint's rounds are searched for shifts (``alerts``): each new flag is
one line and calls the file's ``on_flag`` hook; until a level has its baseline, the round's line
says how many rounds are still missing.

SIGTERM (how systemd, Docker and Kubernetes stop a service) ends the run cleanly: the requests in
flight are abandoned, the endpoint's round is recorded from those that finished (if any did;
else the next run probes it), every finished round is sent to the store, and the call returns
with ``stopped`` set.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.rounds import MAX_ERROR_CHARS, MonitorRound, RoundPoint
from idealized_runtime.monitor.alerts import (
    call_hook,
    flag_line,
    flag_payload,
    new_flags,
    rounds_before_flags,
)
from idealized_runtime.monitor.config import EndpointSpec, MonitorConfig
from idealized_runtime.monitor.reference import idealized_reference
from idealized_runtime.monitor.state import MonitorState, exclusive
from idealized_runtime.monitor.store import RoundStore, StoreRefused, StoreUnavailable
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.measure import measure
from idealized_runtime.timing.summary import read_raw_rows
from idealized_runtime.timing.transport import one_line
from idealized_runtime.trends.round_statistics import (
    IdealizedReference,
    RoundIdentity,
    round_from_rows,
)

Say = Callable[[str], None]


@dataclass
class MonitorResult:
    rounds: int = 0  # rounds run (or finished) by this call
    failed: int = 0  # endpoint rounds with no successful request
    degraded: int = 0  # endpoint rounds with most requests failed
    flags: int = 0  # shifts flagged during this call
    stored: int = 0  # records the store took during this call
    refused: list[str] = field(default_factory=list)  # "round id: why"
    waiting: int = 0  # records still to be stored at the end
    stopped: str | None = None  # why the run stopped early (SIGTERM), one line


class Terminated(Exception):
    """SIGTERM arrived while a round was probed or the next one awaited."""


class _Termination:
    """SIGTERM as ``Terminated``, raised only where the run can be cut: while it waits for the
    next round (``cuttable``) or measures (``measuring``: the measurement is cancelled, its
    finished requests are in the rows file). Elsewhere (writing a record, storing) the signal is
    noted and acted on at the next cut."""

    def __init__(self) -> None:
        self.requested = False
        self._cuttable = False
        self._installed = False

    def handle(self, signum: int, frame: object) -> None:
        self.requested = True
        if self._cuttable:
            self._cuttable = False
            raise Terminated

    @contextlib.contextmanager
    def cuttable(self) -> Iterator[None]:
        if self.requested:
            raise Terminated
        self._cuttable = True
        try:
            yield
        finally:
            self._cuttable = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The handler, while the run lasts (main thread only: signals go there)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGTERM, self.handle)
        self._installed = True
        try:
            yield
        finally:
            self._installed = False
            signal.signal(signal.SIGTERM, previous)

    def measuring(self, work: Coroutine[Any, Any, object]) -> None:
        """Run ``work`` on its own event loop; SIGTERM cancels it and raises Terminated."""
        if self.requested:
            work.close()
            raise Terminated
        asyncio.run(self._cancelled_on_term(work))

    async def _cancelled_on_term(self, work: Coroutine[Any, Any, object]) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(work)

        def on_term() -> None:
            self.requested = True
            task.cancel()

        if self._installed:
            loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            await task
        except asyncio.CancelledError:
            if self.requested:
                raise Terminated from None
            raise
        finally:
            if self._installed:
                loop.remove_signal_handler(signal.SIGTERM)
                signal.signal(signal.SIGTERM, self.handle)


def round_jitter(config: MonitorConfig, number: int) -> float:
    """The jitter after round ``number``: the same for the same seed and round."""
    if config.jitter_s <= 0:
        return 0.0
    return random.Random(f"{config.seed}:{number}").uniform(0.0, config.jitter_s)


def due_at(config: MonitorConfig, state: MonitorState, number: int) -> float:
    """When round ``number`` is due (Unix seconds): at once for the first round and for one
    already begun; else an interval (and jitter) after the previous one began."""
    if number == 0 or state.started_at(number) is not None:
        return time.time()
    previous = state.started_at(number - 1)
    if previous is None:
        return time.time()
    return previous.timestamp() + config.interval_s + round_jitter(config, number - 1)


def _measure_config(config: MonitorConfig, endpoint: EndpointSpec, number: int) -> MeasureConfig:
    probe = config.probe
    return MeasureConfig(
        base_url=endpoint.base_url,
        model=endpoint.model,
        label=endpoint.name,
        api_key_env=endpoint.api_key_env,
        endpoint=endpoint.endpoint,
        grid=[GridPoint(s.prompt_tokens, s.output_tokens) for s in probe.shapes],
        repeats=probe.repeats,
        concurrency=probe.concurrency,
        stream=probe.stream,
        tokenizer=endpoint.tokenizer,
        timeout_s=probe.timeout_s,
        max_retries=probe.max_retries,
        backoff_base_s=probe.backoff_base_s,
        backoff_max_s=probe.backoff_max_s,
        retry_budget_s=probe.retry_budget_s,
        extra_body=endpoint.extra_body,
        seed=config.seed + number,
        # Other prompts every round: a provider's prefix cache must not answer the probe.
        prompt_variant=number * probe.repeats,
    )


def measure_endpoint(
    config: MonitorConfig,
    state: MonitorState,
    endpoint: EndpointSpec,
    number: int,
    run: Callable[[Coroutine[Any, Any, object]], object] = asyncio.run,
) -> str | None:
    """Send what the endpoint's rows file of this round lacks; why no request could be sent,
    if none could (an unreachable server). ``run`` runs the measurement's coroutine."""
    state.endpoint_started_at(number, endpoint.slug)
    try:
        run(
            measure(
                _measure_config(config, endpoint, number),
                state.rows_path(number, endpoint.slug),
                handle_sigint=False,
                calibration_cache=state.calibration_path(endpoint.slug),
            )
        )
    except (InputError, OSError) as failure:
        return one_line(str(failure))
    return None


def endpoint_record(
    config: MonitorConfig,
    state: MonitorState,
    endpoint: EndpointSpec,
    number: int,
    reference: IdealizedReference | None,
    error: str | None = None,
) -> MonitorRound:
    """The endpoint's record of this round, from the requests its rows file holds."""
    rows_path = state.rows_path(number, endpoint.slug)
    rows = read_raw_rows([rows_path]) if rows_path.exists() else []
    identity = RoundIdentity(
        round_id=state.round_id(number, endpoint.slug),
        provider=endpoint.provider,
        model=endpoint.name,
        round_index=number,
        started_at=state.endpoint_started_at(number, endpoint.slug),
        finished_at=datetime.now(timezone.utc),
    )
    return round_from_rows(
        identity,
        rows,
        config.probe.shapes,
        price=endpoint.price(),
        reference=reference,
        error=error,
    )


def probe_endpoint(
    config: MonitorConfig,
    state: MonitorState,
    endpoint: EndpointSpec,
    number: int,
    reference: IdealizedReference | None,
) -> MonitorRound:
    """One endpoint's round: measure what its rows file lacks, then make the round's record."""
    error = measure_endpoint(config, state, endpoint, number)
    return endpoint_record(config, state, endpoint, number, reference, error)


def flush(state: MonitorState, store: RoundStore, result: MonitorResult, say: Say) -> None:
    """Send every finished round the store lacks, oldest first; stop at the first that cannot
    be sent now (the rest wait with it)."""
    for number, slug in state.pending():
        record = state.record(number, slug)
        try:
            store.store(record)
        except StoreUnavailable as error:
            say(f"store {store.name} unavailable ({error}); {len(state.pending())} round(s) wait")
            return
        except StoreRefused as error:
            result.refused.append(f"{record.round_id}: {error}")
            say(f"store refused round {record.round_id}: {error}")
        state.mark_stored(number, slug)
        result.stored += 1


def describe(record: MonitorRound) -> str:
    """One line per endpoint round, for the progress output."""
    head = f"round {record.round_index} {record.provider}/{record.model}: {record.status}"
    if record.status == "failed":
        return f"{head} ({record.error})"
    if record.error is not None:  # degraded, some requests failed, or cut short
        head = f"{head} ({record.error})"
    parts = [f"{record.requests - record.failed_requests}/{record.requests} ok"]
    if record.ttft_s is not None:
        parts.append(f"TTFT {record.ttft_s * 1000:.1f} ms")
    if record.itl_s is not None:
        parts.append(f"ITL {record.itl_s * 1000:.2f} ms")
    if record.output_tokens_per_s is not None:
        parts.append(f"{record.output_tokens_per_s:.1f} tok/s")
    if record.denoised_runtime_s is not None:
        ratio = f" ({record.discrepancy:.2f}x idealized)" if record.discrepancy else ""
        parts.append(f"denoised {record.denoised_runtime_s:.3f} s{ratio}")
    if record.usd is not None:
        parts.append(f"${record.usd:.6f}")
    return f"{head}, " + ", ".join(parts)


def _reference(endpoint: EndpointSpec, config: MonitorConfig) -> IdealizedReference | None:
    """The endpoint's idealized reference; its InputError names the endpoint."""
    if endpoint.reference is None:
        return None
    try:
        return idealized_reference(endpoint.reference, config.probe.shapes, endpoint.name)
    except InputError as error:
        raise InputError(
            f"endpoint {endpoint.provider}/{endpoint.name}, reference: {error}"
        ) from error


def run_monitor(
    config: MonitorConfig,
    state_dir: str | Path,
    store: RoundStore,
    *,
    once: bool = False,
    max_rounds: int | None = None,
    say: Say = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
) -> MonitorResult:
    """Run rounds until ``max_rounds`` rounds exist (None: for ever), or one with ``once``, or
    until SIGTERM. References are computed first: a model or GPU the hardware model does not
    know is an InputError before any request and before the state folder is made."""
    references = {endpoint.slug: _reference(endpoint, config) for endpoint in config.endpoints}
    termination = _Termination()
    with exclusive(state_dir), termination.installed():
        state = MonitorState(state_dir)
        monitor = _Monitor(config, state, store, references, say, termination)
        return monitor.run(once, max_rounds, sleep)


class _Monitor:
    """One run over a state folder: the rounds, what they flag, what the store gets."""

    def __init__(
        self,
        config: MonitorConfig,
        state: MonitorState,
        store: RoundStore,
        references: dict[str, IdealizedReference | None],
        say: Say,
        termination: _Termination,
    ) -> None:
        self.config, self.state, self.store = config, state, store
        self.references, self.say, self.termination = references, say, termination
        self.result = MonitorResult()
        self.settings = config.changes.settings()
        # Each endpoint's rounds so far (the detector reads them whole after every round).
        self.points: dict[str, list[RoundPoint]] = {
            endpoint.slug: [
                state.record(number, endpoint.slug).point()
                for number in state.rounds()
                if state.has_record(number, endpoint.slug)
            ]
            for endpoint in config.endpoints
        }

    def run(
        self, once: bool, max_rounds: int | None, sleep: Callable[[float], None]
    ) -> MonitorResult:
        slugs = [endpoint.slug for endpoint in self.config.endpoints]
        state, result = self.state, self.result
        flush(state, self.store, result, self.say)
        try:
            while True:
                number = state.next_round(slugs)
                if max_rounds is not None and number >= max_rounds:
                    break
                wait = due_at(self.config, state, number) - time.time()
                if wait > 0 and not once:
                    with self.termination.cuttable():
                        sleep(wait)
                state.start_round(number)
                for endpoint in self.config.endpoints:
                    if not state.has_record(number, endpoint.slug):
                        self.probe(endpoint, number)
                result.rounds += 1
                flush(state, self.store, result, self.say)
                if once:
                    break
        except Terminated:
            flush(state, self.store, result, self.say)
            if result.stopped is None:
                result.stopped = "stopped by SIGTERM between rounds"
            self.say(result.stopped)
        result.waiting = len(state.pending())
        return result

    def probe(self, endpoint: EndpointSpec, number: int) -> None:
        """Probe one endpoint in round ``number``, record the round and say what it flags. On
        SIGTERM the round is recorded from the requests that finished, then Terminated goes on."""
        reference = self.references[endpoint.slug]
        try:
            error = measure_endpoint(
                self.config, self.state, endpoint, number, self.termination.measuring
            )
        except Terminated:
            record = endpoint_record(self.config, self.state, endpoint, number, reference)
            if record.requests:
                planned = len(self.config.probe.shapes) * self.config.probe.repeats
                cut = f"stopped by SIGTERM after {record.requests} of {planned} requests"
                error = cut if record.error is None else f"{cut}; {record.error}"
                record = record.model_copy(update={"error": error[:MAX_ERROR_CHARS]})
                self.keep(endpoint, number, record)
            self.result.stopped = (
                f"stopped by SIGTERM in round {number} ({endpoint.provider}/{endpoint.name}: "
                + (
                    f"recorded from the {record.requests} request(s) that finished)"
                    if record.requests
                    else "no request had finished; the next run probes it)"
                )
            )
            raise
        record = endpoint_record(self.config, self.state, endpoint, number, reference, error)
        self.keep(endpoint, number, record)

    def keep(self, endpoint: EndpointSpec, number: int, record: MonitorRound) -> None:
        """Write the record, say it and the flags it raises, call the hook for each flag."""
        self.state.write_record(number, endpoint.slug, record)
        self.result.failed += record.status == "failed"
        self.result.degraded += record.status == "degraded"
        points = self.points[endpoint.slug]
        points.append(record.point())
        changes, flagged = new_flags(points, number, self.settings)
        line = describe(record)
        remaining = rounds_before_flags(points, changes, self.settings)
        if remaining and record.status != "failed":
            line += f"; {remaining} more round(s) before shifts can be flagged"
        self.say(line)
        for change in flagged:
            self.result.flags += 1
            self.say(flag_line(change, endpoint.provider, endpoint.name))
            if self.config.on_flag is not None:
                payload = flag_payload(change, endpoint.provider, endpoint.name, self.config.name)
                for problem in call_hook(self.config.on_flag, payload):
                    self.say(problem)
