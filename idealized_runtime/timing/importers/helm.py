"""Import HELM runs: one row per request from ``benchmark_output/runs/<suite>/<run>/``.

HELM writes, per run, ``run_spec.json`` (the run's name, scenario and adapter spec with the model
deployment) and ``per_instance_stats.json``: a list of ``{instance_id, train_trial_index,
perturbation?, stats: [{name: {name, split, perturbation?}, count, sum, mean, ...}]}`` holding,
among the metrics, ``num_prompt_tokens``, ``num_output_tokens``, ``inference_runtime`` (the
measured time) and, where HELM computed them, ``inference_idealized_runtime`` and
``inference_denoised_runtime``. ``scenario_state.json`` (its ``request_states`` carry
``request.model_deployment``) names the model when the adapter spec does not.

Perturbed instances and repeated trials stay separate rows (columns ``perturbation`` and
``train_trial_index``): nothing is averaged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError

RUN_SPEC = "run_spec.json"
PER_INSTANCE_STATS = "per_instance_stats.json"
SCENARIO_STATE = "scenario_state.json"
COLUMNS = (
    "model",
    "num_prompt_tokens",
    "num_output_tokens",
    "runtime_s",
    "suite",
    "run",
    "scenario",
    "instance_id",
    "train_trial_index",
    "perturbation",
    "split",
    "helm_idealized_runtime_s",
    "helm_denoised_runtime_s",
)
# HELM's metric name -> our column.
_STATS = {
    "num_prompt_tokens": "num_prompt_tokens",
    "num_output_tokens": "num_output_tokens",
    "inference_runtime": "runtime_s",
    "inference_idealized_runtime": "helm_idealized_runtime_s",
    "inference_denoised_runtime": "helm_denoised_runtime_s",
}


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Run folders (those with a run_spec.json) at or below each path: one run, a suite, or a
    whole ``benchmark_output/runs``. Sorted, each once."""
    runs: dict[Path, None] = {}
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise InputError("no such file or folder", path=str(path))
        if path.is_file():
            raise InputError("expected a HELM run folder (with run_spec.json)", path=str(path))
        found = (
            [path]
            if (path / RUN_SPEC).is_file()
            else sorted(spec.parent for spec in path.rglob(RUN_SPEC))
        )
        if not found:
            raise InputError(f"no HELM run found (no {RUN_SPEC} here or below)", path=str(path))
        runs.update(dict.fromkeys(found))
    return list(runs)


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    except json.JSONDecodeError as error:
        raise InputError(
            f"not valid JSON ({error.msg}, line {error.lineno})", path=str(path)
        ) from None


def _model(run_dir: Path, spec: dict[str, Any]) -> str:
    adapter = spec.get("adapter_spec") or {}
    model = adapter.get("model_deployment") or adapter.get("model")
    if not model and (run_dir / SCENARIO_STATE).is_file():
        for state in (_load(run_dir / SCENARIO_STATE).get("request_states") or [])[:1]:
            request = state.get("request") or {}
            model = request.get("model_deployment") or request.get("model")
    if not model or not isinstance(model, str):
        raise InputError(
            "no model: adapter_spec has no model_deployment or model", path=str(run_dir / RUN_SPEC)
        )
    return model


def _scenario(spec: dict[str, Any], run_name: str) -> str:
    class_name = (spec.get("scenario_spec") or {}).get("class_name") or ""
    if class_name:
        return class_name.rsplit(".", 1)[-1]
    return run_name.split(":", 1)[0]


def _perturbation(description: Any) -> str:
    if not description:
        return ""
    if isinstance(description, dict):
        return str(description.get("name") or json.dumps(description, sort_keys=True))
    return str(description)


def _value(stat: dict[str, Any]) -> float | None:
    mean = stat.get("mean")
    if mean is None and stat.get("count"):
        mean = stat.get("sum", 0) / stat["count"]
    if isinstance(mean, (int, float)) and not isinstance(mean, bool) and math.isfinite(mean):
        return float(mean)
    return None


def read_run(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of one HELM run, in per_instance_stats order. Instances with no token counts (a
    failed request) are left out."""
    run_dir = Path(run_dir)
    spec = _load(run_dir / RUN_SPEC)
    if not isinstance(spec, dict):
        raise InputError("expected a JSON object", path=str(run_dir / RUN_SPEC))
    stats_path = run_dir / PER_INSTANCE_STATS
    if not stats_path.is_file():
        raise InputError(f"no {PER_INSTANCE_STATS} (was the run summarized?)", path=str(run_dir))
    entries = _load(stats_path)
    if not isinstance(entries, list):
        raise InputError("expected a JSON list of instances", path=str(stats_path))
    model = _model(run_dir, spec)
    run_name = str(spec.get("name") or run_dir.name)
    scenario = _scenario(spec, run_name)
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("stats"), list):
            raise InputError(
                "expected {instance_id, stats: [...]}", path=str(stats_path), row=number
            )
        perturbation = entry.get("perturbation")
        values: dict[str, float] = {}
        split = ""
        for stat in entry["stats"]:
            name = stat.get("name") or {}
            column = _STATS.get(name.get("name"))
            # An instance's stats may repeat per perturbation: take the one of this entry.
            if column is None or (name.get("perturbation") or None) != (perturbation or None):
                continue
            value = _value(stat)
            if value is not None:
                values[column] = value
                split = split or str(name.get("split") or "")
        if "num_prompt_tokens" not in values or "num_output_tokens" not in values:
            continue
        yield {
            "model": model,
            "num_prompt_tokens": round(values["num_prompt_tokens"]),
            "num_output_tokens": round(values["num_output_tokens"]),
            "runtime_s": values.get("runtime_s"),
            "suite": run_dir.parent.name,
            "run": run_name,
            "scenario": scenario,
            "instance_id": str(entry.get("instance_id", "")),
            "train_trial_index": int(entry.get("train_trial_index") or 0),
            "perturbation": _perturbation(perturbation),
            "split": split,
            "helm_idealized_runtime_s": values.get("helm_idealized_runtime_s"),
            "helm_denoised_runtime_s": values.get("helm_denoised_runtime_s"),
        }


def import_helm(paths: Iterable[str | Path]) -> Any:
    """All requests of the HELM runs at or below ``paths`` as a pandas DataFrame (columns
    ``COLUMNS``; runtime_s and HELM's own runtimes NaN where HELM has none)."""
    import pandas as pd

    rows = [row for run in find_runs(paths) for row in read_run(run)]
    if not rows:
        raise InputError("the HELM runs hold no request with token counts")
    frame = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    for column in ("runtime_s", "helm_idealized_runtime_s", "helm_denoised_runtime_s"):
        frame[column] = frame[column].astype("float64")
    return frame


def write_rows(frame: Any, output: str | Path) -> None:
    """A DataFrame to .csv (floats in shortest round-trip form), .jsonl or .parquet, atomically."""
    from idealized_runtime.core.files import atomic_writer

    suffix = Path(output).suffix.lower()
    if suffix == ".csv":
        with atomic_writer(output, newline="") as handle:
            frame.to_csv(handle, index=False, lineterminator="\n")
    elif suffix in (".jsonl", ".ndjson"):
        with atomic_writer(output) as handle:
            frame.to_json(handle, orient="records", lines=True)
    elif suffix in (".parquet", ".pq"):
        with atomic_writer(output, mode="wb") as handle:
            frame.to_parquet(handle, index=False)
    else:
        raise InputError(
            "unsupported file type: expected .csv, .jsonl or .parquet", path=str(output)
        )


# --- archives (uploads) ------------------------------------------------------------------------

# Only HELM's small per-run files are extracted; scenario inputs and outputs can be gigabytes.
_ARCHIVE_FILES = (RUN_SPEC, PER_INSTANCE_STATS)
MAX_ARCHIVE_MEMBER_BYTES = 256 << 20


def import_helm_archive(data: bytes, name: str = "upload") -> Any:
    """``import_helm`` of a .tar.gz / .tar / .zip of HELM run folders (any nesting), given as
    bytes: only run_spec.json and per_instance_stats.json are read, never written outside a
    temporary folder (no path from the archive is trusted)."""
    import io
    import tarfile
    import tempfile
    import zipfile

    members: dict[str, bytes] = {}
    try:
        if zipfile.is_zipfile(io.BytesIO(data)):
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for info in archive.infolist():
                    if _wanted(info.filename, info.file_size, info.is_dir()):
                        members[info.filename] = archive.read(info)
        else:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
                for member in archive:
                    if member.isfile() and _wanted(member.name, member.size, False):
                        handle = archive.extractfile(member)
                        if handle is not None:
                            members[member.name] = handle.read()
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as error:
        raise InputError(f"not a .tar.gz, .tar or .zip archive ({error})", path=name) from None
    if not members:
        raise InputError(f"no HELM run in the archive (no {RUN_SPEC})", path=name)
    with tempfile.TemporaryDirectory(prefix="helm-upload-") as folder:
        root = Path(folder)
        for member, content in sorted(members.items()):
            # Keep the run's folder name (it is the run's name when run_spec has none) and the
            # suite's, under a numbered folder of our own.
            parts = [p for p in member.replace("\\", "/").split("/") if p not in ("", ".", "..")]
            run_name = parts[-2] if len(parts) >= 2 else "run"
            suite = parts[-3] if len(parts) >= 3 else "upload"
            target = root / _safe(suite) / _safe(run_name)
            target.mkdir(parents=True, exist_ok=True)
            (target / parts[-1]).write_bytes(content)
        return import_helm([root])


def _wanted(member: str, size: int, is_dir: bool) -> bool:
    if is_dir or member.replace("\\", "/").rsplit("/", 1)[-1] not in _ARCHIVE_FILES:
        return False
    if size > MAX_ARCHIVE_MEMBER_BYTES:
        raise InputError(f"{member}: larger than {MAX_ARCHIVE_MEMBER_BYTES >> 20} MB")
    return True


def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.:=,+" else "_" for c in part)[:200] or "_"
