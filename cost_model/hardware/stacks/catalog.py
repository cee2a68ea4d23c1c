"""The shipped reference stacks: ``StackCalibration`` values stored in ``data/stacks/*.json``.

``get_stack`` finds one by name or alias (``DEFAULT_STACK`` is what ``estimate --arch`` uses);
``save_stack`` writes one; ``python -m idealized_runtime.cost_model.hardware.stacks`` regenerates
them all from the published table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from idealized_runtime.core.catalog import data_path
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import Efficiency
from idealized_runtime.cost_model.hardware.stacks.fit import format_efficiency, kernel_format

STACKS_DIR = "stacks"
HELM_STACK = "helm-megatron-2022"
# The estimate default for ``--arch``: the modern stack best calibrated for a batch-1 request on
# today's GPUs (batch-1 figures from four sources on A100 and H100, TP 1-8, four weight formats;
# held-out errors within the targets). LMDeploy's are lower but come from one source on one GPU.
DEFAULT_STACK = "pytorch-compiled"
ALIASES: dict[str, str] = {"a100-megatron-2022": HELM_STACK}


# --- the stack object -----------------------------------------------------------------------


@dataclass(frozen=True)
class StackCalibration:
    """A named stack: its time-model parameters, what they were fitted on, and their errors."""

    name: str
    description: str
    efficiency: Efficiency
    engines: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()
    errors: dict = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    notes: str = ""
    # Per quantized weight format: kernel factors on ``efficiency`` (``FORMAT_FACTORS``).
    format_factors: dict[str, dict[str, float]] = field(default_factory=dict)

    def efficiency_for(self, weights: str) -> Efficiency:
        """The stack's efficiency for weights in ``weights`` (its format's kernel factors when
        calibrated; else the 16-bit one, the format counted by its bytes and FLOPs alone)."""
        return format_efficiency(self.efficiency, self.format_factors.get(kernel_format(weights)))

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "aliases": list(self.aliases),
            "engines": list(self.engines),
            "hardware": list(self.hardware),
            "models": list(self.models),
            "efficiency": self.efficiency.to_dict(),
            "format_factors": self.format_factors,
            "sources": list(self.sources),
            "rows": list(self.rows),
            "errors": self.errors,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> StackCalibration:
        try:
            return cls(
                name=data["name"],
                description=data.get("description", ""),
                efficiency=Efficiency.from_dict(data["efficiency"]),
                engines=tuple(data.get("engines", ())),
                hardware=tuple(data.get("hardware", ())),
                models=tuple(data.get("models", ())),
                sources=tuple(data.get("sources", ())),
                rows=tuple(data.get("rows", ())),
                errors=dict(data.get("errors", {})),
                aliases=tuple(data.get("aliases", ())),
                notes=data.get("notes", ""),
                format_factors={
                    weights: {name: float(v) for name, v in factors.items()}
                    for weights, factors in dict(data.get("format_factors", {})).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InputError(f"not a stack file: missing or bad {error}") from None

    def headline_error(self, kind: str = "decode") -> float | None:
        """Median |error| of ``kind`` figures held out by source (else by model, else in
        sample): the number to rank stacks by."""
        for split in ("leave_one_source_out", "leave_one_model_out", "in_sample"):
            value = self.errors.get(split, {}).get(kind, {}).get("median")
            if value is not None:
                return float(value)
        return None


# --- shipped stacks -------------------------------------------------------------------------


def stacks_dir() -> Path:
    return data_path(STACKS_DIR)


@lru_cache(maxsize=1)
def shipped_stacks() -> dict[str, StackCalibration]:
    """Every stack in ``data/stacks/``, by name."""
    found = {}
    for path in sorted(stacks_dir().glob("*.json")):
        stack = StackCalibration.from_json(json.loads(path.read_text(encoding="utf-8")))
        found[stack.name] = stack
    return found


def stack_names() -> list[str]:
    return sorted(shipped_stacks())


def get_stack(name: str) -> StackCalibration:
    """A shipped stack by name or alias; unknown names raise a one-line ``InputError``."""
    stacks = shipped_stacks()
    resolved = ALIASES.get(name, name)
    if resolved not in stacks:
        raise InputError(f"unknown stack {name!r}; known: {', '.join(sorted(stacks))}")
    return stacks[resolved]


def save_stack(stack: StackCalibration, directory: str | Path) -> Path:
    path = Path(directory) / f"{stack.name}.json"
    with atomic_writer(path) as handle:
        json.dump(stack.to_json(), handle, indent=2)
        handle.write("\n")
    return path
