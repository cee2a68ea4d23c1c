"""What the monitor says about shifts as they happen: the flags a new round raises (the same
detector as the service's and the report's, ``trends.changes``, over the endpoint's rounds in
the state folder), one line each, the file's ``on_flag`` command or webhook called with each,
and how many rounds a level still needs before its shifts can be flagged."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

from idealized_runtime.core.rounds import RoundPoint
from idealized_runtime.monitor.config import FlagHookSpec
from idealized_runtime.timing.transport import one_line
from idealized_runtime.trends.changes import ChangeSettings
from idealized_runtime.trends.series import STATISTICS, Change, series_changes

LABELS = {statistic.name: statistic for statistic in STATISTICS}
# The statistic whose rounds count towards a level's baseline in the countdown: every
# successful round has a TTFT (or, unstreamed, a runtime).
COUNTED = ("ttft_s", "denoised_runtime_s")


def new_flags(
    points: Sequence[RoundPoint], number: int, settings: ChangeSettings
) -> tuple[list[Change], list[Change]]:
    """Every change of an endpoint's rounds (in time order) and those flagged at round
    ``number``."""
    changes = series_changes(points, settings)
    return changes, [change for change in changes if change.round_index == number]


def rounds_before_flags(
    points: Sequence[RoundPoint], changes: Sequence[Change], settings: ChangeSettings
) -> int:
    """Rounds the current level still needs before a shift of it can be flagged (0: ready):
    ``min_baseline_rounds`` rounds with values since the level began (the start of the last
    flagged shift, else the first round)."""
    level_start = max((change.start_round_index for change in changes), default=-1)
    counted = next(
        (name for name in COUNTED if any(getattr(p, name) is not None for p in points)), None
    )
    if counted is None:
        return settings.min_baseline_rounds
    have = sum(
        1
        for point in points
        if point.round_index >= level_start and getattr(point, counted) is not None
    )
    return max(0, settings.min_baseline_rounds - have)


def _values(name: str, before: float, after: float) -> str:
    """Before -> after in one unit (milliseconds for times under a second)."""
    unit = LABELS[name].unit
    if unit == "s" and max(before, after) < 1.0:
        return f"{before * 1000:.1f} ms -> {after * 1000:.1f} ms"
    if unit == "s":
        return f"{before:.3f} s -> {after:.3f} s"
    return f"{before:.4g} {unit} -> {after:.4g} {unit}"


def flag_line(change: Change, provider: str, model: str) -> str:
    """One line per flag: provider, model, statistic, before -> after, rounds."""
    label = LABELS[change.statistic].label
    return (
        f"flag {provider}/{model}: {label} {change.direction} {change.relative:+.0%} "
        f"({_values(change.statistic, change.before, change.after)}), began round "
        f"{change.start_round_index}, flagged round {change.round_index}"
    )


def flag_payload(change: Change, provider: str, model: str, monitor: str | None) -> dict[str, Any]:
    """What the hook receives: the flag as JSON."""
    return {
        "event": "shift",
        "monitor": monitor,
        "provider": provider,
        "model": model,
        "line": flag_line(change, provider, model),
        **change.model_dump(mode="json"),
    }


def call_hook(hook: FlagHookSpec, payload: dict[str, Any]) -> list[str]:
    """Call the command and the webhook with ``payload``; what went wrong, one line each (a
    failing hook never stops the monitor)."""
    problems = []
    body = json.dumps(payload)
    if hook.command is not None:
        try:
            done = subprocess.run(
                hook.command,
                input=body,
                text=True,
                capture_output=True,
                timeout=hook.timeout_s,
                check=False,
            )
            if done.returncode != 0:
                problems.append(
                    f"on_flag command exited {done.returncode}: {one_line(done.stderr)[:200]}"
                )
        except (OSError, subprocess.TimeoutExpired) as error:
            problems.append(f"on_flag command failed: {one_line(str(error))[:200]}")
    if hook.webhook is not None:
        import httpx

        try:
            response = httpx.post(
                hook.webhook,
                content=body,
                headers={"Content-Type": "application/json"},
                timeout=hook.timeout_s,
            )
            if response.status_code >= 400:
                problems.append(f"on_flag webhook answered HTTP {response.status_code}")
        except httpx.HTTPError as error:
            problems.append(f"on_flag webhook failed: {type(error).__name__}: {error}")
    return problems
