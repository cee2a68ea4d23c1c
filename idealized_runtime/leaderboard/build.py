"""Building the leaderboard from its inputs: runtimes, cost and accuracy per model and scenario,
the accuracy-vs-runtime Pareto frontiers of the paper's main figure, and the JSON payload the
REST API serves.

Two granularities, because they answer different questions:

* **scenario rows**: one per (HELM scenario, model that HELM ran on it). They carry accuracy and
  the raw (API-measured) runtime, so they feed the efficiency-vs-capability frontiers.
* **workload rows**: one per (scenario group, model with a fit). Every fitted model is evaluated
  at the same mean prompt/output tokens, so these are comparable across all models, including
  ones HELM never ran (a locally profiled architecture).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from idealized_runtime.core.scenarios import ScenarioResult, Workload, helm_workloads
from idealized_runtime.core.types import (
    Precision,
    Provenance,
)
from idealized_runtime.cost_model.hardware.stacks.catalog import HELM_STACK
from idealized_runtime.leaderboard.current_models import (
    CurrentModelBoard,
    CurrentModelsSpec,
    current_model_board,
)
from idealized_runtime.leaderboard.groups import ModelGroup, group_models
from idealized_runtime.leaderboard.metrics import (
    cost_per_1000,
    mean_of_present,
    pareto_front,
    runtime_at,
)
from idealized_runtime.leaderboard.rows import (
    FRONTIER_KINDS,
    CostRates,
    FrontierKind,
    FrontierPoint,
    LeaderboardInputs,
    ModelInput,
    ModelRow,
    ScenarioRow,
    StackComparison,
    WorkloadRow,
)
from idealized_runtime.leaderboard.stack_comparison import (
    compare_stacks,
    fit_stack_name,
    stack_label,
)


@dataclass(frozen=True)
class Leaderboard:
    models: tuple[ModelRow, ...]
    scenario_rows: tuple[ScenarioRow, ...]
    workload_rows: tuple[WorkloadRow, ...]
    # kind -> scenario -> the scenario's points (all models with accuracy and that runtime)
    frontier_points: Mapping[FrontierKind, Mapping[str, tuple[FrontierPoint, ...]]]
    inputs: LeaderboardInputs
    stack_comparison: StackComparison | None = None  # with build_leaderboard(..., stacks=...)
    groups: tuple[ModelGroup, ...] = ()  # ``models`` by architecture (``group_models``)
    # Today's models on a chosen GPU and stack (build_leaderboard(..., current_models=...)).
    current_models: CurrentModelBoard | None = None

    def group_keys(self) -> dict[str, str]:
        """Model name -> the key of its group."""
        return {name: group.key for group in self.groups for name in group.names}

    def frontier(self, kind: FrontierKind, scenario: str) -> list[str]:
        """Models on the accuracy-vs-runtime frontier of a scenario, fastest first."""
        points = self.frontier_points[kind].get(scenario, ())
        return [point.model for point in points if point.on_frontier]

    def frontier_scenarios(self) -> list[str]:
        """Scenarios with at least one point on either runtime axis, sorted."""
        return sorted({s for points in self.frontier_points.values() for s in points})


def _scenario_rows(
    results: Sequence[ScenarioResult], models: Mapping[str, ModelInput]
) -> list[ScenarioRow]:
    rows = []
    for result in results:
        model = models.get(result.model)
        # HELM's reported idealized runtime averages the fit over the scenario's actual requests;
        # a fit at the mean token counts is the fallback where HELM did not report one.
        fit = model.idealized_fit if model else None
        if result.idealized_runtime_s is not None:
            idealized, source = result.idealized_runtime_s, "helm-reported"
            stack = HELM_STACK  # HELM averaged its Megatron A100 fits over the requests
        else:
            idealized = runtime_at(fit, result.mean_prompt_tokens, result.mean_output_tokens)
            source = "fit" if idealized is not None else None
            stack = stack_label(fit.stack) if idealized is not None and fit else None
        denoised = runtime_at(
            model.denoised_fit if model else None,
            result.mean_prompt_tokens,
            result.mean_output_tokens,
        )
        rows.append(
            ScenarioRow(
                scenario=result.scenario,
                group=result.group,
                model=result.model,
                prompt_tokens=result.mean_prompt_tokens,
                output_tokens=result.mean_output_tokens,
                idealized_runtime_s=idealized,
                idealized_source=source,
                denoised_runtime_s=denoised,
                raw_runtime_s=result.raw_runtime_s,
                accuracy=result.accuracy,
                stack=stack,
            )
        )
    return rows


def _frontier_points(
    rows: Sequence[ScenarioRow], kind: FrontierKind
) -> dict[str, tuple[FrontierPoint, ...]]:
    """Per scenario, every model with an accuracy and a ``kind`` runtime, marked on/off front
    (one result per (model, scenario): the scenario loader keeps one run of each)."""
    by_scenario: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for row in rows:
        runtime = row.idealized_runtime_s if kind == "idealized" else row.raw_runtime_s
        if runtime is None or row.accuracy is None:
            continue
        by_scenario[row.scenario][row.model] = (runtime, row.accuracy)
    points = {}
    for scenario, values in by_scenario.items():
        front = pareto_front(values)
        points[scenario] = tuple(
            FrontierPoint(model, runtime, accuracy, model in front)
            for model, (runtime, accuracy) in sorted(values.items(), key=lambda kv: kv[1])
        )
    return points


def _workload_rows(
    workloads: Sequence[Workload],
    models: Sequence[ModelInput],
    gpus: Mapping[str, int | None],
    rates: Mapping[str, CostRates],
) -> list[WorkloadRow]:
    rows = []
    for model in models:
        if model.idealized_fit is None and model.denoised_fit is None:
            continue
        for workload in workloads:
            p, o = workload.mean_prompt_tokens, workload.mean_output_tokens
            idealized = runtime_at(model.idealized_fit, p, o)
            rows.append(
                WorkloadRow(
                    workload=workload.name,
                    model=model.name,
                    prompt_tokens=p,
                    output_tokens=o,
                    idealized_runtime_s=idealized,
                    denoised_runtime_s=runtime_at(model.denoised_fit, p, o),
                    num_gpus=gpus[model.name],
                    cost=cost_per_1000(
                        idealized, gpus[model.name], rates.get(model.hardware or "")
                    ),
                    stack=fit_stack_name(model.idealized_fit) if idealized is not None else None,
                )
            )
    return rows


def accelerators_needed(model: ModelInput, rates: Mapping[str, CostRates]) -> int | None:
    """The model's accelerator count: given, else the serving model's minimum for its shape on
    its hardware (batch 1, full context), else unknown."""
    if model.num_gpus is not None:
        return model.num_gpus
    if model.architecture is None or model.hardware is None:
        return None
    try:
        from idealized_runtime.core.catalog import get_hardware
        from idealized_runtime.cost_model.hardware.planner import min_gpus

        hardware = get_hardware(model.hardware)
    except (ImportError, KeyError):
        return None  # serving model or hardware entry not available: leave unknown
    dtype = (
        model.idealized_fit.stack.dtype
        if model.idealized_fit and model.idealized_fit.stack
        else "float16"
    )
    try:
        return int(
            min_gpus(
                model.architecture,
                hardware,
                context_tokens=model.architecture.max_context,
                batch_size=1,
                precision=Precision.from_dtype(dtype),
            )
        )
    except ValueError:
        return None  # does not fit on any supported count of this accelerator


def build_leaderboard(
    inputs: LeaderboardInputs,
    stacks: Sequence[str] = (),
    *,
    current_models: CurrentModelsSpec | None = None,
) -> Leaderboard:
    """Rows, per-model summaries and frontiers from loaded inputs; with ``stacks`` (reference
    stack names, the first the ratios' baseline) also the models side by side under them; with
    ``current_models`` the board of today's models over the same workloads."""
    comparison = compare_stacks(inputs, stacks) if stacks else None
    current = None
    if current_models is not None:
        current = current_model_board(current_models, inputs.workloads or helm_workloads())
    models = {model.name: model for model in inputs.models}
    scenario_rows = _scenario_rows(inputs.scenario_results, models)
    frontier_points = {kind: _frontier_points(scenario_rows, kind) for kind in FRONTIER_KINDS}
    on_front = {
        kind: {
            (scenario, point.model)
            for scenario, points in frontier_points[kind].items()
            for point in points
            if point.on_frontier
        }
        for kind in FRONTIER_KINDS
    }
    scenario_rows = [
        _with_frontier(
            row, {kind: (row.scenario, row.model) in on_front[kind] for kind in on_front}
        )
        for row in scenario_rows
    ]
    gpus = {model.name: accelerators_needed(model, inputs.cost_rates) for model in inputs.models}
    workload_rows = _workload_rows(inputs.workloads, inputs.models, gpus, inputs.cost_rates)

    rows_by_model: dict[str, list[ScenarioRow]] = defaultdict(list)
    for row in scenario_rows:
        rows_by_model[row.model].append(row)
    workloads_by_model: dict[str, list[WorkloadRow]] = defaultdict(list)
    for row in workload_rows:
        workloads_by_model[row.model].append(row)
    # Models seen only in scenario results (HELM ran them, nobody fitted them) are ranked too.
    names = list(models) + sorted(set(rows_by_model) - set(models))
    summaries = []
    for name in names:
        model = models.get(name, ModelInput(name=name))
        scenarios, workloads = rows_by_model.get(name, []), workloads_by_model.get(name, [])
        # A row without any value is no result (the database stores none for it).
        scenarios = [row for row in scenarios if _has_values(row)]
        idealized = mean_of_present(row.idealized_runtime_s for row in workloads)
        summaries.append(
            ModelRow(
                model=name,
                architecture=model.architecture.name if model.architecture else None,
                num_parameters=model.num_parameters,
                num_gpus=gpus.get(name),
                hardware=model.hardware,
                idealized_runtime_s=idealized,
                denoised_runtime_s=mean_of_present(row.denoised_runtime_s for row in workloads),
                raw_runtime_s=mean_of_present(row.raw_runtime_s for row in scenarios),
                accuracy=mean_of_present(row.accuracy for row in scenarios),
                num_scenarios=len(scenarios),
                cost=cost_per_1000(
                    idealized, gpus.get(name), inputs.cost_rates.get(model.hardware or "")
                ),
                frontier_count={
                    kind: sum(1 for scenario, m in on_front[kind] if m == name)
                    for kind in FRONTIER_KINDS
                },
                stack=fit_stack_name(model.idealized_fit) if idealized is not None else None,
            )
        )
    groups = group_models(summaries)
    grouped = {row.model: row for group in groups for row in group.members}
    return Leaderboard(
        models=tuple(grouped[row.model] for row in summaries),
        scenario_rows=tuple(scenario_rows),
        workload_rows=tuple(workload_rows),
        frontier_points=frontier_points,
        inputs=inputs,
        stack_comparison=comparison,
        groups=groups,
        current_models=current,
    )


def leaderboard_payload(board: Leaderboard, *, include_scenarios: bool = False) -> dict:
    """The board as one JSON object (rows as pydantic models): what the REST API's
    ``/v1/leaderboard`` answers and ``idealized-runtime leaderboard --json`` prints."""
    comparison = board.stack_comparison
    payload = {
        "created_at": board.inputs.created_at,
        "source": board.inputs.source,
        "models": list(board.models),
        "workloads": list(board.workload_rows),
        "scenarios": list(board.scenario_rows) if include_scenarios else None,
        "stacks": list(comparison.stacks) if comparison else None,
        "stack_hardware": comparison.hardware if comparison else None,
        "stack_models": list(comparison.models) if comparison else None,
        "stack_workloads": list(comparison.workloads) if comparison else None,
    }
    current = board.current_models
    if current is not None:  # only when asked for: the REST API's answer keeps its shape
        payload["current_models"] = {
            "hardware": current.hardware,
            "stack": current.stack,
            "baseline_stack": current.baseline_stack,
            "serving": current.serving,
            "serving_standard": current.serving_standard,
            "serving_provenance": current.serving_provenance,
            "models": list(current.rows),
            "prices": list(current.prices),
        }
    return payload


def _with_frontier(row: ScenarioRow, on_frontier: dict[FrontierKind, bool]) -> ScenarioRow:
    return row.model_copy(update={"on_frontier": on_frontier})


def stacks(inputs: LeaderboardInputs) -> list[Provenance]:
    """The distinct stacks the inputs' fits were measured on, for the methodology section."""
    seen: list[Provenance] = []
    fits = [m.idealized_fit for m in inputs.models] + [m.denoised_fit for m in inputs.models]
    fits += [fit for profile in inputs.profiles for fit in profile.fits]
    for fit in fits:
        if fit is not None and fit.stack is not None and fit.stack not in seen:
            seen.append(fit.stack)
    return seen


def _has_values(row: ScenarioRow) -> bool:
    return any(
        value is not None
        for value in (
            row.accuracy,
            row.raw_runtime_s,
            row.prompt_tokens,
            row.output_tokens,
            row.idealized_runtime_s,
        )
    )
