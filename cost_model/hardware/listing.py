"""Every stack the estimates and simulations can run on, in one listing (``stacks``):

- reference stacks (``hardware.stacks``): the roofline hardware model with a stack's fitted
  efficiencies, from published figures; their sources and held-out errors;
- engine stacks (``hardware.engines``): an engine's measured kernels and its scheduler (token
  budget, chunked prefill, admission); their kernel-database version per GPU and the kernel
  fits' held-out errors.

Each entry is a JSON-ready dict with ``kind`` ("reference" or "engine") and ``default``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

REFERENCE, ENGINE = "reference", "engine"


def stack_listing() -> list[dict[str, Any]]:
    """The reference stacks (as their files hold them), then the engine stacks (their
    description, scheduler, provenance and per-GPU kernel versions and errors; not the kernel
    tables)."""
    from idealized_runtime.cost_model.hardware.engines.catalog import shipped_engines
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, shipped_stacks

    listing = [
        {**stack.to_json(), "kind": REFERENCE, "default": name == DEFAULT_STACK}
        for name, stack in shipped_stacks().items()
    ]
    for name, engine in shipped_engines().items():
        listing.append(
            {
                "name": name,
                "kind": ENGINE,
                "default": False,
                "description": engine.description,
                "hardware": sorted(engine.gpus),
                "scheduler": asdict(engine.scheduler),
                # Defaults the engine sizes by the GPU (SGLang's budget and graphs by memory)
                "scheduler_by_gpu": engine.gpu_defaults,
                "kernels": {
                    gpu: {"version": kernels.version, "errors": kernels.errors}
                    for gpu, kernels in sorted(engine.gpus.items())
                },
                "provenance": engine.provenance,
                "notes": engine.notes,
            }
        )
    return listing
