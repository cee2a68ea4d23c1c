"""Batch benchmarks: a YAML file lists models (architectures for the local runner, or
OpenAI-compatible endpoints), hardware, grids and repeats; ``run_bench`` profiles or measures
each and fits the timings, through the same library functions as the ``profile``, ``measure``
and ``fit`` commands.

Results folder (one per benchmark run; rerunning into it resumes)::

    manifest.json                   versions, hardware, command lines, timestamps, item status
    items/<kind>-<name>/measurements.csv (+ .meta.json)   local profile      (kind = local)
    items/<kind>-<name>/timings.jsonl                      raw API timings    (kind = api)
    items/<kind>-<name>/fits-<method>.json                 one fit file per method
    estimates.json                  the hardware model's estimates of the ``estimates`` list

An item is ``done`` once its fit files are written; a rerun skips done items and lets the
profiler / timing client resume the others from the rows already on disk. A failed item does
not stop the others; the run then ends with one error line and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from idealized_runtime import __version__
from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import UnknownNameError, get_hardware, hardware_catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import (
    MAX_TOKENS,
    Architecture,
    Deployment,
    Dtype,
    FittedCostModel,
    Provenance,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "idealized-runtime/bench"
LOCAL_GRIDS = ("quick", "helm")
LOCAL_FIT_METHODS = ("default", "helm")
CPU_HARDWARE = "cpu"  # profiling on the host CPU: no accelerator, so no cost figures
REACHABILITY_TIMEOUT_S = 5.0

ItemStatus = Literal["pending", "running", "done", "failed"]


# --- configuration -----------------------------------------------------------------------------


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LocalModelSpec(_Spec):
    """An architecture profiled with random weights on the local runner."""

    kind: Literal["local"] = "local"
    architecture: str = Field(min_length=1)
    name: str | None = Field(default=None, description="label (default: the architecture)")
    grid: str | None = Field(default=None, description="quick or helm (default: the file's)")
    repeats: int | None = Field(default=None, ge=1, le=1000)
    warmup: int | None = Field(default=None, ge=0, le=100)
    layers: int | None = Field(default=None, ge=1, description="profile this many layers")
    dtype: Dtype | None = None

    @field_validator("architecture")
    @classmethod
    def _known(cls, value: str) -> str:
        load_architecture(value)  # an InputError (a ValueError) lists the known names
        return value

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: str | None) -> str | None:
        if value is not None and value not in LOCAL_GRIDS:
            raise ValueError(f"local grid must be one of {', '.join(LOCAL_GRIDS)}")
        return value

    @model_validator(mode="after")
    def _layers_in_range(self) -> LocalModelSpec:
        if self.layers is not None:
            total = load_architecture(self.architecture).num_layers
            if self.layers > total:
                raise ValueError(f"layers must be in [1, {total}] for {self.architecture!r}")
        return self

    @property
    def label(self) -> str:
        return self.name or self.architecture


class ApiModelSpec(_Spec):
    """An OpenAI-compatible endpoint timed as a black box."""

    kind: Literal["api"] = "api"
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1, description="model name the server expects")
    name: str | None = Field(default=None, description="label (default: model)")
    api_key_env: str | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    grid: str | None = Field(default=None, description="quick, helm-synthetic or a points file")
    repeats: int | None = Field(default=None, ge=1, le=1000)
    concurrency: int = Field(default=1, ge=1, le=1024)
    tokenizer: str | None = None
    timeout_s: float = Field(default=120.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http(s):// URL, got {value!r}")
        return value

    @property
    def label(self) -> str:
        return self.name or self.model


ModelSpec = Annotated[LocalModelSpec | ApiModelSpec, Field(discriminator="kind")]
ESTIMATES_NAME = "estimates.json"


def _known_stack(value: str | None) -> str | None:
    if value is None:
        return None
    from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

    return get_stack(value).name  # an InputError (a ValueError) lists the known stacks


class EstimateSpec(_Spec):
    """One request estimated by the hardware model, no profile: what ``estimate --arch``
    prints, at any precision (``weights``, ``kv_cache``, ``activations``)."""

    architecture: str = Field(min_length=1, description="catalog name, config.json or folder")
    hardware: str = Field(min_length=1)
    prompt_tokens: int = Field(ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(ge=1, le=MAX_TOKENS)
    batch_size: int = Field(default=1, ge=1, le=4096)
    tp: int | None = Field(default=None, ge=1, le=1024)
    weights: str | None = None
    kv_cache: str | None = None
    activations: str | None = None
    ideal: bool = False
    stack: str | None = Field(default=None, description="reference stack (default: the file's)")

    @field_validator("stack")
    @classmethod
    def _stack(cls, value: str | None) -> str | None:
        return _known_stack(value)

    def evaluate(self) -> dict[str, Any]:
        """The estimate as ``estimate --arch ... --json`` prints it (InputError if refused)."""
        from idealized_runtime.core.catalog import get_hardware
        from idealized_runtime.cost_model.hardware.estimate import estimate_request

        arch = load_architecture(self.architecture)
        result, _, calibration = estimate_request(self, arch, get_hardware(self.hardware))
        return {**result.to_dict(), "calibration": calibration or None}


class BenchConfig(_Spec):
    name: str | None = None
    hardware: str = Field(
        default=CPU_HARDWARE,
        description="accelerator the local profiles run on (a hardware catalog name, or cpu)",
    )
    device: str = Field(default="cpu", description="torch device of the local runner")
    dtype: Dtype = "float32"
    grid: str = "quick"
    repeats: int = Field(default=3, ge=1, le=1000)
    warmup: int = Field(default=1, ge=0, le=100)
    stack: str | None = Field(
        default=None,
        description="reference stack: each local model also gets the hardware model's runtime "
        "on `hardware` with this stack, and it is the estimates' default stack "
        "(`idealized-runtime stacks` lists them)",
    )
    models: list[ModelSpec] = Field(default_factory=list)
    estimates: list[EstimateSpec] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _infer_kinds(cls, data: Any) -> Any:
        """An entry with ``base_url`` is an API, one with ``architecture`` a local model."""
        if isinstance(data, dict) and isinstance(data.get("models"), list):
            models = []
            for entry in data["models"]:
                if isinstance(entry, dict) and "kind" not in entry:
                    entry = {**entry, "kind": "api" if "base_url" in entry else "local"}
                models.append(entry)
            data = {**data, "models": models}
        return data

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", value):
            raise ValueError(f"device must be cpu or cuda (or cuda:N), got {value!r}")
        return value

    @field_validator("stack")
    @classmethod
    def _stack(cls, value: str | None) -> str | None:
        return _known_stack(value)

    @model_validator(mode="after")
    def _stack_needs_hardware(self) -> BenchConfig:
        if self.stack is not None and self.models and self.hardware == CPU_HARDWARE:
            raise ValueError("stack needs hardware: a GPU of the hardware catalog, not cpu")
        return self

    @model_validator(mode="before")
    @classmethod
    def _estimates_inherit_stack(cls, data: Any) -> Any:
        """An estimate without its own ``stack`` uses the file's."""
        if isinstance(data, dict) and data.get("stack") and isinstance(data.get("estimates"), list):
            estimates = [
                {"stack": data["stack"], **e} if isinstance(e, dict) and not e.get("ideal") else e
                for e in data["estimates"]
            ]
            data = {**data, "estimates": estimates}
        return data

    @field_validator("hardware")
    @classmethod
    def _hardware(cls, value: str) -> str:
        if value != CPU_HARDWARE and value not in hardware_catalog():
            known = ", ".join([CPU_HARDWARE, *sorted(hardware_catalog())])
            raise ValueError(f"unknown hardware {value!r}; known: {known}")
        return value

    @model_validator(mode="after")
    def _unique_items(self) -> BenchConfig:
        if not self.models and not self.estimates:
            raise ValueError("give at least one entry in 'models' or 'estimates'")
        seen: set[str] = set()
        for spec in self.models:
            key = item_key(spec)
            if key in seen:
                raise ValueError(f"two models with the same label {spec.label!r} and kind")
            seen.add(key)
        return self


def item_key(spec: LocalModelSpec | ApiModelSpec) -> str:
    """Folder name of a model's item: kind and a file-safe label."""
    return f"{spec.kind}-{re.sub(r'[^A-Za-z0-9._-]+', '_', spec.label)}"


def load_config(path: str | Path) -> BenchConfig:
    """Read and validate a benchmark file; any problem is one InputError line."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such benchmark file", path=str(path))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"not valid YAML{where}", path=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping with a 'models' (or 'estimates') list", path=str(path))
    try:
        config = BenchConfig.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"] if part not in ("local", "api"))
        message = first["msg"].removeprefix("Value error, ")
        raise InputError(f"{where}: {message}" if where else message, path=str(path)) from None
    _check_runnable(config, path)
    return config


def _check_runnable(config: BenchConfig, path: Path) -> None:
    """What the schema cannot see but would fail an item (or the run) later: the device, the
    dtype on it, the API grids."""
    from idealized_runtime.timing.grids import load_grid

    local = [spec for spec in config.models if isinstance(spec, LocalModelSpec)]
    if local and config.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(
                f"device: {config.device}: no CUDA device is available (torch sees none)",
                path=str(path),
            )
    for index, estimate in enumerate(config.estimates):
        try:  # refused pairs (fp8 compute without fp8 tensor cores, no fit) fail here, early
            estimate.evaluate()
        except (InputError, UnknownNameError) as error:
            raise InputError(f"estimates.{index}: {error}", path=str(path)) from None
    for index, spec in enumerate(config.models):
        if isinstance(spec, LocalModelSpec):
            if config.device == "cpu" and (spec.dtype or config.dtype) == "float16":
                raise InputError(
                    f"models.{index}: float16 is not supported on CPU; use float32 or bfloat16",
                    path=str(path),
                )
        else:
            try:
                load_grid(_api_grid(spec, config))
            except InputError as error:
                raise InputError(f"models.{index}.grid: {error}", path=str(path)) from None


def _api_grid(spec: ApiModelSpec, config: BenchConfig) -> str:
    return spec.grid or (config.grid if config.grid != "helm" else "helm-synthetic")


# --- manifest ----------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def environment_versions() -> dict[str, str]:
    versions = {"idealized-runtime": __version__, "python": platform.python_version()}
    for module in ("torch", "numpy", "scipy"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            continue
    return versions


def host_description(config: BenchConfig) -> dict[str, Any]:
    host: dict[str, Any] = {
        "hardware": config.hardware,
        "device": config.device,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "system": platform.platform(),
    }
    try:
        import torch

        if torch.cuda.is_available():
            host["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return host


@dataclass
class Manifest:
    """The results folder's manifest.json, rewritten atomically after every change."""

    path: Path
    data: dict[str, Any]

    @classmethod
    def open(cls, results_dir: Path, config: BenchConfig, config_path: Path) -> Manifest:
        path = results_dir / MANIFEST_NAME
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise InputError(f"unreadable manifest ({error.msg})", path=str(path)) from None
        else:
            data = {"format": MANIFEST_FORMAT, "version": 1, "created_at": _now(), "runs": []}
        data.update(
            config=config.model_dump(mode="json"),
            config_path=str(config_path),
            versions=environment_versions(),
            host=host_description(config),
        )
        data.setdefault("items", [])
        for run in data.get("runs", []):
            if run.get("status") == "running":  # that process was killed before it could say
                run["status"] = "killed"
        return cls(path, data)

    def item(self, spec: LocalModelSpec | ApiModelSpec, hardware: str) -> dict[str, Any]:
        """The item record of ``spec``, created pending if new. A done item whose settings
        changed is reset: its files were made with other settings."""
        key = item_key(spec)
        settings = spec.model_dump(mode="json")
        for record in self.data["items"]:
            if record["dir"] == f"items/{key}":
                if record.get("spec") != settings and record["status"] != "done":
                    # Not finished: resume with the new settings (the profiler refuses to mix
                    # settings in one file; the timing client's rows do not depend on the URL).
                    record["spec"] = settings
                elif record.get("spec") != settings:
                    raise InputError(
                        f"model {spec.label!r} changed since its results were written; "
                        "use a new results folder (-o)",
                        path=str(self.path),
                    )
                return record
        record = {
            "name": key,
            "kind": spec.kind,
            "model": spec.label,
            "architecture": spec.architecture if isinstance(spec, LocalModelSpec) else None,
            "hardware": hardware if isinstance(spec, LocalModelSpec) else None,
            "dir": f"items/{key}",
            "spec": settings,
            "status": "pending",
            "error": None,
            "started_at": None,
            "finished_at": None,
            "fits": {},
        }
        self.data["items"].append(record)
        return record

    def save(self) -> None:
        self.data["updated_at"] = _now()
        with atomic_writer(self.path) as handle:
            json.dump(self.data, handle, indent=2)
            handle.write("\n")


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
    grid = _api_grid(spec, config)
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
    run = {"started_at": _now(), "finished_at": None, "command": sys.argv, "status": "running"}
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
        run["finished_at"] = _now()
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
    record.update(status="running", error=None, started_at=_now(), finished_at=None)
    manifest.save()
    started = time.perf_counter()
    try:
        if isinstance(spec, LocalModelSpec):
            fits = _run_local(spec, config, item_dir, progress)
        else:
            fits = _run_api(spec, config, item_dir, progress)
    except KeyboardInterrupt:
        record.update(status="pending", error="interrupted", finished_at=_now())
        raise
    except (InputError, KeyError, ValueError, OSError, httpx.HTTPError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        record.update(status="failed", error=message, finished_at=_now())
        return ItemResult(record["name"], spec.label, spec.kind, "failed", False, message, {})
    record.update(
        status="done",
        finished_at=_now(),
        elapsed_s=round(time.perf_counter() - started, 3),
        fits={method: _quality(fit) for method, fit in fits.items()},
    )
    return ItemResult(record["name"], spec.label, spec.kind, "done", False, None, fits)


def default_results_dir(config_path: str | Path) -> Path:
    """``bench-results/<config file stem>``: rerunning the same file resumes in it."""
    return Path("bench-results") / Path(config_path).stem
