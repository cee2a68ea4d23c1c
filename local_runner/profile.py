"""Profile a grid of (prompt tokens, output tokens, batch) requests on the local runner.

Each point is timed ``repeats`` times after ``warmup`` runs (CUDA events on GPU, perf_counter
after a synchronize on CPU); the CSV row holds the median, the standard deviation and the median
time to first token (prefill + first token). Rows are appended and fsynced one by one, so a run
that is killed and restarted with the same arguments skips what is done and duplicates nothing.
The sidecar ``<output>.meta.json`` records where the timings come from (an
``idealized_runtime.core.types.Provenance``, under the key ``stack``) and the settings; resuming
into a file written with other settings is refused.

Layer sampling (models that do not fit): build ``k`` of the ``L`` layers, time every point with
the first ``k1 = k // 2`` and with all ``k`` layers, and extrapolate linearly in the layer count:
    t(L) = t(k) + (t(k) - t(k1)) / (k - k1) * (L - k)
The intercept keeps the embedding, LM head and per-request overheads fixed, where HELM's plain
``t(k) * L / k`` scales them up too. With k = 1 only the plain rule is possible. When noise makes
the shallow timing the longer one (a negative per-layer slope, e.g. short timings on a loaded
CPU), the point falls back to the proportional rule, which is positive whenever ``t(k)`` is.
The CSV's ``extrapolation`` column says which rule each row used: ``none`` (all layers were
run), ``two_depth`` or ``proportional``. A non-positive runtime is never written.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import append_line_durably, atomic_writer, truncate_partial_line
from idealized_runtime.core.types import Architecture, Provenance
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.parallel import SINGLE, TensorParallel, check_divisible

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
# HELM's 27 prompt sizes (Narayanan et al. 2023), plus 2048.
HELM_PROMPT_SIZES = (
    1,
    16,
    32,
    64,
    128,
    192,
    256,
    320,
    384,
    428,
    472,
    512,
    576,
    640,
    704,
    768,
    832,
    896,
    960,
    1024,
    1152,
    1280,
    1408,
    1536,
    1664,
    1792,
    1920,
    2048,
)
HELM_OUTPUT_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
LONG_CONTEXT_OUTPUT_SIZES = (1, 8, 32)
QUICK_PROMPT_SIZES = (1, 16, 64, 128)
QUICK_OUTPUT_SIZES = (1, 4, 16)
GRIDS = ("helm", "quick")


@dataclass(frozen=True, order=True)
class GridPoint:
    num_prompt_tokens: int
    num_output_tokens: int
    batch_size: int = 1

    @property
    def max_seq_len(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens - 1


@dataclass(frozen=True)
class ProfileSettings:
    """How a profile run times its grid: device and precision, tensor-parallel size, layer
    sampling and runs per point. One value from the command (``profile``, ``bench``) through the
    checks, the generator, the timer and the metadata; ``resume_record`` derives from it what
    must match to resume into a file, in the layout ``.meta.json`` has always had.

    It lives here rather than with the domain types of ``core.types``: only the profiler and the
    commands that start it use it (the cost model and the API read the CSV and its ``Provenance``,
    never these settings). The grid is not part of it: a run is given its points, which the
    resume check compares themselves. Progress bar, seed and command line change no timing and
    are not recorded as settings: they stay arguments of ``profile_grid``.
    """

    device: str = "cpu"
    dtype: str = "float32"
    tp_size: int = 1
    layers: int | None = None  # build and time this many layers, extrapolate to all; None: all
    repeats: int = 3  # timed runs per point (the median is kept)
    warmup: int = 1  # untimed runs per point
    weights: str | None = None  # int8, int4[-gN], fp8; None: the dtype
    kv_cache: str | None = None  # fp8, int8; None: the dtype

    def resume_record(self, arch: Architecture, points: Iterable[GridPoint]) -> dict[str, Any]:
        """What must match for a run to resume into an existing file (``.meta.json``'s
        ``settings``); the precision labels must be canonical (``check_profile`` makes them)."""
        record = {
            "architecture": arch.model_dump(mode="json"),
            "device": torch.device(self.device).type,
            "dtype": self.dtype,
            "tensor_parallel_size": self.tp_size,
            "layers": self.layers,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "grid": [asdict(point) for point in sorted(dict.fromkeys(points))],
        }
        # Only quantized runs record a precision, so files of dense runs resume as before.
        record.update(
            {k: v for k, v in (("weights", self.weights), ("kv_cache", self.kv_cache)) if v}
        )
        return record

    def sampling(self, arch: Architecture) -> LayerSampling:
        if self.layers is None or self.layers >= arch.num_layers:
            return LayerSampling(arch.num_layers, arch.num_layers, arch.num_layers)
        return LayerSampling(arch.num_layers, self.layers, max(1, self.layers // 2))


@dataclass(frozen=True)
class LayerSampling:
    """Which depths are timed: ``depth`` layers are built; with fewer than ``total`` layers each
    point is timed at ``shallow`` and at ``depth`` and extrapolated (module docstring)."""

    total: int
    depth: int
    shallow: int

    @property
    def sampled(self) -> bool:
        return self.depth < self.total

    def to_json(self) -> dict[str, Any]:
        return {
            "total_layers": self.total,
            "profiled_layers": [self.shallow, self.depth] if self.sampled else [self.total],
            "rule": (
                "none"
                if not self.sampled
                else "proportional (t * L / k)"
                if self.shallow == self.depth
                else "linear in layer count from two depths (proportional where noise gives a "
                "negative per-layer slope: see the extrapolation column)"
            ),
        }


def make_grid(
    name: str,
    arch: Architecture,
    *,
    max_prompt_tokens: int | None = None,
    batch_sizes: Sequence[int] = (1,),
) -> list[GridPoint]:
    """The ``helm`` or ``quick`` grid, cut to the model's context (and ``max_prompt_tokens``).

    ``helm``: HELM's prompt sizes x outputs 1..64, plus long-context prompts 4096, 8192, ... up
    to the context length with fewer outputs. A point whose prompt plus outputs exceed the
    context is left out."""
    if name not in GRIDS:
        raise InputError(f"unknown grid {name!r}; known: {', '.join(GRIDS)}")
    if max_prompt_tokens is not None and max_prompt_tokens < 1:
        raise InputError(f"--max-prompt-tokens must be >= 1, got {max_prompt_tokens}")
    if max_prompt_tokens is not None and max_prompt_tokens > arch.max_context:
        raise InputError(
            f"--max-prompt-tokens {max_prompt_tokens} exceeds the context length "
            f"{arch.max_context} of {arch.name!r}"
        )
    limit = min(arch.max_context, max_prompt_tokens or arch.max_context)
    if name == "quick":
        sizes = [(p, QUICK_OUTPUT_SIZES) for p in QUICK_PROMPT_SIZES]
    else:
        sizes = [(p, HELM_OUTPUT_SIZES) for p in HELM_PROMPT_SIZES]
        long_prompt = 4096
        while long_prompt <= limit:
            sizes.append((long_prompt, LONG_CONTEXT_OUTPUT_SIZES))
            long_prompt *= 2
    points = [
        GridPoint(p, o, b)
        for b in batch_sizes
        for p, outputs in sizes
        if p <= limit
        for o in outputs
        if p + o - 1 <= arch.max_context
    ]
    if not points:
        raise InputError(f"grid {name!r} has no point within {limit} tokens")
    return points


# --- timing ----------------------------------------------------------------------------------


class _Timer:
    """Wall time of the device work: CUDA events on GPU, perf_counter after a sync on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return end - start


@dataclass(frozen=True)
class Timing:
    runtime_s: float
    std_s: float
    ttft_s: float
    repeats: int
    extrapolation: str = "none"  # none | two_depth | proportional


# How a point is timed: (generator, point, repeats=, warmup=) -> Timing; injectable for tests.
TimePoint = Callable[..., Timing]


def time_point(generator: Generator, point: GridPoint, *, repeats: int, warmup: int) -> Timing:
    """Median runtime and TTFT of one request shape over ``repeats`` runs."""
    timer = _Timer(generator.device)
    prompt = torch.randint(
        0,
        generator.arch.vocab_size,
        (point.batch_size, point.num_prompt_tokens),
        generator=torch.Generator().manual_seed(point.num_prompt_tokens),
    ).to(generator.device)
    runtimes, ttfts = [], []
    for run in range(warmup + repeats):
        marks: list[Any] = []

        def first_token(_tokens: torch.Tensor, marks: list[Any] = marks) -> None:
            if not marks:
                marks.append(timer.mark())

        _sync(generator.device)
        start = timer.mark()
        generator.generate(prompt, point.num_output_tokens, on_token=first_token)
        end = timer.mark()
        _sync(generator.device)
        if run >= warmup:
            runtimes.append(timer.seconds(start, end))
            ttfts.append(timer.seconds(start, marks[0]))
    std = statistics.stdev(runtimes) if len(runtimes) > 1 else 0.0
    return Timing(statistics.median(runtimes), std, statistics.median(ttfts), repeats)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def representative_sample(arch: Architecture, layers: int) -> bool:
    """Whether timing ``layers // 2`` and ``layers`` layers extrapolates to the whole model: the
    layers between the two depths (whose cost is extrapolated) must be typical ones, past the
    dense layers that open DeepSeek-style MoE models, and whole cycles of the attention pattern
    (Gemma 3's five sliding layers and one global)."""
    period, dense = len(arch.layer_pattern), arch.first_k_dense_layers
    if layers == 1:  # plain scaling: the one layer must stand for all of them
        return period == 1 and dense == 0
    shallow = layers // 2
    return shallow >= dense and (layers - shallow) % period == 0


def extrapolate_layers(
    shallow: Timing, deep: Timing, k1: int, k2: int, total_layers: int
) -> Timing:
    """Linear extrapolation in layer count from depths k1 < k2 to ``total_layers``.

    Falls back to the proportional rule ``t(k2) * L / k2`` when the two depths are equal or
    when a per-layer slope (of the runtime or of the TTFT) is negative: time cannot shrink
    with more layers, so a negative slope is noise, and extrapolating it could go below zero.
    """
    runtime_slope = (deep.runtime_s - shallow.runtime_s) / (k2 - k1) if k1 != k2 else -1.0
    ttft_slope = (deep.ttft_s - shallow.ttft_s) / (k2 - k1) if k1 != k2 else -1.0
    if runtime_slope < 0 or ttft_slope < 0 or not math.isfinite(runtime_slope + ttft_slope):
        scale = total_layers / k2
        return Timing(
            deep.runtime_s * scale,
            deep.std_s * scale,
            deep.ttft_s * scale,
            deep.repeats,
            "proportional",
        )
    extra_layers = total_layers - k2  # t(L) = t(k2) + slope * (L - k2) >= t(k2)
    w_deep = (total_layers - k1) / (k2 - k1)
    w_shallow = extra_layers / (k2 - k1)
    std = math.hypot(w_deep * deep.std_s, w_shallow * shallow.std_s)
    return Timing(
        deep.runtime_s + runtime_slope * extra_layers,
        std,
        deep.ttft_s + ttft_slope * extra_layers,
        deep.repeats,
        "two_depth",
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


def _canonical_precision(arch: Architecture, settings: ProfileSettings) -> ProfileSettings:
    """The settings with canonical labels of a quantized precision (None: the compute dtype),
    checked against the model's weight shapes."""
    from idealized_runtime.local_runner.quantize import (
        check_weight_format,
        parse_kv_format,
        parse_weight_format,
    )

    weight_format = parse_weight_format(settings.weights) if settings.weights else None
    if weight_format is not None:
        check_weight_format(arch, weight_format, settings.tp_size)
    label = weight_format.label if weight_format and weight_format.quantized else None
    kv_cache = parse_kv_format(settings.kv_cache) if settings.kv_cache else None
    return replace(settings, weights=label, kv_cache=kv_cache)


def model_label(name: str, weights: str | None, kv_cache: str | None) -> str:
    """The model name rows carry: quantized runs are their own model, so fits of different
    precisions never mix (``llama-3.1-8b@int4-g128+kv-fp8``)."""
    parts = [part for part in (weights, f"kv-{kv_cache}" if kv_cache else None) if part]
    return f"{name}@{'+'.join(parts)}" if parts else name


def _read_done(output: Path) -> set[GridPoint]:
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


def _check_resume(output: Path, settings: dict[str, Any]) -> None:
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


def _check_output_path(output: Path) -> None:
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


# --- the run ---------------------------------------------------------------------------------


def check_profile(
    arch: Architecture,
    points: Sequence[GridPoint],
    output_path: str | Path,
    settings: ProfileSettings = ProfileSettings(),
) -> ProfileSettings:
    """Everything about a profile run that can be refused before any work (the CLI calls it
    before relaunching under torchrun, so that a bad input is one line, not a failure per rank):
    the settings, the output path, and resuming into an existing file. Returns the settings with
    canonical precision labels."""
    output = Path(output_path)
    layers = settings.layers
    if not points:
        raise InputError("empty grid")
    if settings.repeats < 1 or settings.warmup < 0:
        raise InputError("repeats must be >= 1 and warmup >= 0")
    check_divisible(arch, settings.tp_size)
    if layers is not None and not 1 <= layers <= arch.num_layers:
        raise InputError(f"--layers must be in [1, {arch.num_layers}] for {arch.name!r}")
    if layers is not None and layers < arch.num_layers and not representative_sample(arch, layers):
        valid = [k for k in range(1, arch.num_layers) if representative_sample(arch, k)]
        hint = f"use one of {', '.join(map(str, valid[:6]))}" if valid else "profile all layers"
        raise InputError(
            f"--layers {layers} does not sample {arch.name!r} evenly (first "
            f"{arch.first_k_dense_layers} layers dense, attention pattern of "
            f"{len(arch.layer_pattern)} layers); {hint}"
        )
    max_seq_len = max(point.max_seq_len for point in points)
    if max_seq_len > arch.max_context:
        raise InputError(
            f"grid needs {max_seq_len} tokens, beyond the context length {arch.max_context} "
            f"of {arch.name!r}"
        )
    _check_output_path(output)
    settings = _canonical_precision(arch, settings)
    _check_resume(output, settings.resume_record(arch, points))
    return settings


def profile_grid(
    arch: Architecture,
    grid_points: Iterable[GridPoint],
    output_path: str | Path,
    settings: ProfileSettings = ProfileSettings(),
    *,
    progress: bool = True,
    seed: int = 0,
    command: str | None = None,
    timer: TimePoint = time_point,
) -> Path:
    """Time every grid point not already in ``output_path`` and append it there. Returns the
    CSV path. With ``settings.tp_size`` > 1 this must run under torchrun (one process per rank);
    rank 0 writes the files. ``timer`` times one point (``time_point``; tests inject timings)."""
    output = Path(output_path)
    points = sorted(dict.fromkeys(grid_points))
    settings = check_profile(arch, points, output, settings)
    label = model_label(arch.name, settings.weights, settings.kv_cache)
    max_seq_len = max(point.max_seq_len for point in points)
    done = _read_done(output)
    todo = [point for point in points if point not in done]

    tp, device = _join_group(settings.device, settings.tp_size)
    writer = tp.rank == 0
    sampling = settings.sampling(arch)

    if writer:
        try:
            _write_meta(output, arch, points, settings, device, sampling, command)
            truncate_partial_line(output)
            if not output.exists() or output.stat().st_size == 0:
                with output.open("a", encoding="utf-8") as handle:
                    append_line_durably(handle, ",".join(CSV_COLUMNS))
        except OSError as error:
            raise InputError(f"cannot write: {error.strerror or error}", path=str(output)) from None
    if not todo:
        return output

    generator = Generator(
        arch,
        device=device,
        dtype=settings.dtype,
        max_batch_size=max(point.batch_size for point in points),
        max_seq_len=max_seq_len,
        seed=seed,
        num_layers=sampling.depth,
        tensor_parallel=tp,
        weights=settings.weights,
        kv_cache=settings.kv_cache,
    )
    with _progress(progress and writer, len(todo), label) as advance:
        handle = output.open("a", encoding="utf-8") if writer else None
        try:
            for point in todo:
                timing = _time_sampled(generator, point, settings, sampling, timer)
                if handle is not None:
                    append_line_durably(handle, _csv_line(label, point, timing))
                advance(point)
        finally:
            if handle is not None:
                handle.close()
    return output


def _time_sampled(
    generator: Generator,
    point: GridPoint,
    settings: ProfileSettings,
    sampling: LayerSampling,
    timer: TimePoint = time_point,
) -> Timing:
    runs = {"repeats": settings.repeats, "warmup": settings.warmup}
    if not sampling.sampled:
        return timer(generator, point, **runs)
    depth, shallow = sampling.depth, sampling.shallow
    generator.set_active_layers(depth)
    deep = timer(generator, point, **runs)
    if shallow == depth:
        return extrapolate_layers(deep, deep, depth, depth, generator.arch.num_layers)
    generator.set_active_layers(shallow)
    low = timer(generator, point, **runs)
    generator.set_active_layers(depth)
    return extrapolate_layers(low, deep, shallow, depth, generator.arch.num_layers)


def _csv_line(model: str, point: GridPoint, timing: Timing) -> str:
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
    buffer = _LineBuffer()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.line


class _LineBuffer:
    line = ""

    def write(self, text: str) -> None:
        self.line += text


def _join_group(device: str, tp_size: int) -> tuple[TensorParallel, str]:
    if tp_size == 1:
        return SINGLE, device
    from idealized_runtime.local_runner.parallel import init_from_env

    tp, device = init_from_env(device)
    if tp.size != tp_size:
        raise InputError(
            f"tensor-parallel size {tp_size} needs {tp_size} processes (run under "
            f"torchrun --nproc-per-node {tp_size}); this run has {tp.size}"
        )
    return tp, device


def _write_meta(
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


class _progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self.enabled, self.total, self.label = enabled, total, label
        self._bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda point: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[point]}"),
            transient=False,
        )
        self._bar.start()
        task = self._bar.add_task(f"profile {self.label}", total=self.total, point="")

        def advance(point: GridPoint) -> None:
            label = f"p={point.num_prompt_tokens} o={point.num_output_tokens}"
            self._bar.update(task, advance=1, point=label)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
