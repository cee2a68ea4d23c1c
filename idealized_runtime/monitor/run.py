"""The monitor's rounds: each round probes every endpoint in turn (``measure`` at the probe's
shapes and load), makes the round's record (``trends.round_statistics``), keeps it in the
state folder and sends every record the store does not have yet.

Schedule: round n + 1 is due ``interval_s`` after round n began, plus a jitter drawn uniformly
from [0, ``jitter_s``] with the monitor's seed and the round's number (the same on a resumed
run); a round that runs past its successor's time is followed at once. ``once`` runs one round
(the next, or the one a killed run left unfinished), for cron and systemd timers.

A failing endpoint (unreachable, a wrong key, a refusal of every request) is a failed round of
that endpoint; the others are probed as usual. A store that cannot be reached keeps the rounds
in the state folder; they are sent, oldest first, at the next chance.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.rounds import MonitorRound
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
    stored: int = 0  # records the store took during this call
    refused: list[str] = field(default_factory=list)  # "round id: why"
    waiting: int = 0  # records still to be stored at the end


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
        extra_body=endpoint.extra_body,
        seed=config.seed + number,
        # Other prompts every round: a provider's prefix cache must not answer the probe.
        prompt_variant=number * probe.repeats,
    )


def probe_endpoint(
    config: MonitorConfig,
    state: MonitorState,
    endpoint: EndpointSpec,
    number: int,
    reference: IdealizedReference | None,
) -> MonitorRound:
    """One endpoint's round: measure what its rows file lacks, then make the round's record."""
    started = state.endpoint_started_at(number, endpoint.slug)
    rows_path = state.rows_path(number, endpoint.slug)
    error = None
    try:
        asyncio.run(
            measure(
                _measure_config(config, endpoint, number),
                rows_path,
                handle_sigint=False,
                calibration_cache=state.calibration_path(endpoint.slug),
            )
        )
    except (InputError, OSError) as failure:
        error = one_line(str(failure))
    rows = read_raw_rows([rows_path]) if rows_path.exists() else []
    identity = RoundIdentity(
        round_id=state.round_id(number, endpoint.slug),
        provider=endpoint.provider,
        model=endpoint.name,
        round_index=number,
        started_at=started,
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
    """Run rounds until ``max_rounds`` rounds exist (None: for ever), or one with ``once``.
    References are computed first: a model or GPU the hardware model does not know is an
    InputError before any request and before the state folder is made."""
    references = {
        endpoint.slug: idealized_reference(endpoint.reference, config.probe.shapes, endpoint.name)
        if endpoint.reference is not None
        else None
        for endpoint in config.endpoints
    }
    with exclusive(state_dir):
        state = MonitorState(state_dir)
        return _run(config, state, store, references, once, max_rounds, say, sleep)


def _run(
    config: MonitorConfig,
    state: MonitorState,
    store: RoundStore,
    references: dict[str, IdealizedReference | None],
    once: bool,
    max_rounds: int | None,
    say: Say,
    sleep: Callable[[float], None],
) -> MonitorResult:
    slugs = [endpoint.slug for endpoint in config.endpoints]
    result = MonitorResult()
    flush(state, store, result, say)
    while True:
        number = state.next_round(slugs)
        if max_rounds is not None and number >= max_rounds:
            break
        wait = due_at(config, state, number) - time.time()
        if wait > 0 and not once:
            sleep(wait)
        state.start_round(number)
        for endpoint in config.endpoints:
            if state.has_record(number, endpoint.slug):
                continue
            record = probe_endpoint(config, state, endpoint, number, references[endpoint.slug])
            state.write_record(number, endpoint.slug, record)
            result.failed += record.status == "failed"
            say(describe(record))
        result.rounds += 1
        flush(state, store, result, say)
        if once:
            break
    result.waiting = len(state.pending())
    return result
