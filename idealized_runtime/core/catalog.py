"""Read the data shipped in ``data/`` (installed as ``idealized_runtime.data``).

The package never reads ../shared at run time: everything it needs was copied into data/.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from idealized_runtime.core.types import Architecture, Hardware, Measurement, Provenance

REFERENCE_DIR = "reference"
# mt_nlg was profiled with 35 of its 105 layers; the paper multiplied its runtimes by 3.
_LAYER_SCALED_PROFILES = {"mt_nlg": 3.0}
T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not in a catalog; the message lists what is."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return str(self.args[0])


def data_path(*parts: str) -> Path:
    """Path of a shipped data file."""
    return Path(str(resources.files("idealized_runtime.data").joinpath(*parts)))


def _load_yaml(name: str) -> Any:
    with data_path(name).open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@lru_cache(maxsize=1)
def architectures() -> dict[str, Architecture]:
    entries = _load_yaml("architectures.yaml")["architectures"]
    return {entry["name"]: Architecture(**entry) for entry in entries}


def _by_name(entries: Mapping[str, T], name: str, kind: str) -> T:
    """``entries[name]``, or an ``UnknownNameError`` that lists the known names."""
    try:
        return entries[name]
    except KeyError:
        known = ", ".join(sorted(entries))
        raise UnknownNameError(f"unknown {kind} {name!r}; known: {known}") from None


def get_architecture(name: str) -> Architecture:
    return _by_name(architectures(), name, "architecture")


@lru_cache(maxsize=1)
def hardware_catalog() -> dict[str, Hardware]:
    path = data_path("hardware.yaml")
    if not path.exists():
        return {}
    entries = _load_yaml("hardware.yaml")["hardware"]
    return {entry["name"]: Hardware(**entry) for entry in entries}


def get_hardware(name: str) -> Hardware:
    return _by_name(hardware_catalog(), name, "hardware")


@lru_cache(maxsize=1)
def helm_model_shapes() -> dict[str, str]:
    """HELM model name -> architecture name of the profile that stands for it."""
    return dict(_load_yaml("helm_models.yaml")["helm_models"])


def megatron_profile_name(model: str) -> str:
    """Architecture name of a Megatron A100 profile row: ``gptj_6b`` -> ``megatron-gptj-6b``."""
    return "megatron-" + model.replace("_", "-")


MEGATRON_A100_STACK = Provenance(
    runner="megatron-lm-2022",
    hardware="a100-80gb",
    device_name="NVIDIA A100",
    dtype="float16",
    notes="HELM efficiency paper reference profiles: fp16, batch 1, random weights",
)


def megatron_a100_measurements() -> list[Measurement]:
    """The paper's A100 Megatron grid (13 models), with mt_nlg scaled to its 105 layers."""
    rows: list[Measurement] = []
    with data_path(REFERENCE_DIR, "megatron_a100_runtimes.csv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            scale = _LAYER_SCALED_PROFILES.get(row["model"], 1.0)
            rows.append(
                Measurement(
                    model=megatron_profile_name(row["model"]),
                    num_prompt_tokens=int(row["num_prompt_tokens"]),
                    num_output_tokens=int(row["num_output_tokens"]),
                    runtime_s=float(row["runtime_s"]) * scale,
                    std_s=float(row["std_s"]) * scale,
                )
            )
    return rows


def helm_table(kind: str) -> dict[str, Any]:
    """HELM's fitted table as shipped: ``kind`` is ``idealized`` or ``denoised``."""
    if kind not in ("idealized", "denoised"):
        raise ValueError(f"kind must be 'idealized' or 'denoised', got {kind!r}")
    path = data_path(REFERENCE_DIR, f"inference_{kind}_runtimes.json")
    return json.loads(path.read_text(encoding="utf-8"))


def helm_scenarios_csv_path() -> Path:
    """Per-scenario HELM raw/idealized runtimes, token counts and accuracy."""
    return data_path(REFERENCE_DIR, "inference_runtimes_and_accuracies_all_scenarios.csv")
