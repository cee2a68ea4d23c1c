"""Import other load generators' per-request results: one row per request, in the columns of our
own raw rows (``measure``), so that ``fit --method denoised``, ``convert`` and ``summarize`` read
them.

Formats (detected from the content; the keys below were checked against each tool's source):

- ``guidellm``: its JSON report (``--output kind=json``; guidellm 0.8, ``guidellm/benchmark/
  schemas``): ``benchmarks[].requests.{successful,errored,incomplete}[]`` with ``prompt_tokens``,
  ``output_tokens``, ``request_latency`` (s), ``time_to_first_token_ms``,
  ``inter_token_latency_ms``, ``request_start_time``/``request_end_time`` (epoch s),
  ``request_args`` (the request body, as JSON text: the model) and ``info.error``; the level in
  ``benchmarks[].config.strategy`` (``type_``, ``streams``, ``rate``).
- ``aiperf``: ``profile_export.jsonl`` (``aiperf/common/models/record_models.py``,
  ``docs/tutorials/working-with-profile-exports.md``): per line ``{metadata: {request_start_ns,
  request_end_ns, ...}, metrics: {name: {value, unit}}, error: {code, type, message} | null}``,
  metrics ``input_sequence_length``, ``output_sequence_length``, ``request_latency``,
  ``time_to_first_token``, ``inter_token_latency``, ``inter_chunk_latency`` (a list); failed
  requests carry only ``error_isl``. The model and the load level come from the
  ``profile_export_aiperf.json`` beside it (``input_config.models.items[].name`` and
  ``input_config.phases[]`` in aiperf 0.13; ``endpoint.model_names`` and ``loadgen`` before)
  when present.
- ``genai-perf``: ``profile_export.json`` (perf_analyzer's export, read by genai-perf's
  ``profile_data_parser``): ``experiments[].{experiment: {mode, value}, requests: [{timestamp,
  request_inputs: {payload}, response_timestamps: [ns], response_outputs: [{response}]}]}``.
  It holds no token counts of its own: they come from the ``usage`` the server streamed.
- ``vllm``: ``vllm bench serve --save-result --save-detailed`` (``vllm/benchmarks/serve.py``):
  one JSON object (or one per line with ``--append-result``) with ``model_id``,
  ``max_concurrency``, ``request_rate`` and parallel per-request lists ``input_lens``,
  ``output_lens``, ``ttfts`` (s), ``itls`` (lists of s), ``latencies`` (s; older versions:
  TTFT + sum of ITLs), ``start_times`` and ``errors`` ("" when ok).
- ``llmperf``: ``*_individual_responses.json`` (``token_benchmark_ray.py``,
  ``src/llmperf/common_metrics.py``): a list of ``{number_input_tokens, number_output_tokens,
  end_to_end_latency_s, ttft_s, inter_token_latency_s, error_code, error_msg}``; the model and
  concurrency in the ``*_summary.json`` beside it.

Columns: model, num_prompt_tokens, num_output_tokens, runtime_s (end to end), ttft_s, itl_s (the
tool's own mean inter-token latency), tpot_s ((runtime - TTFT) / (output tokens - 1), the same
rule for every tool), load ("concurrency=8", "rate=4.0"), source (the tool), ok, error (None when
ok), request_id, run_id, started_at_s / finished_at_s (seconds since the file's first request),
inter_token_latencies_s (per-token gaps where the tool records them). Failed requests stay, with
``ok`` false and the tool's error; fits skip them.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError

FORMATS = ("guidellm", "aiperf", "genai-perf", "vllm", "llmperf")
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
AIPERF_RECORDS = "profile_export.jsonl"
UNKNOWN_FORMAT = (
    "not a known result file: expected guidellm's JSON report, aiperf's profile_export.jsonl, "
    "genai-perf's profile_export.json, `vllm bench serve --save-result --save-detailed` JSON "
    "or llmperf's *_individual_responses.json"
)
# Seconds per unit, for aiperf's {value, unit} metrics.
_UNITS = {"s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


# --- small helpers -------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A finite number, or None (missing, text, NaN, a boolean)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _count(value: Any) -> int | None:
    number = _number(value)
    return None if number is None or number < 0 else round(number)


def _seconds(value: Any, scale: float) -> float | None:
    number = _number(value)
    return None if number is None else number * scale


def _mean(values: Iterable[Any]) -> float | None:
    numbers = [n for n in map(_number, values) if n is not None]
    return sum(numbers) / len(numbers) if numbers else None


def _tpot(runtime: float | None, ttft: float | None, output: int | None) -> float | None:
    if runtime is None or ttft is None or output is None or output < 2:
        return None
    return max(0.0, runtime - ttft) / (output - 1)


def _one_line(error: Any, limit: int = 300) -> str:
    """An error as one line of at most ``limit`` characters (tools log tracebacks, URLs)."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _load_label(kind: str, value: Any) -> str | None:
    number = _number(value)
    if number is None:
        return None
    if kind == "concurrency":
        return f"concurrency={round(number)}"
    return f"rate={number}"


def _row(
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
        "tpot_s": _tpot(runtime, ttft, output) if ok else None,
        "load": load,
        "source": source,
        "ok": ok,
        "error": None if ok else _one_line(error),
        "request_id": None if request_id is None else str(request_id),
        "run_id": run_id,
        "started_at_s": started,
        "finished_at_s": finished,
        "inter_token_latencies_s": gaps if ok and gaps else None,
    }


# --- reading and detecting ---------------------------------------------------------------------


def _load_document(path: Path) -> Any:
    """The file's JSON: one document, or a list of the objects of a JSON Lines file."""
    if not path.exists():
        raise InputError("no such file", path=str(path))
    if path.is_dir():
        raise InputError(
            f"is a folder: expected a result file (or an aiperf folder with {AIPERF_RECORDS})",
            path=str(path),
        )
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    if not text.strip():
        raise InputError("empty file", path=str(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == 1:
                raise InputError(f"{UNKNOWN_FORMAT} (not JSON)", path=str(path)) from None
            raise InputError(f"not valid JSON ({error.msg})", path=str(path), row=number) from None
    return _JsonLines(lines)


class _JsonLines(list):  # type: ignore[type-arg]
    """The objects of a JSON Lines file (a list that remembers it was one)."""


def _is_aiperf_record(item: Any) -> bool:
    return isinstance(item, Mapping) and "metadata" in item and "metrics" in item


def detect_format(document: Any) -> str | None:
    """The tool that wrote ``document`` (parsed JSON), or None."""
    if isinstance(document, Mapping):
        benchmarks = document.get("benchmarks")
        if isinstance(benchmarks, list) and any(
            isinstance(b, Mapping) and isinstance(b.get("requests"), Mapping) for b in benchmarks
        ):
            return "guidellm"
        if isinstance(document.get("experiments"), list):
            return "genai-perf"
        if "ttfts" in document or "input_lens" in document:
            return "vllm"
    if isinstance(document, list) and document:
        first = document[0]
        if _is_aiperf_record(first):
            return "aiperf"
        if isinstance(first, Mapping) and (
            "end_to_end_latency_s" in first or "number_input_tokens" in first
        ):
            return "llmperf"
        if isinstance(first, Mapping) and ("ttfts" in first or "input_lens" in first):
            return "vllm"
    return None


def is_result_file(path: str | Path) -> bool:
    """Whether ``path`` is a result file of one of ``FORMATS`` (not our own rows): a .json file
    whose content one reader recognizes, or a JSON Lines file of aiperf records or vllm results.
    Reads only the first line of JSON Lines files."""
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file() or suffix not in (".json", ".jsonl", ".ndjson"):
        return False
    try:
        if suffix == ".json":
            return detect_format(json.loads(path.read_text(encoding="utf-8-sig"))) is not None
        with path.open(encoding="utf-8-sig") as handle:
            first = next((line for line in handle if line.strip()), "")
        return detect_format([json.loads(first)]) in ("aiperf", "vllm")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def _hint(document: Any) -> str:
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


def read_result_file(
    path: str | Path,
    format: str = "auto",
    *,
    model: str | None = None,
    load: str | None = None,
) -> list[dict[str, Any]]:
    """The rows (dicts with ``COLUMNS``) of one result file. ``format`` "auto" detects the tool;
    ``model`` / ``load`` fill in (and override) what the file names."""
    if format != "auto" and format not in FORMATS:
        raise InputError(f"unknown format {format!r}; choose auto or one of {', '.join(FORMATS)}")
    path = Path(path)
    if path.is_dir() and (path / AIPERF_RECORDS).is_file():  # an aiperf artifact folder
        path = path / AIPERF_RECORDS
    document = _load_document(path)
    detected = detect_format(document)
    if detected is None:
        raise InputError(_hint(document), path=str(path))
    if format not in ("auto", detected):
        raise InputError(f"not a {format} result file (it looks like {detected}'s)", path=str(path))
    reader = _READERS[detected]
    rows = list(reader(document, path))
    if not rows:
        raise InputError(f"no requests in this {detected} result file", path=str(path))
    starts = [row["started_at_s"] for row in rows if row["started_at_s"] is not None]
    origin = min(starts) if starts else 0.0
    for row in rows:
        for column in ("started_at_s", "finished_at_s"):
            if row[column] is not None:
                row[column] = round(row[column] - origin, 6)
        if model:
            row["model"] = model
        if load:
            row["load"] = load
    # A failed request may not echo its body (guidellm): it asked the file's one model.
    named = {row["model"] for row in rows if row["model"]}
    if len(named) == 1:
        for row in rows:
            row["model"] = row["model"] or next(iter(named))
    nameless = next((row for row in rows if not row["model"]), None)
    if nameless is not None:
        raise InputError(
            f"the {detected} file names no model: pass --model NAME (model=... in Python)",
            path=str(path),
        )
    return rows


def import_results(
    paths: Iterable[str | Path],
    format: str = "auto",
    *,
    model: str | None = None,
    load: str | None = None,
    skip_errors: bool = False,
) -> Any:
    """All requests of the result files as a pandas DataFrame (columns ``COLUMNS``; NaN where a
    tool records no value). ``skip_errors`` leaves failed requests out."""
    import pandas as pd

    rows = [
        row
        for path in paths
        for row in read_result_file(path, format, model=model, load=load)
        if row["ok"] or not skip_errors
    ]
    if not rows:
        raise InputError("no successful requests in the result files")
    frame = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    for column in ("num_prompt_tokens", "num_output_tokens"):
        frame[column] = frame[column].astype("Int64")
    for column in ("runtime_s", "ttft_s", "itl_s", "tpot_s", "started_at_s", "finished_at_s"):
        frame[column] = frame[column].astype("float64")
    frame["ok"] = frame["ok"].astype(bool)
    return frame


def write_results(frame: Any, output: str | Path) -> None:
    """Rows to .csv (without the per-token list column), .jsonl or .parquet, atomically."""
    from idealized_runtime.timing.importers.helm import write_rows

    if Path(output).suffix.lower() == ".csv":
        frame = frame.drop(columns=[c for c in LIST_COLUMNS if c in frame.columns])
    write_rows(frame, output)


# --- guidellm ------------------------------------------------------------------------------------


def _guidellm_load(strategy: Any) -> str | None:
    if not isinstance(strategy, Mapping):
        return None
    kind = str(strategy.get("type_") or strategy.get("type") or "")
    if kind == "synchronous":
        return "concurrency=1"
    if kind == "concurrent":
        return _load_label("concurrency", strategy.get("streams", strategy.get("max_concurrency")))
    if kind in ("constant", "poisson", "async"):
        return _load_label("rate", strategy.get("rate"))
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
                start = _number(request.get("request_start_time", request.get("start_time")))
                end = _number(request.get("request_end_time", request.get("end_time")))
                runtime = _number(request.get("request_latency"))
                if runtime is None and start is not None and end is not None:
                    runtime = end - start
                yield _row(
                    model=_guidellm_model(request, fallback),
                    prompt=_count(request.get("prompt_tokens")),
                    output=_count(request.get("output_tokens")),
                    runtime=runtime,
                    ttft=_seconds(request.get("time_to_first_token_ms"), 1e-3),
                    itl=_seconds(request.get("inter_token_latency_ms"), 1e-3),
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
    scale = _UNITS.get(str(entry.get("unit") or "ms").lower(), 1e-3)
    return _seconds(entry.get("value"), scale)


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
        if _number(loadgen.get(key)) is not None:
            load = _load_label("rate", loadgen.get(key))
    if load is None and _number(loadgen.get("concurrency")) is not None:
        load = _load_label("concurrency", loadgen.get("concurrency"))
    return model, load


def _read_aiperf(records: list[Any], path: Path) -> Iterator[dict[str, Any]]:
    model, load = _aiperf_summary(path)
    for number, record in enumerate(records, start=1):
        if not _is_aiperf_record(record):
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
        scale = _UNITS.get(str((metrics.get("inter_chunk_latency") or {}).get("unit", "ms")), 1e-3)
        start = _number(metadata.get("request_start_ns"))
        end = _number(metadata.get("request_end_ns"))
        output = _aiperf_metric(metrics, "output_sequence_length")
        if output is None:
            output = _aiperf_metric(metrics, "output_token_count")
        prompt = _aiperf_metric(metrics, "input_sequence_length")
        if prompt is None:
            prompt = _aiperf_metric(metrics, "error_isl")
        yield _row(
            model=model,
            prompt=_count(prompt),
            output=_count(output),
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
            gaps=[g * scale for g in gaps if _number(g) is not None]
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
        load = _load_label("concurrency" if mode == "concurrency" else "rate", spec.get("value"))
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
            start = _number(request.get("timestamp"))
            end = _number(stamps[-1]) if stamps else None
            prompt, output = (
                _count(usage.get("prompt_tokens")),
                _count(usage.get("completion_tokens")),
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
            yield _row(
                model=model,
                prompt=prompt,
                output=output,
                runtime=runtime,
                ttft=ttft,
                itl=_mean(gaps),
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
    if _number(rate) is not None:
        return _load_label("rate", rate)
    if _number(result.get("max_concurrency")) is not None:
        return _load_label("concurrency", result.get("max_concurrency"))
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
            raise InputError(_hint(result), path=str(path))
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
            gaps = [g for g in (itls or []) if _number(g) is not None]
            runtime = _number(latency)
            if runtime is None and _number(ttft) is not None:
                runtime = float(ttft) + sum(gaps)  # older versions: TTFT plus the gaps
            begin = _number(start)
            yield _row(
                model=model,
                prompt=_count(prompt),
                output=_count(output),
                runtime=runtime,
                ttft=_number(ttft),
                itl=_mean(gaps),
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
    return model, _load_label("concurrency", data.get("num_concurrent_requests"))


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
        yield _row(
            model=model,
            prompt=_count(record.get("number_input_tokens")),
            output=_count(record.get("number_output_tokens")),
            runtime=_number(record.get("end_to_end_latency_s")),
            ttft=_number(record.get("ttft_s")),
            itl=_number(record.get("inter_token_latency_s")),
            load=load,
            source="llmperf",
            error=error,
            run_id=path.name,
        )


_READERS = {
    "guidellm": _read_guidellm,
    "aiperf": _read_aiperf,
    "genai-perf": _read_genai_perf,
    "vllm": _read_vllm,
    "llmperf": _read_llmperf,
}
