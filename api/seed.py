"""Seed data.

``seed_catalog`` (run by ``serve`` and ``db upgrade``): the shipped architectures and hardware,
inserted when missing (never overwriting an edited row).
``seed_reference`` (``idealized-runtime db seed``): the bundled HELM reference: the Megatron A100
profiles as a measurement set, HELM's idealized and denoised tables as imported fits, and the
per-scenario accuracies / runtimes / token counts as capability scores. Skipped when its
measurement set exists already."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.models import ArchitectureRow, HardwareRow, MeasurementSetRow
from idealized_runtime.api.schemas import CapabilityScore
from idealized_runtime.core.catalog import (
    MEGATRON_A100_STACK,
    architectures,
    hardware_catalog,
    helm_table,
    megatron_a100_measurements,
)
from idealized_runtime.core.scenarios import helm_scenario_results

REFERENCE_SET = "helm-megatron-a100-reference"


@dataclass(frozen=True)
class SeedReport:
    architectures: int = 0
    hardware: int = 0
    measurements: int = 0
    fits: int = 0
    capability_scores: int = 0


def seed_catalog(session: Session) -> SeedReport:
    known_arch = set(session.execute(select(ArchitectureRow.name)).scalars())
    known_hw = set(session.execute(select(HardwareRow.name)).scalars())
    new_arch = [a for name, a in architectures().items() if name not in known_arch]
    new_hw = [h for name, h in hardware_catalog().items() if name not in known_hw]
    for architecture in new_arch:
        crud.add_architecture(session, architecture)
    for hardware in new_hw:
        crud.add_hardware(session, hardware)
    session.commit()
    return SeedReport(architectures=len(new_arch), hardware=len(new_hw))


def seed_reference(session: Session) -> SeedReport:
    from idealized_runtime.cost_model.fitting.helm_format import import_helm_table

    catalog = seed_catalog(session)
    existing = session.execute(
        select(MeasurementSetRow).where(MeasurementSetRow.name == REFERENCE_SET)
    ).scalar_one_or_none()
    if existing is not None:
        return catalog
    measurements = megatron_a100_measurements()
    crud.create_measurement_set(
        session,
        name=REFERENCE_SET,
        source="import",
        metadata={"source": "HELM efficiency paper (Narayanan et al. 2023), Megatron-LM on A100"},
        stack=MEGATRON_A100_STACK,
        measurements=measurements,
        created_by=None,
    )
    # HELM's idealized table was profiled on the A100 Megatron stack: record it, so that cost
    # variants know the hardware. The denoised table comes from API timings: no stack.
    fits = [
        fit.model_copy(update={"stack": MEGATRON_A100_STACK})
        for fit in import_helm_table(helm_table("idealized"), "helm").values()
    ]
    fits += list(import_helm_table(helm_table("denoised"), "denoised").values())
    for fit in fits:
        crud.add_fit(session, fit, source="import", measurement_set_id=None)
    scores: list[CapabilityScore] = []
    for result in helm_scenario_results():
        for metric, value in (
            ("exact_match", result.accuracy),
            ("raw_runtime_s", result.raw_runtime_s),
            ("idealized_runtime_s", result.idealized_runtime_s),
            ("mean_prompt_tokens", result.mean_prompt_tokens),
            ("mean_output_tokens", result.mean_output_tokens),
        ):
            if value is not None:
                scores.append(
                    CapabilityScore(
                        model=result.model, scenario=result.scenario, metric=metric, value=value
                    )
                )
    written = crud.upsert_capability_scores(session, scores)
    session.commit()
    return SeedReport(
        architectures=catalog.architectures,
        hardware=catalog.hardware,
        measurements=len(measurements),
        fits=len(fits),
        capability_scores=written,
    )
