"""The benchmark file: a YAML list of models (architectures for the local runner, or
OpenAI-compatible endpoints), hardware, grids, repeats and hardware-model estimates, validated
before anything runs (``load_config``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import UnknownNameError, get_hardware, hardware_catalog
from idealized_runtime.core.config_files import BaseUrl, load_yaml_config
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    MAX_TOKENS,
    Dtype,
)

LOCAL_GRIDS = ("quick", "helm")
LOCAL_FIT_METHODS = ("default", "helm")
CPU_HARDWARE = "cpu"  # profiling on the host CPU: no accelerator, so no cost figures


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
    base_url: BaseUrl
    model: str = Field(min_length=1, description="model name the server expects")
    name: str | None = Field(default=None, description="label (default: model)")
    api_key_env: str | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    grid: str | None = Field(default=None, description="quick, helm-synthetic or a points file")
    repeats: int | None = Field(default=None, ge=1, le=1000)
    concurrency: int = Field(default=1, ge=1, le=1024)
    tokenizer: str | None = None
    timeout_s: float = Field(default=120.0, gt=0)

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
    config = load_yaml_config(
        path,
        BenchConfig,
        what="benchmark file",
        expected="expected a mapping with a 'models' (or 'estimates') list",
        skip=("local", "api"),
    )
    _check_runnable(config, Path(path))
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
                load_grid(api_grid(spec, config))
            except InputError as error:
                raise InputError(f"models.{index}.grid: {error}", path=str(path)) from None


def api_grid(spec: ApiModelSpec, config: BenchConfig) -> str:
    return spec.grid or (config.grid if config.grid != "helm" else "helm-synthetic")
