"""Workloads for the simulator: request shapes, Poisson arrivals, traces, think times.

Open-loop arrival times (Poisson at a rate, or a trace's timestamps: CSV, JSON or JSONL), or
closed-loop clients (each sends its next request ``think_time_s`` after the previous one ends).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError

# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestShape:
    num_prompt_tokens: int
    num_output_tokens: int
    arrival_s: float | None = None  # None: closed loop (sent when a client is free)
    # Prompt tokens whose KV is already in the cache when the request arrives (a prefix-cache
    # hit, or a prompt prefilled on another instance): the server reads only the rest.
    cached_tokens: int = 0


def poisson_arrivals(rate: float, count: int, seed: int) -> np.ndarray:
    """``count`` arrival times of a Poisson process at ``rate`` per second."""
    if not (math.isfinite(rate) and rate > 0):
        raise InputError(f"--rate must be a positive number of requests per second, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    return np.cumsum(gaps) - gaps[0]  # the first request at t = 0


TRACE_ALIASES = {
    "arrival_s": ("arrival_s", "timestamp", "timestamp_s", "arrival_time"),
    "num_prompt_tokens": ("num_prompt_tokens", "prompt_tokens", "input_length", "input_tokens"),
    "num_output_tokens": ("num_output_tokens", "output_tokens", "output_length", "max_tokens"),
}


def read_workload(path: str | Path) -> list[RequestShape]:
    """A request trace: CSV, JSON (a list) or JSONL of rows with arrival_s (or timestamp),
    num_prompt_tokens and num_output_tokens. Arrivals are relative to the first one."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read workload {path}: {error.strerror or error}") from None
    rows: list[Any]
    try:
        if path.suffix.lower() == ".csv":
            rows = list(csv.DictReader(text.splitlines()))
        elif path.suffix.lower() == ".json":
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise InputError(f"workload {path}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(rows, list) or not rows:
        raise InputError(f"workload {path}: no requests")
    shapes = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise InputError(f"workload {path}, request {number}: not an object")
        values = {}
        for key, aliases in TRACE_ALIASES.items():
            raw = next((row[a] for a in aliases if row.get(a) not in (None, "")), None)
            try:
                values[key] = float(raw) if raw is not None else None
            except (TypeError, ValueError):
                raise InputError(
                    f"workload {path}, request {number}: {key} {raw!r} is not a number"
                ) from None
        if values["arrival_s"] is None or not math.isfinite(values["arrival_s"]):
            raise InputError(f"workload {path}, request {number}: needs arrival_s (seconds)")
        for key in ("num_prompt_tokens", "num_output_tokens"):
            value = values[key]
            if value is None or value != int(value) or value < 1:
                raise InputError(
                    f"workload {path}, request {number}: {key} must be an integer >= 1"
                )
        shapes.append(
            RequestShape(
                int(values["num_prompt_tokens"]),
                int(values["num_output_tokens"]),
                values["arrival_s"],
            )
        )
    first = min(s.arrival_s for s in shapes if s.arrival_s is not None)
    shapes = [
        RequestShape(s.num_prompt_tokens, s.num_output_tokens, s.arrival_s - first) for s in shapes
    ]
    return sorted(shapes, key=lambda s: s.arrival_s)


def think_times(think_time_s: float | Sequence[float]) -> list[float]:
    """The closed loop's think times as a non-empty list; InputError unless each is a finite
    number of seconds >= 0."""
    values = [think_time_s] if isinstance(think_time_s, (int, float)) else list(think_time_s)
    if not values:
        raise InputError("--think-time needs at least one value")
    for value in values:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(f"--think-time must be >= 0 seconds, got {value}")
    return [float(value) for value in values]
