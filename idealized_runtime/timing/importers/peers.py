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

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.importers.peer_readers import AIPERF_RECORDS, READERS
from idealized_runtime.timing.importers.peer_rows import (
    COLUMNS,
    LIST_COLUMNS,
    UNKNOWN_FORMAT,
    JsonLines,
    format_hint,
    is_aiperf_record,
)

FORMATS = ("guidellm", "aiperf", "genai-perf", "vllm", "llmperf")


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
    return JsonLines(lines)


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
        if is_aiperf_record(first):
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
        raise InputError(format_hint(document), path=str(path))
    if format not in ("auto", detected):
        raise InputError(f"not a {format} result file (it looks like {detected}'s)", path=str(path))
    reader = READERS[detected]
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
