"""Seed data.

``seed_catalog`` (run by ``serve`` and ``db upgrade``): the shipped architectures and hardware,
inserted when missing (never overwriting an edited row).
``seed_reference`` (``idealized-runtime db seed``): the bundled HELM reference: the Megatron A100
profiles as a measurement set, HELM's idealized and denoised tables as imported fits, and the
per-scenario accuracies / runtimes / token counts as capability scores. Skipped when its
measurement set exists already.
``store_catalog`` and ``store_scenario_results`` store any architectures, hardware and scenario
results alike; the report's database (``api.report_database``) stores through them."""

from __future__ import annotations

from collections.abc import Iterable
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
from idealized_runtime.core.scenarios import ScenarioResult, helm_scenario_results
from idealized_runtime.core.types import Architecture, Hardware

REFERENCE_SET = "helm-megatron-a100-reference"
# Metric names of the HELM scenario results stored as capability scores; they are the names
# ``idealized_runtime.report.inputs.scenario_results_from_scores`` reads back.
SCORE_FIELDS = {
    "exact_match": "accuracy",
    "raw_runtime_s": "raw_runtime_s",
    "idealized_runtime_s": "idealized_runtime_s",
    "mean_prompt_tokens": "mean_prompt_tokens",
    "mean_output_tokens": "mean_output_tokens",
}


@dataclass(frozen=True)
class SeedReport:
    architectures: int = 0
    hardware: int = 0
    measurements: int = 0
    fits: int = 0
    capability_scores: int = 0


def store_catalog(
    session: Session, architectures: Iterable[Architecture], hardware: Iterable[Hardware]
) -> SeedReport:
    """The architectures and hardware whose names are not stored yet, added (a stored row is
    never overwritten); how many of each."""
    known_arch = set(session.execute(select(ArchitectureRow.name)).scalars())
    known_hw = set(session.execute(select(HardwareRow.name)).scalars())
    new_arch = [a for a in architectures if a.name not in known_arch]
    new_hw = [h for h in hardware if h.name not in known_hw]
    for architecture in new_arch:
        crud.add_architecture(session, architecture)
    for accelerator in new_hw:
        crud.add_hardware(session, accelerator)
    return SeedReport(architectures=len(new_arch), hardware=len(new_hw))


def store_scenario_results(session: Session, results: Iterable[ScenarioResult]) -> int:
    """HELM's per-scenario accuracies, runtimes and token counts as capability scores (upserted);
    how many were written."""
    # One result per (model, scenario): the scenario loader keeps one run of each.
    scores = [
        CapabilityScore(model=r.model, scenario=r.scenario, metric=metric, value=value)
        for r in results
        for metric, attribute in SCORE_FIELDS.items()
        if (value := getattr(r, attribute)) is not None
    ]
    return crud.upsert_capability_scores(session, scores) if scores else 0


def seed_catalog(session: Session) -> SeedReport:
    report = store_catalog(session, architectures().values(), hardware_catalog().values())
    session.commit()
    return report


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
    written = store_scenario_results(session, helm_scenario_results())
    session.commit()
    return SeedReport(
        architectures=catalog.architectures,
        hardware=catalog.hardware,
        measurements=len(measurements),
        fits=len(fits),
        capability_scores=written,
    )
