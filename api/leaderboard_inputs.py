"""Gather ``LeaderboardInputs`` from the service database; ``idealized_runtime.leaderboard``
computes the board and ``idealized_runtime.report.render`` renders it.

Models are those with a stored fit (newest idealized and denoised fit each); scenario results
come from the capability scores (metrics as ``scenario_results_from_scores`` reads them);
workloads are the bundled HELM scenario groups; cost rates the stored hardware."""

from __future__ import annotations

from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.estimation import default_hardware_name
from idealized_runtime.api.schemas import score_in_range
from idealized_runtime.core.catalog import helm_model_shapes
from idealized_runtime.leaderboard.rows import CostRates, LeaderboardInputs, ModelInput
from idealized_runtime.report.inputs import helm_workloads, scenario_results_from_scores


def database_inputs(session: Session) -> LeaderboardInputs:
    idealized = crud.current_fits(session, "idealized")
    denoised = crud.current_fits(session, "denoised")
    architectures = crud.all_architectures(session)
    hardware = crud.all_hardware(session)
    shapes = helm_model_shapes()
    models = []
    for name in sorted(set(idealized) | set(denoised)):
        ideal_fit = crud.fit_model(idealized[name]) if name in idealized else None
        noisy_fit = crud.fit_model(denoised[name]) if name in denoised else None
        architecture = architectures.get(name) or architectures.get(shapes.get(name, ""))
        hardware_name = default_hardware_name(ideal_fit) if ideal_fit else None
        models.append(
            ModelInput(
                name=name,
                architecture=architecture,
                idealized_fit=ideal_fit,
                denoised_fit=noisy_fit,
                hardware=hardware_name if hardware_name in hardware else None,
            )
        )
    scores = [
        (r.model, r.scenario, r.metric, r.value)
        for r in crud.all_capability_scores(session)
        if score_in_range(r.metric, r.value)  # rows stored before the ranges were checked
    ]
    return LeaderboardInputs(
        models=tuple(models),
        scenario_results=scenario_results_from_scores(scores),
        workloads=helm_workloads(),
        cost_rates={name: CostRates.from_hardware(hw) for name, hw in hardware.items()},
        source="idealized-runtime service database",
    )
