"""Summaries of serving under load: per model and load level, throughput, latency percentiles,
error rate and goodput (requests per second that meet a latency SLO).

Input: request rows as ``measure`` writes them (a pandas DataFrame or a list of dicts), or rows
of the same shape from any other source (a simulator). Keys read, per row:

    model, load (a label such as "concurrency=8", "rate=4.0", "sweep:rate=3.2", "trace"),
    ok, runtime_s (end-to-end seconds, null when failed), ttft_s (null when not streamed),
    inter_token_latencies_s (list), num_output_tokens, started_at_s (seconds since the level's
    start, monotonic clock), finished_at_s (same clock; used for failed rows), run_id (optional:
    rows of one uninterrupted run of the level; a resumed level adds a second run).

Optional keys: ``ttft_answer_s`` (time to the first answer token of a reasoning model; rows
without the key, written before it existed or by other tools, take their TTFT), the token counts
``num_prompt_tokens``, ``cached_prompt_tokens`` and ``reasoning_tokens`` (means over successful
requests), and ``turn`` (multi-turn levels are also summarized per turn index).

Rows without ``started_at_s`` fall back to the ISO ``started_at``/``finished_at`` timestamps.
The level's duration is, summed over its runs, the span from the first request's start to the
last request's end; ``requests_per_s`` and ``output_tokens_per_s`` count successful requests
over it. ``requests`` counts all rows; ``error_rate`` is failed/requests. TPOT per request is
(e2e - TTFT) / (output tokens - 1); ITL pools every inter-token gap of the level. Goodput counts
successful requests meeting every target of the SLO (all successful requests when no SLO); a
request without a TTFT fails a TTFT target, one with a single output token meets any TPOT one.
With a price table, each level's successful requests are priced (``LoadCost``): dollars per
request, per million tokens and per million output tokens, beside the idealized dollars of the
same requests where an ``IdealizedCosts`` function knows the model's architecture.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.json_members import RepeatedKey, unique_members
from idealized_runtime.core.prices import (
    TOKENS_PER_PRICE_UNIT,
    PriceTable,
    ProviderPrice,
    request_usd,
)
from idealized_runtime.core.types import LatencyStats, LoadCost, LoadSummary, Slo, TurnSummary

SLO_KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
UNLABELLED_LOAD = "unlabelled"
# The idealized dollars of requests of the model a price entry names: given the entry and the
# requests' (prompt, output) tokens, each request's dollars and what they were computed on
# ("deepseek-v3 on h100-sxm, pytorch-compiled"); None when the model's architecture is unknown.
IdealizedCosts = Callable[
    [ProviderPrice, Sequence[tuple[float, float]]], "tuple[list[float], str] | None"
]


def parse_slo(text: str) -> Slo:
    """``ttft=0.5,tpot=0.05,e2e=10`` (seconds; any subset) as an Slo; InputError if malformed."""
    values: dict[str, float] = {}
    for part in text.split(","):
        name, sep, raw = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in SLO_KEYS:
            raise InputError(
                f"--slo must be comma-separated ttft=S,tpot=S,e2e=S (seconds), got {text!r}"
            )
        if SLO_KEYS[name] in values:
            raise InputError(f"--slo names {name} twice")
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"--slo {name}={raw.strip()!r} is not a number of seconds") from None
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"--slo {name} must be a positive number of seconds, got {raw!r}")
        values[SLO_KEYS[name]] = value
    return Slo(**values)


def load_label(value: Any) -> str:
    """A row's load level as a label. Older rows held a dict ({"pattern": "poisson", "rate": R}
    or {"pattern": "concurrency", "concurrency": C})."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, Mapping):
        if value.get("pattern") == "poisson" and value.get("rate") is not None:
            return f"rate={float(value['rate'])}"
        if value.get("concurrency") is not None:
            return f"concurrency={int(value['concurrency'])}"
    return UNLABELLED_LOAD


LOAD_KIND_ORDER = ("sweep:synchronous", "concurrency=", "rate=", "sweep:rate=", "sweep:throughput")


def load_sort_key(label: str) -> tuple[int, float, str]:
    """Order of load levels in tables and curves: by kind (a sweep's synchronous level first,
    its throughput level last), then by the number in the label."""
    number = re.search(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?", label)
    value = float(number.group()) if number else 0.0
    kinds = [i for i, kind in enumerate(LOAD_KIND_ORDER) if label.startswith(kind)]
    return (kinds[0] if kinds else len(LOAD_KIND_ORDER), value, label)


def latency_stats(values: Sequence[float]) -> LatencyStats:
    if len(values) == 0:
        return LatencyStats()
    array = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    return LatencyStats(p50=float(p50), p90=float(p90), p99=float(p99), mean=float(array.mean()))


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _span(row: Mapping[str, Any]) -> tuple[float, float] | None:
    """(start, end) of a request on one clock per run."""
    start = _number(row.get("started_at_s"))
    if start is not None:
        runtime = _number(row.get("runtime_s"))
        end = _number(row.get("finished_at_s"))
        if end is None:
            end = start + runtime if runtime is not None else start
        return start, max(start, end)
    start, end = _epoch(row.get("started_at")), _epoch(row.get("finished_at"))
    if start is None:
        return None
    return start, max(start, end if end is not None else start)


def _tpot(row: Mapping[str, Any]) -> float | None:
    e2e, ttft = _number(row.get("runtime_s")), _number(row.get("ttft_s"))
    tokens = _number(row.get("num_output_tokens"))
    if e2e is None or ttft is None or tokens is None or tokens < 2:
        return None
    return max(0.0, e2e - ttft) / (tokens - 1)


def _meets(row: Mapping[str, Any], slo: Slo | None) -> bool:
    if slo is None:
        return True
    if slo.ttft_s is not None:
        ttft = _number(row.get("ttft_s"))
        if ttft is None or ttft > slo.ttft_s:
            return False
    if slo.tpot_s is not None:
        tpot = _tpot(row)
        if tpot is not None and tpot > slo.tpot_s:
            return False
    if slo.e2e_s is not None:
        e2e = _number(row.get("runtime_s"))
        if e2e is None or e2e > slo.e2e_s:
            return False
    return True


def _records(frame_or_rows: Any) -> list[Mapping[str, Any]]:
    if hasattr(frame_or_rows, "to_dict") and hasattr(frame_or_rows, "columns"):
        records = frame_or_rows.to_dict("records")
        # pandas holds missing values as NaN; _number treats NaN as missing already.
        return [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in records
        ]
    return list(frame_or_rows)


def _is_ok(row: Mapping[str, Any]) -> bool:
    ok = row.get("ok")
    return bool(ok) and _number(row.get("runtime_s")) is not None


def _ttft_answer(row: Mapping[str, Any]) -> float | None:
    """Time to the first answer token; a row without the key (written before it existed, or by
    another tool) timed the first answer text as its TTFT."""
    return _number(row.get("ttft_answer_s") if "ttft_answer_s" in row else row.get("ttft_s"))


def _mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [v for v in (_number(row.get(key)) for row in rows) if v is not None and v >= 0]
    return sum(values) / len(values) if values else None


def _request_figures(ok_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures a level and a turn index share: token means and the answer's TTFT."""
    return {
        "ttft_answer_s": latency_stats([t for t in map(_ttft_answer, ok_rows) if t is not None]),
        "prompt_tokens_mean": _mean(ok_rows, "num_prompt_tokens"),
        "cached_prompt_tokens_mean": _mean(ok_rows, "cached_prompt_tokens"),
        "output_tokens_mean": _mean(ok_rows, "num_output_tokens"),
        "reasoning_tokens_mean": _mean(ok_rows, "reasoning_tokens"),
    }


def _latencies(ok_rows: Sequence[Mapping[str, Any]]) -> dict[str, LatencyStats]:
    return {
        "ttft_s": latency_stats(
            [t for t in (_number(row.get("ttft_s")) for row in ok_rows) if t is not None]
        ),
        "tpot_s": latency_stats([t for t in map(_tpot, ok_rows) if t is not None]),
        "e2e_s": latency_stats([_number(row.get("runtime_s")) or 0.0 for row in ok_rows]),
    }


def _turn_summaries(rows: Sequence[Mapping[str, Any]]) -> tuple[TurnSummary, ...]:
    """Per turn index of a multi-turn level (rows with a ``turn``)."""
    by_turn: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        turn = _number(row.get("turn"))
        if turn is not None and turn >= 0:
            by_turn.setdefault(int(turn), []).append(row)
    summaries = []
    for turn, turn_rows in sorted(by_turn.items()):
        ok_rows = [row for row in turn_rows if _is_ok(row)]
        summaries.append(
            TurnSummary(
                turn=turn,
                requests=len(turn_rows),
                error_rate=(len(turn_rows) - len(ok_rows)) / len(turn_rows),
                **_latencies(ok_rows),
                **_request_figures(ok_rows),
            )
        )
    return tuple(summaries)


def level_cost(
    model: str,
    ok_rows: Sequence[Mapping[str, Any]],
    prices: PriceTable,
    idealized: IdealizedCosts | None = None,
) -> LoadCost | None:
    """The dollars of a level's successful requests at the model's price (None without one):
    the mean per request, and all of them per million tokens and per million output tokens;
    beside them the idealized dollars of the same requests where ``idealized`` knows them."""
    price = prices.for_model(model)
    if price is None or not ok_rows:
        return None
    dollars, prompt_tokens, output_tokens = request_usd(price, ok_rows)
    total = sum(dollars)

    def per_million(usd: float, tokens: float) -> float | None:
        return usd / tokens * TOKENS_PER_PRICE_UNIT if tokens > 0 else None

    ideal = None
    if idealized is not None:
        shapes = [
            (
                _number(row.get("num_prompt_tokens")) or 1.0,
                _number(row.get("num_output_tokens")) or 0.0,
            )
            for row in ok_rows
        ]
        ideal = idealized(price, shapes)
    return LoadCost(
        price=price.name,
        usd_per_request=total / len(dollars),
        usd_per_million_tokens=per_million(total, prompt_tokens + output_tokens),
        usd_per_million_output_tokens=per_million(total, output_tokens),
        idealized_usd_per_request=sum(ideal[0]) / len(ideal[0]) if ideal else None,
        idealized_usd_per_million_output_tokens=(
            per_million(sum(ideal[0]), output_tokens) if ideal else None
        ),
        idealized_basis=ideal[1] if ideal else None,
    )


def summarize_level(
    model: str,
    load: str,
    rows: Sequence[Mapping[str, Any]],
    slo: Slo | None = None,
    *,
    prices: PriceTable | None = None,
    idealized: IdealizedCosts | None = None,
) -> LoadSummary:
    ok_rows = [row for row in rows if _is_ok(row)]
    runs: dict[Any, list[tuple[float, float]]] = {}
    for row in rows:
        span = _span(row)
        if span is not None:
            runs.setdefault(row.get("run_id"), []).append(span)
    duration = sum(
        max(end for _, end in spans) - min(start for start, _ in spans) for spans in runs.values()
    )

    def per_second(count: float) -> float:
        return count / duration if duration > 0 else 0.0

    output_tokens = sum(_number(row.get("num_output_tokens")) or 0.0 for row in ok_rows)
    return LoadSummary(
        model=model,
        load=load,
        requests=len(rows),
        requests_per_s=per_second(len(ok_rows)),
        output_tokens_per_s=per_second(output_tokens),
        itl_s=latency_stats(_pooled_gaps(ok_rows)),
        **_latencies(ok_rows),
        error_rate=(len(rows) - len(ok_rows)) / len(rows) if rows else 0.0,
        goodput_requests_per_s=per_second(sum(_meets(row, slo) for row in ok_rows)),
        **_request_figures(ok_rows),
        turns=_turn_summaries(rows),
        cost=level_cost(model, ok_rows, prices, idealized) if prices is not None else None,
    )


def _pooled_gaps(ok_rows: Sequence[Mapping[str, Any]]) -> Sequence[float]:
    """Every inter-token gap of the rows that is a number (``_number``), in row order."""
    pooled: list[Any] = []
    for row in ok_rows:
        pooled.extend(row.get("inter_token_latencies_s") or [])
    if set(map(type, pooled)) <= {float}:  # as rows hold them: millions at load, at once
        gaps = np.array(pooled, dtype=np.float64)
        return gaps[np.isfinite(gaps)]
    return [number for number in map(_number, pooled) if number is not None]


def summarize(
    frame_or_rows: Any,
    slo: Slo | None = None,
    *,
    prices: PriceTable | None = None,
    idealized: IdealizedCosts | None = None,
) -> list[LoadSummary]:
    """One LoadSummary per (model, load level), ordered by model then load level; with
    ``prices`` each priced (``level_cost``)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in _records(frame_or_rows):
        if not isinstance(row, Mapping) or row.get("model") is None:
            continue
        key = (str(row["model"]), load_label(row.get("load")))
        groups.setdefault(key, []).append(row)
    ordered = sorted(groups, key=lambda key: (key[0], load_sort_key(key[1])))
    return [
        summarize_level(model, load, groups[(model, load)], slo, prices=prices, idealized=idealized)
        for model, load in ordered
    ]


def summaries_to_json(summaries: Iterable[LoadSummary]) -> list[dict[str, Any]]:
    return [summary.model_dump(mode="json") for summary in summaries]


def parse_raw_lines(
    text: str, *, path: str, partial_last_line_ok: bool = False
) -> list[dict[str, Any]]:
    """Rows of raw JSONL text (``measure``'s rows). A line that is not a JSON object is an
    InputError naming it, except, when ``partial_last_line_ok``, a last line cut off by a run
    killed while writing."""
    lines = text.splitlines()
    if partial_last_line_ok and lines and _is_partial(lines[-1]):
        lines = lines[:-1]
    return list(iter_raw_lines(lines, path=path))


def _json_object(line: str) -> dict[str, Any] | None:
    """The line's JSON object, None when it is none; RepeatedKey when a key repeats."""
    try:
        row = json.loads(line, object_pairs_hook=unique_members)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def _is_partial(line: str) -> bool:
    try:
        return _json_object(line) is None
    except RepeatedKey:
        return False  # whole, and refused as such


def iter_raw_lines(lines: Iterable[str], *, path: str) -> Iterator[dict[str, Any]]:
    """``parse_raw_lines`` of lines as they arrive (an upload), one row at a time."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = _json_object(line)
        except RepeatedKey as repeated:
            raise InputError(
                f"line {number} gives the key {repeated.key!r} twice in one object", path=path
            ) from None
        if row is None:
            raise InputError(f"line {number} is not a JSON object", path=path)
        yield row


def read_raw_rows(paths: Iterable[str | Any]) -> list[dict[str, Any]]:
    """Rows of raw JSONL files (``measure``'s output). A trailing partial line (a run killed
    while writing) is skipped; any other line that is not a JSON object is an InputError."""
    from pathlib import Path

    rows: list[dict[str, Any]] = []
    for path in map(Path, paths):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or error
            raise InputError(f"cannot read raw rows: {reason}", path=str(path)) from None
        rows.extend(parse_raw_lines(text, path=str(path), partial_last_line_ok=True))
    return rows
