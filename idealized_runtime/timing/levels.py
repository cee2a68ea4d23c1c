"""Several load levels into one output file, and sweeps.

``measure_levels`` runs one config at a list of levels (concurrencies, rates), in order; each
level writes its own rows (keyed by its ``load`` label), so a killed run resumes inside the
level it was in. A level that over-saturated the server is recorded beside the output
(``raw.jsonl.levels.json``) and not offered again on resume. ``measure_sweep`` finds a sweep's
levels: one request at a time, then all at once, then Poisson rates between the two
throughputs, computed from the rows in the output so that a resumed sweep finds the same ones.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.timing.config import MeasureConfig, MeasureSummary
from idealized_runtime.timing.measure import measure
from idealized_runtime.timing.plan import planned_requests
from idealized_runtime.timing.rows import level_rows
from idealized_runtime.timing.summary import summarize_level


class LevelsSummary(BaseModel):
    output: str
    levels: list[MeasureSummary]
    skipped: list[str]  # levels not run: stopped before (state file) or after an over-saturation
    interrupted: bool


def levels_state_path(output: Path) -> Path:
    return output.with_name(output.name + ".levels.json")


def _read_stopped(output: Path) -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError, TypeError):
        data = json.loads(levels_state_path(output).read_text(encoding="utf-8"))
        stopped = data.get("stopped", {})
        if isinstance(stopped, dict):
            return {str(k): str(v) for k, v in stopped.items()}
    return {}


def _write_stopped(output: Path, stopped: dict[str, str]) -> None:
    with atomic_writer(levels_state_path(output)) as handle:
        json.dump({"stopped": stopped}, handle, indent=1)


async def measure_levels(
    config: MeasureConfig,
    levels: list[dict[str, Any]],
    output: Path,
    progress: bool = False,
    *,
    skip_after_stop: bool = False,
    _done: list[MeasureSummary] | None = None,
) -> LevelsSummary:
    """Run ``config`` at each level (a dict of MeasureConfig fields, e.g. {"concurrency": 8} or
    {"rate": 4.0}) into one file, in order. A level that over-saturated the server is recorded
    beside the output (``.levels.json``) and not offered again on resume; with
    ``skip_after_stop`` the levels after it are skipped too (higher rates of a sweep)."""
    output = Path(output)
    summaries = list(_done or [])
    skipped: list[str] = []
    stopped = _read_stopped(output)
    for index, update in enumerate(levels):
        level = config.model_copy(update=update)
        if level.load in stopped:
            skipped.append(level.load)
            if skip_after_stop:
                skipped.extend(config.model_copy(update=u).load for u in levels[index + 1 :])
                break
            continue
        summary = await measure(level, output, progress)
        summaries.append(summary)
        if summary.interrupted:
            return LevelsSummary(
                output=str(output), levels=summaries, skipped=skipped, interrupted=True
            )
        if summary.stopped:
            stopped[level.load] = summary.stopped
            _write_stopped(output, stopped)
            if skip_after_stop:
                skipped.extend(config.model_copy(update=u).load for u in levels[index + 1 :])
                break
    return LevelsSummary(output=str(output), levels=summaries, skipped=skipped, interrupted=False)


SWEEP_SYNCHRONOUS, SWEEP_THROUGHPUT = "sweep:synchronous", "sweep:throughput"


def sweep_rates(synchronous_rps: float, throughput_rps: float, count: int) -> list[float]:
    """``count`` rates evenly spaced strictly between the synchronous and the saturated
    throughput (requests per second), rounded to 4 significant digits."""
    low, high = sorted((synchronous_rps, throughput_rps))
    step = (high - low) / (count + 1)
    return [float(f"{low + step * (i + 1):.4g}") for i in range(count)]


async def measure_sweep(
    config: MeasureConfig, count: int, output: Path, progress: bool = False
) -> LevelsSummary:
    """A sweep: the grid one request at a time (``sweep:synchronous``), then all at once (up to
    ``max_in_flight``: ``sweep:throughput``), then Poisson arrivals at ``count`` rates evenly
    between the two throughputs (``sweep:rate=R``), lowest first. A rate level stops early when
    more than 3 x (saturated throughput x unloaded mean latency) requests are open (the queue
    grows) or most requests fail; the higher rates are then skipped. The rates come from the
    rows in ``output``, so a resumed sweep finds the same levels."""
    if count < 1:
        raise InputError("--sweep needs at least 1 rate between the two bounds")
    output = Path(output)
    jobs = planned_requests(config)
    bounds = [
        {"concurrency": 1, "rate": None, "level_label": SWEEP_SYNCHRONOUS},
        {
            "concurrency": max(1, min(config.max_in_flight, jobs)),
            "rate": None,
            "level_label": SWEEP_THROUGHPUT,
        },
    ]
    first = await measure_levels(config, bounds, output, progress)
    if first.interrupted:
        return first
    rates: list[float] = []
    summaries = {}
    for label in (SWEEP_SYNCHRONOUS, SWEEP_THROUGHPUT):
        summaries[label] = summarize_level(
            config.recorded_model, label, level_rows(output, config, label)
        )
    low = summaries[SWEEP_SYNCHRONOUS].requests_per_s
    high = summaries[SWEEP_THROUGHPUT].requests_per_s
    if low <= 0 or high <= 0:
        raise InputError("the sweep's bounds completed no request; see the rows' errors")
    rates = sweep_rates(low, high, count)
    # Little's law: serving the saturated throughput at the unloaded latency needs about
    # high x (synchronous mean latency) requests open; three times that means a growing queue.
    unloaded = summaries[SWEEP_SYNCHRONOUS].e2e_s.mean or 0.0
    in_flight = max(4, math.ceil(3 * high * unloaded))
    levels = [
        {
            "rate": rate,
            "level_label": f"sweep:rate={rate}",
            "stop_in_flight": config.stop_in_flight or in_flight,
        }
        for rate in rates
    ]
    return await measure_levels(
        config, levels, output, progress, skip_after_stop=True, _done=first.levels
    )
