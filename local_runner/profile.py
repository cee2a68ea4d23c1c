"""Profile a grid of (prompt tokens, output tokens, batch) requests on the local runner.

Each point is timed ``repeats`` times after ``warmup`` runs (CUDA events on GPU, perf_counter
after a synchronize on CPU); the CSV row holds the median, the standard deviation and the median
time to first token (prefill + first token). Rows are appended and fsynced one by one, so a run
that is killed and restarted with the same arguments skips what is done and duplicates nothing.
The sidecar ``<output>.meta.json`` records where the timings come from (an
``idealized_runtime.core.types.Provenance``, under the key ``stack``) and the settings; resuming
into a file written with other settings is refused.

The parts: ``grids`` (which points), ``settings`` (how they are timed), ``timer`` (one point),
``layer_sampling`` (models that do not fit), ``profile_files`` (the CSV, its ``.meta.json`` and
resuming), ``timing_quality`` (noisy points timed again, the machine's load, whether the grid
can be trusted); this module checks a run and drives it, on one device or over tensor-parallel
ranks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import append_line_durably, truncate_partial_line
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.grids import GridPoint
from idealized_runtime.local_runner.layer_sampling import (
    LayerSampling,
    extrapolate_layers,
    representative_sample,
)
from idealized_runtime.local_runner.parallel import SINGLE, TensorParallel, check_divisible
from idealized_runtime.local_runner.profile_files import (
    CSV_COLUMNS,
    check_output_path,
    check_resume,
    csv_line,
    model_label,
    read_done_points,
    replace_rows,
    update_meta,
    write_meta,
)
from idealized_runtime.local_runner.settings import ProfileSettings
from idealized_runtime.local_runner.timer import TimePoint, Timing, time_point
from idealized_runtime.local_runner.timing_quality import (
    NoiseCheck,
    QualityReport,
    out_of_order,
    spread,
    steadier,
    warning_line,
)


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    check_output_path(output)
    settings = _canonical_precision(arch, settings)
    check_resume(output, settings.resume_record(arch, points))
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
    noise: NoiseCheck = NoiseCheck(),
    warn: Callable[[str], None] = _stderr_line,
) -> Path:
    """Time every grid point not already in ``output_path`` and append it there. Returns the
    CSV path. With ``settings.tp_size`` > 1 this must run under torchrun (one process per rank);
    rank 0 writes the files. ``timer`` times one point (``time_point``; tests inject timings).
    Noisy and out-of-order points are timed again (``noise``; on one device only: ranks would
    judge their own clocks apart); what was found goes to ``.meta.json`` and, when the grid is
    not trustworthy, to ``warn`` as one line."""
    output = Path(output_path)
    points = sorted(dict.fromkeys(grid_points))
    settings = check_profile(arch, points, output, settings)
    label = model_label(arch.name, settings.weights, settings.kv_cache)
    max_seq_len = max(point.max_seq_len for point in points)
    done = read_done_points(output)
    todo = [point for point in points if point not in done]

    tp, device = _join_group(settings.device, settings.tp_size)
    writer = tp.rank == 0
    sampling = settings.sampling(arch)

    if writer:
        try:
            write_meta(output, arch, points, settings, device, sampling, command)
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
    check = noise if not tp.enabled else NoiseCheck(reruns=0, order_tolerance=float("inf"))
    quality = QualityReport(check, points=len(todo), load_before=check.load())
    timings: dict[GridPoint, Timing] = {}

    def timed(point: GridPoint) -> Timing:
        timing = _time_sampled(generator, point, settings, sampling, timer)
        for _ in range(check.reruns):
            if spread(timing) <= check.max_spread:
                break
            quality.rerun += 1
            timing = steadier(timing, _time_sampled(generator, point, settings, sampling, timer))
        return timing

    with _progress(progress and writer, len(todo), label) as advance:
        handle = output.open("a", encoding="utf-8") if writer else None
        try:
            for point in todo:
                timings[point] = timed(point)
                if handle is not None:
                    append_line_durably(handle, csv_line(label, point, timings[point]))
                advance(point)
        finally:
            if handle is not None:
                handle.close()
    # A point slower than a longer prompt was slowed by something else: timed once more, the
    # faster timing kept (contention only adds time), its row replaced.
    suspects = out_of_order(timings, check.order_tolerance) if check.reruns else []
    for point in suspects:
        quality.rerun += 1
        again = timed(point)
        if again.runtime_s < timings[point].runtime_s:
            timings[point] = again
    if suspects and writer:
        replace_rows(output, {p: csv_line(label, p, timings[p]) for p in suspects})
    quality.out_of_order = out_of_order(timings, check.order_tolerance)
    quality.noisy = sorted(p for p, t in timings.items() if spread(t) > check.max_spread)
    quality.max_spread = max((spread(t) for t in timings.values()), default=0.0)
    quality.load_after = check.load()
    if writer:
        report = quality.to_json()
        update_meta(output, {"timing_quality": report})
        line = warning_line(report)
        if line is not None:
            warn(line)
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
