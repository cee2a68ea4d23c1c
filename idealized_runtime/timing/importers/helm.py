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

import bz2
import gzip
import io
import json
import lzma
import math
import tarfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.json_members import RepeatedKey, unique_members

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
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_members)
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    except json.JSONDecodeError as error:
        raise InputError(
            f"not valid JSON ({error.msg}, line {error.lineno})", path=str(path)
        ) from None
    except RepeatedKey as repeated:
        raise InputError(f"not valid here: {repeated}", path=str(path)) from None


def _model(spec: dict[str, Any], where: str, run_dir: Path | None = None) -> str:
    adapter = spec.get("adapter_spec") or {}
    model = adapter.get("model_deployment") or adapter.get("model")
    if not model and run_dir is not None and (run_dir / SCENARIO_STATE).is_file():
        for state in (_load(run_dir / SCENARIO_STATE).get("request_states") or [])[:1]:
            request = state.get("request") or {}
            model = request.get("model_deployment") or request.get("model")
    if not model or not isinstance(model, str):
        raise InputError("no model: adapter_spec has no model_deployment or model", path=where)
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
    stats_path = run_dir / PER_INSTANCE_STATS
    if not stats_path.is_file():
        raise InputError(f"no {PER_INSTANCE_STATS} (was the run summarized?)", path=str(run_dir))
    yield from _run_rows(
        spec,
        _load(stats_path),
        run_folder=run_dir.name,
        suite=run_dir.parent.name,
        spec_where=str(run_dir / RUN_SPEC),
        stats_where=str(stats_path),
        run_dir=run_dir,
    )


def _tokens(value: float) -> float | int:
    # Whole numbers as such; a value beyond any token count stays as it is, for the reader's
    # range check to show (int(1e308) would print 309 digits).
    return round(value) if abs(value) < 2**53 else value


def _run_rows(
    spec: Any,
    entries: Any,
    *,
    run_folder: str,
    suite: str,
    spec_where: str,
    stats_where: str,
    run_dir: Path | None = None,
) -> Iterator[dict[str, Any]]:
    """The rows of a run from its parsed run_spec.json and per_instance_stats.json; errors name
    the files as ``spec_where`` and ``stats_where``."""
    if not isinstance(spec, dict):
        raise InputError("expected a JSON object", path=spec_where)
    if not isinstance(entries, list):
        raise InputError("expected a JSON list of instances", path=stats_where)
    model = _model(spec, spec_where, run_dir)
    run_name = str(spec.get("name") or run_folder)
    scenario = _scenario(spec, run_name)
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("stats"), list):
            raise InputError("expected {instance_id, stats: [...]}", path=stats_where, row=number)
        perturbation = entry.get("perturbation")
        values: dict[str, float] = {}
        split = ""
        for stat in entry["stats"]:
            name = (stat.get("name") if isinstance(stat, dict) else None) or {}
            column = _STATS.get(name.get("name")) if isinstance(name, dict) else None
            # An instance's stats may repeat per perturbation: take the one of this entry.
            if column is None or (name.get("perturbation") or None) != (perturbation or None):
                continue
            value = _value(stat)
            if value is not None:
                values[column] = value
                split = split or str(name.get("split") or "")
        if "num_prompt_tokens" not in values or "num_output_tokens" not in values:
            continue
        trial = entry.get("train_trial_index") or 0
        yield {
            "model": model,
            "num_prompt_tokens": _tokens(values["num_prompt_tokens"]),
            "num_output_tokens": _tokens(values["num_output_tokens"]),
            "runtime_s": values.get("runtime_s"),
            "suite": suite,
            "run": run_name,
            "scenario": scenario,
            "instance_id": str(entry.get("instance_id", "")),
            "train_trial_index": trial if isinstance(trial, int) else 0,
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

# Only HELM's small per-run files are read; scenario inputs and outputs can be gigabytes.
_ARCHIVE_FILES = (RUN_SPEC, PER_INSTANCE_STATS)
# One run file is parsed whole (as JSON): its size bounds what parsing it costs.
MAX_ARCHIVE_MEMBER_BYTES = 64 << 20
# PAX and GNU long-name headers are read whole by tarfile: real ones are a few hundred bytes.
_MAX_TAR_HEADER_BYTES = 1 << 20
_READ_BYTES = 1 << 16


@dataclass(frozen=True)
class ArchiveLimits:
    """What reading an uploaded archive may cost. ``max_bytes``: bytes decompressed in all (a
    .zip decompresses only the run files; a .tar.gz is one compressed stream, so every member
    passes through it, counted but not kept); ``max_members``: entries; ``max_file_bytes``:
    one run file."""

    max_bytes: int = 256 << 20
    max_members: int = 10_000
    max_file_bytes: int = MAX_ARCHIVE_MEMBER_BYTES


class _Budget:
    """Counts what an archive has cost so far; an InputError at the first limit passed."""

    def __init__(self, limits: ArchiveLimits, name: str) -> None:
        self.limits, self.name, self.bytes, self.members = limits, name, 0, 0

    def member(self, count: int = 1) -> None:
        self.members += count
        if self.members > self.limits.max_members:
            raise self._over(f"{self.limits.max_members} entries in the archive")

    def spend(self, count: int) -> None:
        self.bytes += count
        if self.bytes > self.limits.max_bytes:
            raise self._over(f"{self.limits.max_bytes} bytes uncompressed")

    def _over(self, limit: str) -> InputError:
        return InputError(
            f"more than {limit} (this server's limit): pack only the HELM runs' run_spec.json "
            "and per_instance_stats.json",
            path=self.name,
        )


class _CountedStream(io.RawIOBase):
    """The decompressed bytes of a .tar.gz (.tar.bz2, .tar.xz) as tarfile reads them, counted
    against the budget as they are produced: reading stops at the limit."""

    def __init__(self, raw: Any, budget: _Budget) -> None:
        super().__init__()
        self.raw, self.budget = raw, budget

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.budget.limits.max_bytes - self.budget.bytes + 1
        data = self.raw.read(size)
        self.budget.spend(len(data))
        return data


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose extended headers (PAX, GNU long names) are refused above
    _MAX_TAR_HEADER_BYTES before tarfile reads them into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        extended = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                    tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)  # fmt: skip
        if self.type in extended and self.size > _MAX_TAR_HEADER_BYTES:
            raise InputError(
                f"a tar extended header of {self.size} bytes; at most {_MAX_TAR_HEADER_BYTES}"
            )
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def _shown_member(member: str) -> str:
    return member if member.isprintable() else ascii(member)


def _run_of(member: str) -> tuple[str, str]:
    """(the run folder, the file's name) of an archive member path."""
    parts = [p for p in member.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts[:-1]), (parts[-1] if parts else "")


def _read_member(handle: Any, size: int, budget: _Budget, where: str) -> bytes:
    if size > budget.limits.max_file_bytes:
        raise InputError(
            f"{size} bytes; a run file may have at most {budget.limits.max_file_bytes}", path=where
        )
    pieces: list[bytes] = []
    read = 0
    while piece := handle.read(_READ_BYTES):
        read += len(piece)
        if read > budget.limits.max_file_bytes:  # more than the header said
            raise InputError(
                f"more than {budget.limits.max_file_bytes} bytes in one run file", path=where
            )
        pieces.append(piece)
    return b"".join(pieces)


def _archive_json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=unique_members)
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", path=where) from None
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg}, line {error.lineno})", path=where) from None
    except RepeatedKey as repeated:
        raise InputError(f"not valid here: {repeated}", path=where) from None


def _archive_run(folder: str, files: dict[str, bytes], name: str) -> Iterator[dict[str, Any]]:
    parts = folder.split("/") if folder else []
    spec_where = f"{name}: {_shown_member('/'.join([*parts, RUN_SPEC]))}"
    stats_where = f"{name}: {_shown_member('/'.join([*parts, PER_INSTANCE_STATS]))}"
    if PER_INSTANCE_STATS not in files:
        raise InputError(
            f"no {PER_INSTANCE_STATS} beside {RUN_SPEC} (was the run summarized?)",
            path=spec_where,
        )
    yield from _run_rows(
        _archive_json(files[RUN_SPEC], spec_where),
        _archive_json(files[PER_INSTANCE_STATS], stats_where),
        run_folder=parts[-1] if parts else "run",
        suite=parts[-2] if len(parts) >= 2 else name,
        spec_where=spec_where,
        stats_where=stats_where,
    )


def iter_archive_rows(
    file: BinaryIO, *, name: str = "upload", limits: ArchiveLimits = ArchiveLimits()
) -> Iterator[dict[str, Any]]:
    """The rows of the HELM run folders (any nesting) in a .zip or a .tar (.gz, .bz2, .xz)
    read from ``file``, as ``read_run`` gives them. Only run_spec.json and
    per_instance_stats.json are read; nothing is written to disk; errors name the archive's
    members (as ``name: member``), never a path on this machine; the first limit passed
    (``limits``) stops the reading with an InputError."""
    budget = _Budget(limits, name)
    file.seek(0)
    is_zip = zipfile.is_zipfile(file)
    file.seek(0)
    try:
        yield from (_zip_rows if is_zip else _tar_rows)(file, budget, name)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error,
            lzma.LZMAError) as error:  # fmt: skip
        raise InputError(
            f"not a readable .tar.gz, .tar or .zip archive ({error})", path=name
        ) from None


def _zip_entries(file: BinaryIO) -> int:
    """Entries a .zip declares, from its end record: read before zipfile loads the directory
    (a directory of millions of entries would fill memory first)."""
    end = zipfile._EndRecData(file)  # type: ignore[attr-defined]
    file.seek(0)
    return int(end[zipfile._ECD_ENTRIES_TOTAL]) if end else 0  # type: ignore[attr-defined]


def _zip_rows(file: BinaryIO, budget: _Budget, name: str) -> Iterator[dict[str, Any]]:
    budget.member(_zip_entries(file))
    with zipfile.ZipFile(file) as archive:
        runs: dict[str, dict[str, zipfile.ZipInfo]] = {}
        for info in archive.infolist():
            folder, base = _run_of(info.filename)
            if not info.is_dir() and base in _ARCHIVE_FILES:
                runs.setdefault(folder, {})[base] = info
        for folder in sorted(runs):
            if RUN_SPEC not in runs[folder]:
                continue
            files: dict[str, bytes] = {}
            for base, info in runs[folder].items():
                where = f"{name}: {_shown_member(info.filename)}"
                if budget.bytes + info.file_size > budget.limits.max_bytes:
                    budget.spend(info.file_size)  # refused before decompressing anything
                try:
                    with archive.open(info) as handle:
                        files[base] = _read_member(handle, info.file_size, budget, where)
                except (RuntimeError, NotImplementedError) as error:  # encrypted, unknown method
                    raise InputError(f"cannot read it ({error})", path=where) from None
                budget.spend(len(files[base]))
            yield from _archive_run(folder, files, name)
    if not any(RUN_SPEC in files for files in runs.values()):
        raise InputError(f"no HELM run in the archive (no {RUN_SPEC})", path=name)


def _decompressed(file: BinaryIO) -> Any:
    magic = file.read(6)
    file.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=file, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(file)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(file)
    return file


def _tar_rows(file: BinaryIO, budget: _Budget, name: str) -> Iterator[dict[str, Any]]:
    stream = _CountedStream(_decompressed(file), budget)
    pending: dict[str, dict[str, bytes]] = {}  # run folders still missing a file
    found = False
    # Stream mode ("r|"): members in order, each passed over (decompressed, not kept) unless
    # it is a run file; nothing seeks back.
    with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as archive:
        for member in archive:
            budget.member()
            folder, base = _run_of(member.name)
            if not member.isfile() or base not in _ARCHIVE_FILES:
                continue
            handle = archive.extractfile(member)
            if handle is None:
                continue
            where = f"{name}: {_shown_member(member.name)}"
            files = pending.setdefault(folder, {})
            files[base] = _read_member(handle, member.size, budget, where)
            if len(files) == len(_ARCHIVE_FILES):
                found = True
                yield from _archive_run(folder, pending.pop(folder), name)
    for folder, files in sorted(pending.items()):
        if RUN_SPEC in files:
            yield from _archive_run(folder, files, name)  # names the missing file
    if not found:
        raise InputError(f"no HELM run in the archive (no {RUN_SPEC})", path=name)


def import_helm_archive(data: bytes, name: str = "upload") -> Any:
    """``import_helm`` of a .tar.gz / .tar / .zip of HELM run folders given as bytes (see
    ``iter_archive_rows``), as a pandas DataFrame."""
    import pandas as pd

    rows = list(iter_archive_rows(io.BytesIO(data), name=name))
    frame = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    for column in ("runtime_s", "helm_idealized_runtime_s", "helm_denoised_runtime_s"):
        frame[column] = frame[column].astype("float64")
    return frame
