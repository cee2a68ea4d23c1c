"""The row every reader of another tool's results produces (the columns of our own raw rows), and
the conversions the readers share: numbers, counts, seconds from any unit, TPOT, error text,
load labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

UNKNOWN_FORMAT = (
    "not a known result file: expected guidellm's JSON report, aiperf's profile_export.jsonl, "
    "genai-perf's profile_export.json, `vllm bench serve --save-result --save-detailed` JSON "
    "or llmperf's *_individual_responses.json"
)

COLUMNS = (
    "model",
    "num_prompt_tokens",
    "num_output_tokens",
    "runtime_s",
    "ttft_s",
    "itl_s",
    "tpot_s",
    "load",
    "source",
    "ok",
    "error",
    "request_id",
    "run_id",
    "started_at_s",
    "finished_at_s",
    "inter_token_latencies_s",
)
LIST_COLUMNS = ("inter_token_latencies_s",)
# Seconds per unit, for aiperf's {value, unit} metrics.
UNITS = {"s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


# --- small helpers -------------------------------------------------------------------------------


def to_number(value: Any) -> float | None:
    """A finite number, or None (missing, text, NaN, a boolean)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def token_count(value: Any) -> int | None:
    number = to_number(value)
    return None if number is None or number < 0 else round(number)


def seconds(value: Any, scale: float) -> float | None:
    number = to_number(value)
    return None if number is None else number * scale


def mean_of(values: Iterable[Any]) -> float | None:
    numbers = [n for n in map(to_number, values) if n is not None]
    return sum(numbers) / len(numbers) if numbers else None


def tpot(runtime: float | None, ttft: float | None, output: int | None) -> float | None:
    if runtime is None or ttft is None or output is None or output < 2:
        return None
    return max(0.0, runtime - ttft) / (output - 1)


def one_line_error(error: Any, limit: int = 300) -> str:
    """An error as one line of at most ``limit`` characters (tools log tracebacks, URLs)."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_label(kind: str, value: Any) -> str | None:
    number = to_number(value)
    if number is None:
        return None
    if kind == "concurrency":
        return f"concurrency={round(number)}"
    return f"rate={number}"


def request_row(
    *,
    model: str | None,
    prompt: int | None,
    output: int | None,
    runtime: float | None,
    ttft: float | None,
    itl: float | None,
    load: str | None,
    source: str,
    error: str | None,
    request_id: Any = None,
    run_id: str,
    started: float | None = None,
    finished: float | None = None,
    gaps: list[float] | None = None,
) -> dict[str, Any]:
    ok = error is None and runtime is not None and runtime > 0
    if error is None and not ok:
        error = "no end-to-end time recorded"
    return {
        "model": model,
        "num_prompt_tokens": prompt,
        "num_output_tokens": output if output is not None else (None if ok else 0),
        "runtime_s": runtime if ok else None,
        "ttft_s": ttft if ok else None,
        "itl_s": itl if ok else None,
        "tpot_s": tpot(runtime, ttft, output) if ok else None,
        "load": load,
        "source": source,
        "ok": ok,
        "error": None if ok else one_line_error(error),
        "request_id": None if request_id is None else str(request_id),
        "run_id": run_id,
        "started_at_s": started,
        "finished_at_s": finished,
        "inter_token_latencies_s": gaps if ok and gaps else None,
    }


class JsonLines(list):  # type: ignore[type-arg]
    """The objects of a JSON Lines file (a list that remembers it was one)."""


def is_aiperf_record(item: Any) -> bool:
    return isinstance(item, Mapping) and "metadata" in item and "metrics" in item


def format_hint(document: Any) -> str:
    """Why a known tool's file is not the per-request one."""
    if isinstance(document, Mapping):
        if "input_config" in document and "request_latency" in document:
            return (
                "this is aiperf's summary (profile_export_aiperf.json): import the per-request "
                "profile_export.jsonl beside it"
            )
        if "request_throughput" in document and "model_id" in document:
            return (
                "this vllm bench serve result has no per-request details: run it with "
                "--save-result --save-detailed"
            )
        if "results" in document and "num_concurrent_requests" in document:
            return "this is llmperf's summary: import the *_individual_responses.json beside it"
    return UNKNOWN_FORMAT
