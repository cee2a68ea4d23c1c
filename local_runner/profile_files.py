"""The profile's files: the CSV (one fsynced row per finished point), its ``.meta.json`` (where the
timings come from, the settings, the layer sampling, start and resume times), and resuming: the
points already done, and the refusal of a file written with other settings.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import Architecture, Provenance
from idealized_runtime.local_runner.grids import GridPoint
from idealized_runtime.local_runner.layer_sampling import LayerSampling
from idealized_runtime.local_runner.settings import ProfileSettings
from idealized_runtime.local_runner.timer import Timing

CSV_COLUMNS = (
    "model",
    "num_prompt_tokens",
    "num_output_tokens",
    "batch_size",
    "runtime_s",
    "std_s",
    "ttft_s",
    "repeats",
    "extrapolation",
)


# --- files -----------------------------------------------------------------------------------


def meta_path(output: Path) -> Path:
    return output.with_name(output.name + ".meta.json")


def stack_for(device: torch.device, dtype: str, tp_size: int) -> Provenance:
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = props.name
        versions["cuda"] = str(torch.version.cuda)
        versions["gpu_memory_gb"] = f"{props.total_memory / 1e9:.1f}"
        with contextlib.suppress(AttributeError, RuntimeError):
            versions["driver"] = str(torch.cuda.driver_version())  # type: ignore[attr-defined]
        hardware = name
    else:
        name = platform.processor() or platform.machine()
        hardware = "cpu"
        versions["cpu_threads"] = str(torch.get_num_threads())
    return Provenance(
        runner="idealized-runtime",
        hardware=hardware,
        device_name=name,
        num_devices=tp_size,
        tensor_parallel_size=tp_size,
        dtype=dtype,  # type: ignore[arg-type]
        versions=versions,
    )


def model_label(name: str, weights: str | None, kv_cache: str | None) -> str:
    """The model name rows carry: quantized runs are their own model, so fits of different
    precisions never mix (``llama-3.1-8b@int4-g128+kv-fp8``)."""
    parts = [part for part in (weights, f"kv-{kv_cache}" if kv_cache else None) if part]
    return f"{name}@{'+'.join(parts)}" if parts else name


def read_done_points(output: Path) -> set[GridPoint]:
    """Points already in the CSV; a trailing partial line (killed mid-write) is ignored."""
    done: set[GridPoint] = set()
    if not output.exists():
        return done
    text = output.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    complete = [line for line in lines if line.endswith("\n")]
    if not complete:
        return done
    header = next(csv.reader([complete[0]]))
    if tuple(header) != CSV_COLUMNS:
        raise InputError(f"not a profile CSV (header {','.join(header)})", path=str(output))
    for row in csv.DictReader(complete):
        try:
            done.add(
                GridPoint(
                    int(row["num_prompt_tokens"]),
                    int(row["num_output_tokens"]),
                    int(row["batch_size"]),
                )
            )
        except (TypeError, ValueError):
            continue  # a damaged row is re-measured
    return done


def check_resume(output: Path, settings: dict[str, Any]) -> None:
    meta_file = meta_path(output)
    if not output.exists():
        return
    if not meta_file.exists():
        raise InputError(
            "exists without its .meta.json; refusing to append to it (use a new output path)",
            path=str(output),
        )
    try:
        previous = json.loads(meta_file.read_text(encoding="utf-8")).get("settings", {})
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"unreadable metadata: {error}", path=str(meta_file)) from None
    changed = sorted(key for key in settings if previous.get(key) != settings[key])
    if changed:
        raise InputError(
            f"was written with different settings ({', '.join(changed)}); refusing to resume "
            "into it: rerun with the same arguments or choose a new output path",
            path=str(output),
        )


def check_output_path(output: Path) -> None:
    """A file path whose folder exists or can be created, and is writable."""
    if output.is_dir():
        raise InputError("is a folder; give a file path for the CSV", path=str(output))
    folder = output.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"cannot create the output folder: {folder} is a file", path=str(output))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"the folder {folder} is not writable", path=str(output))


def csv_line(model: str, point: GridPoint, timing: Timing) -> str:
    if not (timing.runtime_s > 0 and math.isfinite(timing.runtime_s)) or not (
        timing.ttft_s > 0 and math.isfinite(timing.ttft_s)
    ):
        # A clock that cannot resolve the work (or a broken timer): refuse rather than write
        # a runtime no fit can use.
        raise RuntimeError(
            f"non-positive timing for {point}: runtime {float(timing.runtime_s)!r} s, "
            f"ttft {float(timing.ttft_s)!r} s"
        )
    values = (
        model,
        point.num_prompt_tokens,
        point.num_output_tokens,
        point.batch_size,
        # Shortest round-trip form: the value as measured, no digits added or lost.
        repr(float(timing.runtime_s)),
        repr(float(timing.std_s)),
        repr(float(timing.ttft_s)),
        timing.repeats,
        timing.extrapolation,
    )
    buffer = LineBuffer()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.line


class LineBuffer:
    line = ""

    def write(self, text: str) -> None:
        self.line += text


def write_meta(
    output: Path,
    arch: Architecture,
    points: Sequence[GridPoint],
    settings: ProfileSettings,
    device: str,
    sampling: LayerSampling,
    command: str | None,
) -> None:
    """``<output>.meta.json``: what was profiled, on which stack, with which settings; a resumed
    run keeps its start time and adds a resume time. ``device`` is this rank's."""
    meta_file = meta_path(output)
    previous: dict[str, Any] = {}
    if meta_file.exists() and output.exists():  # resuming (else a leftover of another run)
        previous = json.loads(meta_file.read_text(encoding="utf-8"))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    dtype = settings.dtype
    meta = {
        "model": model_label(arch.name, settings.weights, settings.kv_cache),
        "architecture": arch.name,
        "precision": {
            "compute": dtype,
            "weights": settings.weights or dtype,
            "kv_cache": settings.kv_cache or dtype,
        },
        "stack": stack_for(torch.device(device), dtype, settings.tp_size).model_dump(mode="json"),
        "settings": settings.resume_record(arch, points),
        "layer_sampling": sampling.to_json(),
        "started_at": previous.get("started_at", now),
        "resumed_at": [*previous.get("resumed_at", []), now] if previous else [],
        "command": command or " ".join(sys.argv),
        "columns": list(CSV_COLUMNS),
    }
    with atomic_writer(meta_file) as handle:
        json.dump(meta, handle, indent=2)
        handle.write("\n")


def update_meta(output: Path, fields: dict[str, Any]) -> None:
    """Add ``fields`` to ``<output>.meta.json`` (atomically)."""
    meta_file = meta_path(output)
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    meta.update(fields)
    with atomic_writer(meta_file) as handle:
        json.dump(meta, handle, indent=2)
        handle.write("\n")


def replace_rows(output: Path, lines: dict[GridPoint, str]) -> None:
    """Replace the rows of some points (a point timed again) by ``lines``, atomically."""
    rows = output.read_text(encoding="utf-8").splitlines(keepends=True)
    with atomic_writer(output) as handle:
        for row in rows:
            (fields,) = csv.reader([row])
            try:
                point = GridPoint(int(fields[1]), int(fields[2]), int(fields[3]))
            except (IndexError, ValueError):
                point = None  # the header
            handle.write(lines.get(point, row) if point is not None else row)
