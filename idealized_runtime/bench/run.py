"""Running a benchmark file: each item profiled or measured and fitted through the same library
functions as the ``profile``, ``measure`` and ``fit`` commands; done items skipped on a rerun.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from idealized_runtime.bench.config import (
    ESTIMATES_NAME,
    LOCAL_FIT_METHODS,
    LOCAL_GRIDS,
    ApiModelSpec,
    BenchConfig,
    LocalModelSpec,
    api_grid,
)
from idealized_runtime.bench.manifest import ItemStatus, Manifest, utc_timestamp
from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import (
    Architecture,
    Deployment,
    FittedCostModel,
    Provenance,
)

REACHABILITY_TIMEOUT_S = 5.0


# --- running -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemResult:
    name: str
    model: str
    kind: str
    status: ItemStatus
    skipped: bool  # finished in an earlier run
    error: str | None
    fits: dict[str, FittedCostModel]


@dataclass(frozen=True)
class BenchResult:
    results_dir: Path
    items: tuple[ItemResult, ...]

    @property
    def failed(self) -> list[ItemResult]:
        return [item for item in self.items if item.status == "failed"]


def fit_file(item_dir: Path, method: str) -> Path:
    return item_dir / f"fits-{method}.json"


def read_fits(item_dir: str | Path) -> list[FittedCostModel]:
    """Every fit written for an item (all methods, all models)."""
    from idealized_runtime.report.inputs import read_fits as read_item_fits

    return read_item_fits(item_dir)


def _write_fits(item_dir: Path, method: str, fits: dict[str, FittedCostModel]) -> None:
    from idealized_runtime.cost_model.fitting.fit_files import write_fit_file

    write_fit_file(fits, fit_file(item_dir, method))


def _run_local(
    spec: LocalModelSpec, config: BenchConfig, item_dir: Path, progress: bool
) -> dict[str, FittedCostModel]:
    from idealized_runtime.cost_model.fitting.measurements_io import read_measurements
    from idealized_runtime.cost_model.fitting.methods import fit_measurements
    from idealized_runtime.local_runner.grids import make_grid
    from idealized_runtime.local_runner.profile import profile_grid
    from idealized_runtime.local_runner.profile_files import meta_path
    from idealized_runtime.local_runner.settings import ProfileSettings

    arch = load_architecture(spec.architecture)
    output = item_dir / "measurements.csv"
    profile_grid(
        arch,
        make_grid(spec.grid or _local_grid(config.grid), arch),
        output,
        ProfileSettings(
            device=config.device,
            dtype=spec.dtype or config.dtype,
            layers=spec.layers,
            repeats=spec.repeats or config.repeats,
            warmup=spec.warmup if spec.warmup is not None else config.warmup,
        ),
        progress=progress,
        command=" ".join(sys.argv),
    )
    stack = _profile_stack(meta_path(output), config.hardware)
    measurements = [m for m in read_measurements(output) if m.model == arch.name]
    # The profiler names rows by architecture; the leaderboard knows the model by its label.
    measurements = [m.model_copy(update={"model": spec.label}) for m in measurements]
    fits: dict[str, FittedCostModel] = {}
    for method in LOCAL_FIT_METHODS:
        fitted = fit_measurements(measurements, method=method, stack=stack)
        _write_fits(item_dir, method, fitted)
        fits[method] = fitted[spec.label]
    if config.stack is not None:
        fits["calibrated"] = _stack_fit(arch, spec.label, config)
        _write_fits(item_dir, "calibrated", {spec.label: fits["calibrated"]})
    return fits


def _stack_fit(arch: Architecture, label: str, config: BenchConfig) -> FittedCostModel:
    """The hardware model's idealized runtime of ``arch`` on the configured GPU and stack, at the
    fewest GPUs that hold it."""
    from idealized_runtime.cost_model.hardware.planner import min_gpus
    from idealized_runtime.cost_model.hardware.roofline import to_fitted_cost_model
    from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

    stack = get_stack(config.stack or "")
    hardware = get_hardware(config.hardware)
    tp = min_gpus(arch, hardware, context_tokens=min(arch.max_context, 4096))
    deployment = Deployment(
        architecture=arch, hardware=hardware, tp=tp, efficiency=stack.efficiency, stack=stack.name
    )
    return to_fitted_cost_model(
        deployment,
        method="calibrated",
        model_name=label,
        runner=f"stack:{stack.name}",
    )


def _local_grid(name: str) -> str:
    # A file-level grid may be an API grid name; the local runner's closest one is used then.
    return name if name in LOCAL_GRIDS else ("helm" if name.startswith("helm") else "quick")


def _profile_stack(meta_file: Path, hardware: str) -> Provenance | None:
    """The profiler's recorded stack, named after the configured hardware."""
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        stack = Provenance.model_validate(meta["stack"])
    except (OSError, ValueError, KeyError):
        return None
    return stack.model_copy(update={"hardware": hardware})


def check_reachable(base_url: str) -> None:
    """Any HTTP answer from the server counts (even 401/404); no answer is an InputError."""
    url = base_url.rstrip("/")
    url = url if re.search(r"https?://[^/]+/.+", url) else url + "/v1"
    try:
        httpx.get(url + "/models", timeout=REACHABILITY_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise InputError(f"endpoint {base_url} is unreachable ({type(error).__name__})") from None


def _run_api(
    spec: ApiModelSpec, config: BenchConfig, item_dir: Path, progress: bool
) -> dict[str, FittedCostModel]:
    from idealized_runtime.cost_model.fitting.measurements_io import read_measurements
    from idealized_runtime.cost_model.fitting.methods import fit_measurements
    from idealized_runtime.timing.config import MeasureConfig
    from idealized_runtime.timing.grids import load_grid
    from idealized_runtime.timing.measure import run_measure

    check_reachable(spec.base_url)
    output = item_dir / "timings.jsonl"
    grid = api_grid(spec, config)
    measure_config = MeasureConfig(
        base_url=spec.base_url,
        model=spec.model,
        label=spec.label,
        api_key_env=spec.api_key_env,
        endpoint=spec.endpoint,
        grid=load_grid(grid),
        repeats=spec.repeats or config.repeats,
        concurrency=spec.concurrency,
        tokenizer=spec.tokenizer,
        timeout_s=spec.timeout_s,
    )
    summary = run_measure(measure_config, output, progress=progress)
    if summary.interrupted:
        raise KeyboardInterrupt
    measurements = read_measurements(output)
    notes = f"{spec.base_url} model {spec.model}"
    stack = Provenance(runner="api", hardware="unknown", notes=notes)
    fitted = fit_measurements(measurements, method="denoised", stack=stack)
    _write_fits(item_dir, "denoised", fitted)
    return {"denoised": fitted[spec.label]}


def _quality(fit: FittedCostModel) -> dict[str, Any] | None:
    return fit.quality.model_dump() if fit.quality else None


def run_bench(
    config: BenchConfig,
    results_dir: str | Path,
    *,
    config_path: str | Path = "",
    progress: bool = True,
    on_item: Callable[[ItemResult], None] | None = None,
) -> BenchResult:
    """Run every model of ``config`` not finished in ``results_dir``; never raises for one
    item's failure (it is recorded in the manifest and the result)."""
    root = Path(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.open(root, config, Path(config_path))
    run = {
        "started_at": utc_timestamp(),
        "finished_at": None,
        "command": sys.argv,
        "status": "running",
    }
    manifest.data["runs"].append(run)
    records = [(spec, manifest.item(spec, config.hardware)) for spec in config.models]
    manifest.save()
    if config.estimates:
        rows = [{**spec.model_dump(), "estimate": spec.evaluate()} for spec in config.estimates]
        with atomic_writer(root / ESTIMATES_NAME) as handle:
            json.dump(rows, handle, indent=1)
    results = []
    try:
        for spec, record in records:
            item_dir = root / record["dir"]
            if record["status"] == "done" and list(item_dir.glob("fits-*.json")):
                fits = {fit.method: fit for fit in read_fits(item_dir)}
                result = ItemResult(record["name"], spec.label, spec.kind, "done", True, None, fits)
            else:
                result = _run_item(spec, config, record, item_dir, manifest, progress)
            results.append(result)
            if on_item:
                on_item(result)
    except KeyboardInterrupt:
        run["status"] = "interrupted"
        raise
    finally:
        if run["status"] == "running":
            failed = any(r.status == "failed" for r in results)
            run["status"] = "failed" if failed else "done"
        run["finished_at"] = utc_timestamp()
        manifest.save()
    return BenchResult(root, tuple(results))


def _run_item(
    spec: LocalModelSpec | ApiModelSpec,
    config: BenchConfig,
    record: dict[str, Any],
    item_dir: Path,
    manifest: Manifest,
    progress: bool,
) -> ItemResult:
    item_dir.mkdir(parents=True, exist_ok=True)
    record.update(status="running", error=None, started_at=utc_timestamp(), finished_at=None)
    manifest.save()
    started = time.perf_counter()
    try:
        if isinstance(spec, LocalModelSpec):
            fits = _run_local(spec, config, item_dir, progress)
        else:
            fits = _run_api(spec, config, item_dir, progress)
    except KeyboardInterrupt:
        record.update(status="pending", error="interrupted", finished_at=utc_timestamp())
        raise
    except (InputError, KeyError, ValueError, OSError, httpx.HTTPError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        record.update(status="failed", error=message, finished_at=utc_timestamp())
        return ItemResult(record["name"], spec.label, spec.kind, "failed", False, message, {})
    record.update(
        status="done",
        finished_at=utc_timestamp(),
        elapsed_s=round(time.perf_counter() - started, 3),
        fits={method: _quality(fit) for method, fit in fits.items()},
    )
    return ItemResult(record["name"], spec.label, spec.kind, "done", False, None, fits)


def default_results_dir(config_path: str | Path) -> Path:
    """``bench-results/<config file stem>``: rerunning the same file resumes in it."""
    return Path("bench-results") / Path(config_path).stem
