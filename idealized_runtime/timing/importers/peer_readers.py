"""One reader per tool's result file: guidellm's JSON report, aiperf's profile_export.jsonl,
genai-perf's profile_export.json, ``vllm bench serve --save-detailed``, llmperf's individual
responses (the keys each reads are listed in ``importers.peers``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.importers.peer_rows import (
    UNITS,
    format_hint,
    is_aiperf_record,
    load_label,
    mean_of,
    request_row,
    seconds,
    to_number,
    token_count,
)

AIPERF_RECORDS = "profile_export.jsonl"


# --- guidellm ------------------------------------------------------------------------------------


def _guidellm_load(strategy: Any) -> str | None:
    if not isinstance(strategy, Mapping):
        return None
    kind = str(strategy.get("type_") or strategy.get("type") or "")
    if kind == "synchronous":
        return "concurrency=1"
    if kind == "concurrent":
        return load_label("concurrency", strategy.get("streams", strategy.get("max_concurrency")))
    if kind in ("constant", "poisson", "async"):
        return load_label("rate", strategy.get("rate"))
    return kind or None


def _guidellm_model(request: Mapping[str, Any], fallback: str | None) -> str | None:
    arguments = request.get("request_args")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    if isinstance(arguments, Mapping):
        body = arguments.get("body") if isinstance(arguments.get("body"), Mapping) else arguments
        name = body.get("model") if isinstance(body, Mapping) else None
        if isinstance(name, str) and name:
            return name
    return fallback


def _read_guidellm(document: Mapping[str, Any], path: Path) -> Iterator[dict[str, Any]]:
    backend = ((document.get("config") or {}).get("spec") or {}).get("backend") or {}
    fallback = backend.get("model") or None
    for index, benchmark in enumerate(document["benchmarks"]):
        if not isinstance(benchmark, Mapping) or not isinstance(benchmark.get("requests"), Mapping):
            continue
        config = benchmark.get("config") or {}
        load = _guidellm_load(config.get("strategy"))
        run_id = f"{path.name}#{index}"
        for status in ("successful", "errored", "incomplete"):
            for request in benchmark["requests"].get(status) or []:
                if not isinstance(request, Mapping):
                    continue
                info = request.get("info") if isinstance(request.get("info"), Mapping) else {}
                error = None
                if status != "successful":
                    error = info.get("error") or f"{status} request"
                start = to_number(request.get("request_start_time", request.get("start_time")))
                end = to_number(request.get("request_end_time", request.get("end_time")))
                runtime = to_number(request.get("request_latency"))
                if runtime is None and start is not None and end is not None:
                    runtime = end - start
                yield request_row(
                    model=_guidellm_model(request, fallback),
                    prompt=token_count(request.get("prompt_tokens")),
                    output=token_count(request.get("output_tokens")),
                    runtime=runtime,
                    ttft=seconds(request.get("time_to_first_token_ms"), 1e-3),
                    itl=seconds(request.get("inter_token_latency_ms"), 1e-3),
                    load=load,
                    source="guidellm",
                    error=error,
                    request_id=request.get("request_id"),
                    run_id=run_id,
                    started=start,
                    finished=end,
                )


# --- aiperf ------------------------------------------------------------------------------------


def _aiperf_metric(metrics: Mapping[str, Any], name: str) -> Any:
    entry = metrics.get(name)
    return entry.get("value") if isinstance(entry, Mapping) else entry


def _aiperf_seconds(metrics: Mapping[str, Any], name: str) -> float | None:
    entry = metrics.get(name)
    if not isinstance(entry, Mapping):
        return None
    scale = UNITS.get(str(entry.get("unit") or "ms").lower(), 1e-3)
    return seconds(entry.get("value"), scale)


def _aiperf_summary(path: Path) -> tuple[str | None, str | None]:
    """(model, load) from the profile_export_aiperf.json beside a profile_export.jsonl."""
    summary = path.with_name("profile_export_aiperf.json")
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, None
    config = data.get("input_config") if isinstance(data, Mapping) else None
    if not isinstance(config, Mapping):
        return None, None
    # aiperf 0.13: models.items[].name and phases[] {kind, type, concurrency, rate};
    # earlier versions: endpoint.model_names and loadgen {concurrency, request_rate}.
    items = (config.get("models") or {}).get("items") or []
    names = [item.get("name") for item in items if isinstance(item, Mapping)]
    names = names or (config.get("endpoint") or {}).get("model_names") or []
    model = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    phases = [p for p in config.get("phases") or [] if isinstance(p, Mapping)]
    loadgen = next((p for p in phases if p.get("kind") == "profiling"), None)
    loadgen = loadgen or config.get("loadgen") or {}
    load = None
    for key in ("request_rate", "rate"):
        if to_number(loadgen.get(key)) is not None:
            load = load_label("rate", loadgen.get(key))
    if load is None and to_number(loadgen.get("concurrency")) is not None:
        load = load_label("concurrency", loadgen.get("concurrency"))
    return model, load


def _read_aiperf(records: list[Any], path: Path) -> Iterator[dict[str, Any]]:
    model, load = _aiperf_summary(path)
    for number, record in enumerate(records, start=1):
        if not is_aiperf_record(record):
            raise InputError(
                "expected an aiperf record {metadata, metrics}", path=str(path), row=number
            )
        metadata = record.get("metadata") or {}
        if metadata.get("benchmark_phase", "profiling") != "profiling":
            continue  # warm-up requests
        metrics = record.get("metrics") or {}
        error = record.get("error")
        if isinstance(error, Mapping):
            error = ": ".join(str(error[k]) for k in ("code", "type", "message") if error.get(k))
            error = error or "failed request"
        elif metadata.get("was_cancelled"):
            error = "cancelled"
        gaps = _aiperf_metric(metrics, "inter_chunk_latency")
        scale = UNITS.get(str((metrics.get("inter_chunk_latency") or {}).get("unit", "ms")), 1e-3)
        start = to_number(metadata.get("request_start_ns"))
        end = to_number(metadata.get("request_end_ns"))
        output = _aiperf_metric(metrics, "output_sequence_length")
        if output is None:
            output = _aiperf_metric(metrics, "output_token_count")
        prompt = _aiperf_metric(metrics, "input_sequence_length")
        if prompt is None:
            prompt = _aiperf_metric(metrics, "error_isl")
        yield request_row(
            model=model,
            prompt=token_count(prompt),
            output=token_count(output),
            runtime=_aiperf_seconds(metrics, "request_latency"),
            ttft=_aiperf_seconds(metrics, "time_to_first_token"),
            itl=_aiperf_seconds(metrics, "inter_token_latency"),
            load=load,
            source="aiperf",
            error=error or None,
            request_id=metadata.get("x_request_id"),
            run_id=path.name,
            started=None if start is None else start * 1e-9,
            finished=None if end is None else end * 1e-9,
            gaps=[g * scale for g in gaps if to_number(g) is not None]
            if isinstance(gaps, list)
            else None,
        )


# --- genai-perf ----------------------------------------------------------------------------------


def _sse_objects(text: Any) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent-events response text ("data: {...}" lines)."""
    if not isinstance(text, str):
        return
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


def _read_genai_perf(document: Mapping[str, Any], path: Path) -> Iterator[dict[str, Any]]:
    for index, experiment in enumerate(document["experiments"]):
        if not isinstance(experiment, Mapping):
            continue
        spec = experiment.get("experiment") or {}
        mode = str(spec.get("mode") or "")
        load = load_label("concurrency" if mode == "concurrency" else "rate", spec.get("value"))
        for number, request in enumerate(experiment.get("requests") or [], start=1):
            payload: Any = (request.get("request_inputs") or {}).get("payload")
            try:
                payload = json.loads(payload) if isinstance(payload, str) else payload
            except json.JSONDecodeError:
                payload = None
            model = payload.get("model") if isinstance(payload, Mapping) else None
            usage: Mapping[str, Any] = {}
            content_times: list[float] = []
            stamps = request.get("response_timestamps") or []
            for stamp, output in zip(stamps, request.get("response_outputs") or [], strict=False):
                for chunk in _sse_objects((output or {}).get("response")):
                    if isinstance(chunk.get("usage"), Mapping):
                        usage = chunk["usage"]
                    choices = chunk.get("choices") or [{}]
                    delta = choices[0].get("delta") or {}
                    if delta.get("content") or choices[0].get("text"):
                        content_times.append(float(stamp))
            start = to_number(request.get("timestamp"))
            end = to_number(stamps[-1]) if stamps else None
            prompt, output = (
                token_count(usage.get("prompt_tokens")),
                token_count(usage.get("completion_tokens")),
            )
            if prompt is None:
                raise InputError(
                    "genai-perf's export holds no token counts and this request's responses "
                    "carry no usage (serve with usage in the stream, or measure with guidellm "
                    "or aiperf, which count tokens)",
                    path=str(path),
                    row=number,
                )
            runtime = None if start is None or end is None else (end - start) * 1e-9
            ttft = None if start is None or not content_times else (content_times[0] - start) * 1e-9
            gaps = [(b - a) * 1e-9 for a, b in itertools.pairwise(content_times)]
            yield request_row(
                model=model,
                prompt=prompt,
                output=output,
                runtime=runtime,
                ttft=ttft,
                itl=mean_of(gaps),
                load=load,
                source="genai-perf",
                error=None,
                run_id=f"{path.name}#{index}",
                started=None if start is None else start * 1e-9,
                finished=None if end is None else end * 1e-9,
                gaps=gaps,
            )


# --- vllm bench serve ----------------------------------------------------------------------------


def _vllm_load(result: Mapping[str, Any]) -> str | None:
    rate = result.get("request_rate")
    if to_number(rate) is not None:
        return load_label("rate", rate)
    if to_number(result.get("max_concurrency")) is not None:
        return load_label("concurrency", result.get("max_concurrency"))
    return "rate=inf" if rate in ("inf", "Infinity") else None


def _vllm_column(
    result: Mapping[str, Any], name: str, count: int, default: Any = None
) -> list[Any]:
    """One per-request list of a vllm result, ``count`` long (absent in older versions)."""
    values = result.get(name)
    if isinstance(values, list) and len(values) == count:
        return values
    if values is not None and not isinstance(values, list):
        return [values] * count  # output_lens is one number for pooling models
    return [default] * count


def _read_vllm(document: Any, path: Path) -> Iterator[dict[str, Any]]:
    results = document if isinstance(document, list) else [document]
    for index, result in enumerate(results):
        if not isinstance(result, Mapping) or "input_lens" not in result:
            raise InputError(format_hint(result), path=str(path))
        count = len(result["input_lens"])

        model = result.get("model_id") or result.get("model")
        load = _vllm_load(result)
        columns = zip(
            result["input_lens"],
            _vllm_column(result, "output_lens", count),
            _vllm_column(result, "ttfts", count),
            _vllm_column(result, "itls", count, []),
            _vllm_column(result, "latencies", count),
            _vllm_column(result, "start_times", count),
            _vllm_column(result, "errors", count, ""),
            strict=True,
        )
        for prompt, output, ttft, itls, latency, start, error in columns:
            gaps = [g for g in (itls or []) if to_number(g) is not None]
            runtime = to_number(latency)
            if runtime is None and to_number(ttft) is not None:
                runtime = float(ttft) + sum(gaps)  # older versions: TTFT plus the gaps
            begin = to_number(start)
            yield request_row(
                model=model,
                prompt=token_count(prompt),
                output=token_count(output),
                runtime=runtime,
                ttft=to_number(ttft),
                itl=mean_of(gaps),
                load=load,
                source="vllm",
                error=error or None,
                run_id=f"{path.name}#{index}",
                started=begin,
                finished=None if begin is None or runtime is None else begin + runtime,
                gaps=gaps,
            )


# --- llmperf -----------------------------------------------------------------------------------


def _llmperf_summary(path: Path) -> tuple[str | None, str | None]:
    name = path.name
    if not name.endswith("_individual_responses.json"):
        return None, None
    summary = path.with_name(name.replace("_individual_responses.json", "_summary.json"))
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, None
    if not isinstance(data, Mapping):
        return None, None
    model = data.get("model") if isinstance(data.get("model"), str) else None
    return model, load_label("concurrency", data.get("num_concurrent_requests"))


def _read_llmperf(records: list[Any], path: Path) -> Iterator[dict[str, Any]]:
    model, load = _llmperf_summary(path)
    for number, record in enumerate(records, start=1):
        if not isinstance(record, Mapping):
            raise InputError("expected a JSON object per request", path=str(path), row=number)
        error = None
        if record.get("error_code") is not None or record.get("error_msg"):
            error = ": ".join(
                str(v) for v in (record.get("error_code"), record.get("error_msg")) if v
            )
        yield request_row(
            model=model,
            prompt=token_count(record.get("number_input_tokens")),
            output=token_count(record.get("number_output_tokens")),
            runtime=to_number(record.get("end_to_end_latency_s")),
            ttft=to_number(record.get("ttft_s")),
            itl=to_number(record.get("inter_token_latency_s")),
            load=load,
            source="llmperf",
            error=error,
            run_id=path.name,
        )


READERS = {
    "guidellm": _read_guidellm,
    "aiperf": _read_aiperf,
    "genai-perf": _read_genai_perf,
    "vllm": _read_vllm,
    "llmperf": _read_llmperf,
}
