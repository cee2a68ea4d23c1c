"""Leaderboard: runtimes, cost and accuracy per model and scenario, and the accuracy-vs-runtime
Pareto frontiers of the paper's main figure.

Pure computation on inputs that are already loaded (``LeaderboardInputs``): loading lives in
``idealized_runtime.report.inputs`` (bundled HELM data, a results folder, the service database)
and rendering in ``idealized_runtime.report.render``. The REST service gathers the same inputs
from its database and calls ``build_leaderboard``.

Two granularities, because they answer different questions:

* **scenario rows**: one per (HELM scenario, model that HELM ran on it). They carry accuracy and
  the raw (API-measured) runtime, so they feed the efficiency-vs-capability frontiers.
* **workload rows**: one per (scenario group, model with a fit). Every fitted model is evaluated
  at the same mean prompt/output tokens, so these are comparable across all models, including
  ones HELM never ran (a locally profiled architecture).

Rows are grouped by architecture (``groups``): the names one architecture is listed under
(HELM's provider names mapped to one profiled shape, the shape's own name) form one
``ModelGroup``, which shows the figures of the architecture once and keeps what was measured
under each name with that name.

Every idealized runtime names the stack it was computed on (``stack``: HELM's tables are
``helm-megatron-2022``). ``build_leaderboard(inputs, stacks=[...])`` also puts the same models
side by side under several reference stacks (``compare_stacks``): a model's own fit where it was
measured on that stack, else the hardware model's estimate for its architecture on that stack.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from idealized_runtime.core.scenarios import ScenarioResult, Workload
from idealized_runtime.core.types import (
    Architecture,
    FittedCostModel,
    Hardware,
    Measurement,
    Precision,
    Provenance,
    utc_now,
)
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.hardware.stacks.catalog import HELM_STACK

FrontierKind = Literal["idealized", "raw"]
FRONTIER_KINDS: tuple[FrontierKind, ...] = ("idealized", "raw")
IdealizedSource = Literal["helm-reported", "fit"]
# Where a runtime under a compared stack comes from: the model's own fit measured on that stack,
# or the hardware model's estimate for its architecture on that stack.
StackSource = Literal["fit", "hardware-model"]
HELM_RUNNER = "megatron-lm-2022"  # the runner of HELM's Megatron A100 profiles
STACK_RUNNER_PREFIX = "stack:"  # a hardware-model fit on a reference stack (bench's calibrated)
STACK_FIELD = "Stack the idealized runtime was computed on (HELM's tables: helm-megatron-2022)"
GROUP_FIELD = (
    "The architecture the model is grouped under on the leaderboard (its profiled shape, e.g. "
    "megatron-gptj-6b for gooseai/gpt-j-6b); the model's own name when its shape is unknown"
)
REQUESTS_PER_COST_UNIT = 1000  # costs are quoted per 1,000 requests


# --- inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInput:
    """One model to rank. ``name`` is the key used in scenario results (a HELM name such as
    ``openai/davinci``, or an architecture name for a locally profiled model)."""

    name: str
    architecture: Architecture | None = None  # the profiled shape; gives parameters and GPUs
    idealized_fit: FittedCostModel | None = None
    denoised_fit: FittedCostModel | None = None
    num_gpus: int | None = None  # accelerators needed to serve it; None: derive or unknown
    hardware: str | None = None  # accelerator the idealized fit (and so the cost) refers to

    @property
    def num_parameters(self) -> int | None:
        return self.architecture.num_parameters() if self.architecture else None


@dataclass(frozen=True)
class ProfileInput:
    """One profiled shape: its timings and the fits of them (several methods may share the
    timings), for the runtime-vs-output plots and the fit-quality table."""

    name: str
    fits: tuple[FittedCostModel, ...]
    measurements: tuple[Measurement, ...] = ()


@dataclass(frozen=True)
class CostRates:
    """What one accelerator-second costs: the cost-aware metrics multiply by these."""

    hardware: str
    usd_per_gpu_second: float | None
    joules_per_gpu_second: float | None  # board power, W

    @classmethod
    def from_hardware(cls, hardware: Hardware) -> CostRates:
        return cls(
            hardware=hardware.name,
            usd_per_gpu_second=hardware.hourly_price_usd / 3600 or None,
            joules_per_gpu_second=hardware.board_power_w or None,
        )


@dataclass(frozen=True)
class LeaderboardInputs:
    models: tuple[ModelInput, ...]
    scenario_results: tuple[ScenarioResult, ...] = ()
    # Request shapes every fitted model is evaluated at (HELM scenario groups by default).
    workloads: tuple[Workload, ...] = ()
    profiles: tuple[ProfileInput, ...] = ()
    # Accelerator name -> rates; a model's cost uses the entry of its ``hardware``.
    cost_rates: Mapping[str, CostRates] = field(default_factory=dict)
    source: str = ""  # where the inputs came from, for the methodology section
    created_at: datetime = field(default_factory=utc_now)


# --- outputs -----------------------------------------------------------------------------------


class _Row(BaseModel):
    """Output rows are pydantic models: the REST API's leaderboard schemas are these classes."""

    model_config = ConfigDict(frozen=True)


class Cost(_Row):
    """Cost-aware variants per 1,000 requests (null where a rate or GPU count is unknown)."""

    gpu_seconds: float | None = None
    usd: float | None = None
    kilojoules: float | None = None


class ScenarioRow(_Row):
    scenario: str
    group: str
    model: str
    prompt_tokens: float | None
    output_tokens: float | None
    idealized_runtime_s: float | None
    idealized_source: IdealizedSource | None
    denoised_runtime_s: float | None
    raw_runtime_s: float | None
    accuracy: float | None
    on_frontier: dict[FrontierKind, bool] = Field(default_factory=dict)
    stack: str | None = Field(default=None, description=STACK_FIELD)


class WorkloadRow(_Row):
    workload: str
    model: str
    prompt_tokens: float
    output_tokens: float
    idealized_runtime_s: float | None
    denoised_runtime_s: float | None
    num_gpus: int | None
    cost: Cost
    stack: str | None = Field(default=None, description=STACK_FIELD)


class ModelRow(_Row):
    """Per-model summary. Runtimes from fits are means over the common workloads (comparable
    across models); raw runtime and accuracy are means over the scenarios HELM ran the model on
    (not comparable across models that ran different scenarios; ``num_scenarios`` says how
    many)."""

    model: str
    architecture: str | None
    num_parameters: int | None
    num_gpus: int | None
    hardware: str | None
    idealized_runtime_s: float | None = Field(description="Mean over the common workloads")
    denoised_runtime_s: float | None
    raw_runtime_s: float | None = Field(description="Mean over the scenarios the model ran")
    accuracy: float | None
    num_scenarios: int
    cost: Cost
    frontier_count: dict[FrontierKind, int]
    stack: str | None = Field(default=None, description=STACK_FIELD)
    group: str | None = Field(default=None, description=GROUP_FIELD)
    also_listed_as: list[str] = Field(
        default_factory=list, description="The other names of the same group, in board order"
    )
    group_headline: bool = Field(
        default=True,
        description="The one row of its group whose parameters, accelerators, hardware, stack, "
        "idealized runtime and cost the grouped leaderboard shows for the whole group",
    )


class _StackRow(_Row):
    stack: str = Field(description="Reference stack (`idealized-runtime stacks`)")
    idealized_runtime_s: float | None
    source: StackSource | None = Field(
        description="fit: the model's own fit measured on this stack; hardware-model: the "
        "hardware model's estimate for the model's architecture on this stack"
    )
    hardware: str | None
    tp: int | None = Field(description="Tensor-parallel size of the runtime")
    ratio: float | None = Field(
        description="idealized_runtime_s / the first compared stack's, same model and workloads"
    )
    note: str | None = Field(default=None, description="Why the runtime is n/a")


class StackWorkloadRow(_StackRow):
    """One model at one workload under one compared stack."""

    workload: str
    model: str
    prompt_tokens: float
    output_tokens: float


class StackModelRow(_StackRow):
    """One model under one compared stack: the mean over the workloads that every stack with a
    runtime for the model covers (``num_workloads``), so the stacks' means compare."""

    model: str
    architecture: str | None
    num_workloads: int


@dataclass(frozen=True)
class FrontierPoint:
    model: str
    runtime_s: float
    accuracy: float
    on_frontier: bool


@dataclass(frozen=True)
class StackComparison:
    """The same models under several reference stacks; the first is the ratios' baseline."""

    stacks: tuple[str, ...]
    hardware: str  # where the hardware model estimates (HELM's stack's GPU)
    models: tuple[StackModelRow, ...]
    workloads: tuple[StackWorkloadRow, ...]

    def by_model(self) -> dict[str, dict[str, StackModelRow]]:
        """model -> stack -> row, models in leaderboard order."""
        table: dict[str, dict[str, StackModelRow]] = {}
        for row in self.models:
            table.setdefault(row.model, {})[row.stack] = row
        return table


def _architecture_figures(row: ModelRow) -> tuple[object, ...]:
    """What a row shares with the other names of its architecture when they run the same fit:
    the idealized runtime and what it was computed on (cost follows from these)."""
    return (row.idealized_runtime_s, row.stack, row.hardware, row.num_gpus)


@dataclass(frozen=True)
class ModelGroup:
    """One leaderboard entry: an architecture and every name the board lists it under (HELM's
    provider names mapped to one profiled shape, the shape's own name, a label given to it).

    The names share what belongs to the architecture, shown once from ``headline``:
    parameters, accelerators, hardware, and the idealized runtime with its stack and cost. What
    was measured under a name (denoised and raw runtime, accuracy, scenarios, frontier counts)
    stays with that name, and so does an idealized runtime that differs from the headline's
    (a fit of its own)."""

    key: str  # the architecture's name, or the model's own name when its shape is unknown
    headline: ModelRow
    members: tuple[ModelRow, ...]  # every name, in board order

    @property
    def label(self) -> str:
        """What the entry is called: the architecture for several names, else the name."""
        return self.key if self.has_aliases else self.headline.model

    @property
    def has_aliases(self) -> bool:
        return len(self.members) > 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(row.model for row in self.members)

    def differs_from_headline(self, row: ModelRow) -> bool:
        """Whether ``row`` has an idealized runtime of its own (another fit, stack or GPU); a
        name without one takes the architecture's."""
        if row.idealized_runtime_s is None:
            return False
        return _architecture_figures(row) != _architecture_figures(self.headline)


def group_models(rows: Sequence[ModelRow]) -> tuple[ModelGroup, ...]:
    """Rows grouped by architecture, groups in the order of their first name, each row told its
    group (``group``, ``also_listed_as``, ``group_headline``)."""
    by_key: dict[str, list[ModelRow]] = {}
    for row in rows:
        by_key.setdefault(row.architecture or row.model, []).append(row)
    groups = []
    for key, members in by_key.items():
        headline = _headline(key, members)
        marked = tuple(
            row.model_copy(
                update={
                    "group": key,
                    "also_listed_as": [m.model for m in members if m.model != row.model],
                    "group_headline": row.model == headline.model,
                }
            )
            for row in members
        )
        groups.append(ModelGroup(key, next(r for r in marked if r.group_headline), marked))
    return tuple(groups)


def _headline(key: str, members: Sequence[ModelRow]) -> ModelRow:
    """The name whose architecture figures the group shows: those most of its names share, so
    that the fewest names need a line of their own; a tie goes to the architecture's own name
    (its profile), then to the name listed first."""
    counts = Counter(
        _architecture_figures(row) for row in members if row.idealized_runtime_s is not None
    )
    if counts:
        most = max(counts.values())
        members = [
            row
            for row in members
            if row.idealized_runtime_s is not None and counts[_architecture_figures(row)] == most
        ]
    return next((row for row in members if row.model == key), members[0])


def ranked_groups(groups: Iterable[ModelGroup]) -> list[ModelGroup]:
    """Fastest idealized runtime first, groups without one last (board order among ties)."""
    return sorted(
        groups,
        key=lambda g: (g.headline.idealized_runtime_s is None, g.headline.idealized_runtime_s or 0),
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


# --- Pareto frontier ---------------------------------------------------------------------------


def pareto_front(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """Names of the (runtime, accuracy) points that no other point dominates; lower runtime and
    higher accuracy are better. A point dominates another if it is at least as good in both and
    strictly better in one, so exact duplicates are all on the front.

    Sweep in order of increasing runtime: a point is on the front iff its accuracy beats every
    strictly faster point's and it is the most accurate among the points as fast as it.
    """
    by_runtime: dict[float, list[tuple[str, float]]] = defaultdict(list)
    for name, (runtime, accuracy) in points.items():
        by_runtime[runtime].append((name, accuracy))
    front: set[str] = set()
    best_faster = -math.inf
    for runtime in sorted(by_runtime):
        tied = by_runtime[runtime]
        best_here = max(accuracy for _, accuracy in tied)
        if best_here > best_faster:
            front.update(name for name, accuracy in tied if accuracy == best_here)
            best_faster = best_here
    return front


# --- metrics -----------------------------------------------------------------------------------


def _runtime(
    fit: FittedCostModel | None, prompt: float | None, output: float | None
) -> float | None:
    if fit is None or prompt is None or output is None:
        return None
    # Mean token counts are fractional; the formulas hold for any p >= 1 and o >= 0 (o = 0:
    # prompt-only scenarios cost alpha(p), as in HELM; fractional o < 1 also has no decode step).
    return float(predict_runtime(fit, max(prompt, 1.0), max(output, 0.0)))


def cost_per_1000(runtime_s: float | None, num_gpus: int | None, rates: CostRates | None) -> Cost:
    """GPU-seconds, dollars and kilojoules of 1,000 requests of ``runtime_s`` on ``num_gpus``
    accelerators: the paper's cost-aware variant (runtime x accelerators needed)."""
    if runtime_s is None or num_gpus is None:
        return Cost()
    gpu_seconds = runtime_s * num_gpus * REQUESTS_PER_COST_UNIT
    usd = joules = None
    if rates is not None:
        if rates.usd_per_gpu_second is not None:
            usd = gpu_seconds * rates.usd_per_gpu_second
        if rates.joules_per_gpu_second is not None:
            joules = gpu_seconds * rates.joules_per_gpu_second
    return Cost(gpu_seconds=gpu_seconds, usd=usd, kilojoules=joules / 1000 if joules else None)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


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
            idealized = _runtime(fit, result.mean_prompt_tokens, result.mean_output_tokens)
            source = "fit" if idealized is not None else None
            stack = stack_label(fit.stack) if idealized is not None and fit else None
        denoised = _runtime(
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
            idealized = _runtime(model.idealized_fit, p, o)
            rows.append(
                WorkloadRow(
                    workload=workload.name,
                    model=model.name,
                    prompt_tokens=p,
                    output_tokens=o,
                    idealized_runtime_s=idealized,
                    denoised_runtime_s=_runtime(model.denoised_fit, p, o),
                    num_gpus=gpus[model.name],
                    cost=cost_per_1000(
                        idealized, gpus[model.name], rates.get(model.hardware or "")
                    ),
                    stack=_fit_stack(model.idealized_fit) if idealized is not None else None,
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


def build_leaderboard(inputs: LeaderboardInputs, stacks: Sequence[str] = ()) -> Leaderboard:
    """Rows, per-model summaries and frontiers from loaded inputs; with ``stacks`` (reference
    stack names, the first the ratios' baseline) also the models side by side under them."""
    comparison = compare_stacks(inputs, stacks) if stacks else None
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
        idealized = _mean(row.idealized_runtime_s for row in workloads)
        summaries.append(
            ModelRow(
                model=name,
                architecture=model.architecture.name if model.architecture else None,
                num_parameters=model.num_parameters,
                num_gpus=gpus.get(name),
                hardware=model.hardware,
                idealized_runtime_s=idealized,
                denoised_runtime_s=_mean(row.denoised_runtime_s for row in workloads),
                raw_runtime_s=_mean(row.raw_runtime_s for row in scenarios),
                accuracy=_mean(row.accuracy for row in scenarios),
                num_scenarios=len(scenarios),
                cost=cost_per_1000(
                    idealized, gpus.get(name), inputs.cost_rates.get(model.hardware or "")
                ),
                frontier_count={
                    kind: sum(1 for scenario, m in on_front[kind] if m == name)
                    for kind in FRONTIER_KINDS
                },
                stack=_fit_stack(model.idealized_fit) if idealized is not None else None,
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
    )


# --- stacks ------------------------------------------------------------------------------------


def stack_label(stack: Provenance | None) -> str | None:
    """The name a fit's stack goes by on the leaderboard: HELM's Megatron A100 profiles are
    ``helm-megatron-2022``, a hardware-model fit on a reference stack is that stack's name,
    anything else ``runner/hardware`` (e.g. ``idealized-runtime/cpu``)."""
    if stack is None:
        return None
    if stack.runner == HELM_RUNNER:
        return HELM_STACK
    if stack.runner.startswith(STACK_RUNNER_PREFIX):
        return stack.runner.removeprefix(STACK_RUNNER_PREFIX)
    return f"{stack.runner}/{stack.hardware}"


def _fit_stack(fit: FittedCostModel | None) -> str | None:
    return stack_label(fit.stack) if fit is not None else None


def _fit_hardware(model: ModelInput) -> str | None:
    """The GPU a model's idealized fit was measured on (its stack's, else the model's)."""
    fit = model.idealized_fit
    return fit.stack.hardware if fit is not None and fit.stack else model.hardware


def resolve_stacks(names: Iterable[str]) -> tuple[str, ...]:
    """Reference stack names (aliases resolved, duplicates dropped, order kept); an unknown name
    is a one-line ``InputError`` listing the known ones."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

    resolved = [get_stack(name.strip()).name for name in names if name.strip()]
    if not resolved:
        from idealized_runtime.core.errors import InputError

        raise InputError("no stack named; `idealized-runtime stacks` lists them")
    return tuple(dict.fromkeys(resolved))


def helm_tensor_parallel_sizes() -> dict[str, int]:
    """Architecture name -> TP size HELM profiled it with (its Megatron A100 grid)."""
    from idealized_runtime.cost_model.hardware.calibration import megatron_tensor_parallel_sizes

    return megatron_tensor_parallel_sizes()


@dataclass(frozen=True)
class _StackRuntimes:
    """A model's runtimes at the workloads under one stack (missing workloads: n/a)."""

    values: dict[str, float]
    source: StackSource | None = None
    hardware: str | None = None
    tp: int | None = None
    note: str | None = None  # why some or all workloads are n/a


def _fit_runtimes(
    model: ModelInput, workloads: Sequence[Workload], tp: int | None
) -> _StackRuntimes:
    fit = model.idealized_fit
    assert fit is not None
    values = {w.name: _runtime(fit, w.mean_prompt_tokens, w.mean_output_tokens) for w in workloads}
    return _StackRuntimes(
        values={name: value for name, value in values.items() if value is not None},
        source="fit",
        hardware=_fit_hardware(model),
        tp=tp or (fit.stack.tensor_parallel_size if fit.stack else None),
    )


# (architecture, stack, GPU, workloads, TP) -> runtimes: the service answers repeated
# side-by-side requests without recomputing them (a few hundred entries at most).
_HARDWARE_MODEL_CACHE: dict[tuple, _StackRuntimes] = {}
_HARDWARE_MODEL_CACHE_SIZE = 512


def _hardware_model_runtimes(
    arch: Architecture,
    stack: str,
    hardware: Hardware,
    workloads: Sequence[Workload],
    tp: int | None,
) -> _StackRuntimes:
    key = (arch.model_dump_json(), stack, hardware.model_dump_json(), tuple(workloads), tp)
    found = _HARDWARE_MODEL_CACHE.get(key)
    if found is None:
        found = _compute_hardware_model_runtimes(arch, stack, hardware, workloads, tp)
        if len(_HARDWARE_MODEL_CACHE) >= _HARDWARE_MODEL_CACHE_SIZE:
            _HARDWARE_MODEL_CACHE.clear()
        _HARDWARE_MODEL_CACHE[key] = found
    return found


def _compute_hardware_model_runtimes(
    arch: Architecture,
    stack: str,
    hardware: Hardware,
    workloads: Sequence[Workload],
    tp: int | None,
) -> _StackRuntimes:
    """The hardware model on ``stack``: ``hardware_model_estimate`` plans the GPUs (at the
    largest request, so every workload fits) and checks the precision, the same time model then
    gives every workload's runtime at its mean (fractional) tokens in one vectorized pass."""
    import numpy as np

    from idealized_runtime.core.errors import InputError
    from idealized_runtime.core.types import Deployment
    from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate
    from idealized_runtime.cost_model.hardware.roofline import hardware_model_runtime
    from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

    shapes = {
        w.name: (max(w.mean_prompt_tokens, 1.0), max(w.mean_output_tokens, 0.0)) for w in workloads
    }
    inside = {name: po for name, po in shapes.items() if sum(po) <= arch.max_context}
    note = None
    if len(inside) < len(shapes):
        longer = sorted(set(shapes) - set(inside))
        note = f"{', '.join(longer)} longer than the {arch.max_context}-token context"
    if not inside:
        return _StackRuntimes({}, hardware=hardware.name, note=note)
    largest = max(inside.values(), key=sum)
    try:
        plan, _ = hardware_model_estimate(
            arch, hardware, math.ceil(largest[0]), math.ceil(largest[1]), tp=tp, stack=stack
        )
    except InputError as error:
        return _StackRuntimes({}, hardware=hardware.name, tp=tp, note=str(error))
    deployment = Deployment(
        architecture=arch,
        hardware=hardware,
        tp=plan.tp,
        precision=arch.precision or Precision(),  # as hardware_model_estimate
        efficiency=get_stack(stack).efficiency,
        stack=stack,
    )
    runtimes = hardware_model_runtime(
        deployment,
        np.array([p for p, _ in inside.values()]),
        np.array([o for _, o in inside.values()]),
    )
    return _StackRuntimes(
        values=dict(zip(inside, (float(r) for r in runtimes), strict=True)),
        source="hardware-model",
        hardware=hardware.name,
        tp=plan.tp,
        note=note,
    )


def _stack_runtimes(
    model: ModelInput,
    stack: str,
    workloads: Sequence[Workload],
    hardware: Hardware,
    helm_tp: Mapping[str, int],
) -> _StackRuntimes:
    """A model under one reference stack: its own fit if measured on that stack, else the
    hardware model for its architecture (at HELM's TP where HELM profiled the shape), else n/a."""
    arch = model.architecture
    tp = helm_tp.get(arch.name) if arch is not None else None
    fit = model.idealized_fit
    if fit is not None and _fit_stack(fit) == stack and _fit_hardware(model) == hardware.name:
        return _fit_runtimes(model, workloads, tp)
    if arch is None:
        why = "no architecture known: the hardware model needs the model's shape"
        return _StackRuntimes({}, note=why)
    found = _hardware_model_runtimes(arch, stack, hardware, workloads, tp)
    if stack == HELM_STACK and found.values:  # say so: HELM's column is mostly its tables
        why = "not in HELM's tables: the hardware model on HELM's stack"
        found = replace(found, note="; ".join(filter(None, (why, found.note))))
    return found


def compare_stacks(
    inputs: LeaderboardInputs, stacks: Sequence[str], *, hardware: str | None = None
) -> StackComparison:
    """The same models under each of ``stacks`` (reference stack names; the first is the
    ratios' baseline), per workload and as a mean over the workloads all of them cover.

    A stack's runtime for a model is the model's own idealized fit where that fit was measured
    on the stack (HELM's table for ``helm-megatron-2022``), else the hardware model's estimate
    for the model's architecture on the stack, on ``hardware`` (default: HELM's stack's GPU,
    A100 80GB) at the tensor-parallel size HELM profiled the shape with (else the planner's).
    A model without either is n/a with the reason."""
    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

    names = resolve_stacks(stacks)
    gpu = get_hardware(hardware or get_stack(HELM_STACK).hardware[0])
    helm_tp = helm_tensor_parallel_sizes()
    models = {model.name: model for model in inputs.models}
    scenario_only = {r.model for r in inputs.scenario_results} - set(models)
    order = [*models, *sorted(scenario_only)]
    workload_rows: list[StackWorkloadRow] = []
    model_rows: list[StackModelRow] = []
    for name in order:
        model = models.get(name, ModelInput(name=name))
        per_stack = {
            stack: _stack_runtimes(model, stack, inputs.workloads, gpu, helm_tp) for stack in names
        }
        if any(found.values for found in per_stack.values()):
            workload_rows.extend(_stack_workload_rows(model.name, inputs.workloads, per_stack))
        model_rows.extend(_stack_model_rows(model, per_stack))
    return StackComparison(names, gpu.name, tuple(model_rows), tuple(workload_rows))


def _ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or baseline is None or baseline <= 0:
        return None
    return value / baseline


def _stack_workload_rows(
    model: str, workloads: Sequence[Workload], per_stack: Mapping[str, _StackRuntimes]
) -> list[StackWorkloadRow]:
    baseline = next(iter(per_stack.values()))
    rows = []
    for workload in workloads:
        for stack, found in per_stack.items():
            value = found.values.get(workload.name)
            rows.append(
                StackWorkloadRow(
                    workload=workload.name,
                    model=model,
                    prompt_tokens=workload.mean_prompt_tokens,
                    output_tokens=workload.mean_output_tokens,
                    stack=stack,
                    idealized_runtime_s=value,
                    source=found.source if value is not None else None,
                    hardware=found.hardware,
                    tp=found.tp,
                    ratio=_ratio(value, baseline.values.get(workload.name)),
                    note=None if value is not None else (found.note or "n/a"),
                )
            )
    return rows


def _stack_model_rows(
    model: ModelInput, per_stack: Mapping[str, _StackRuntimes]
) -> list[StackModelRow]:
    """Means over the workloads every stack with a runtime covers, so that they compare."""
    present = [found.values for found in per_stack.values() if found.values]
    common = set.intersection(*(set(values) for values in present)) if present else set()
    means = {
        stack: _mean(found.values[w] for w in common) if found.values else None
        for stack, found in per_stack.items()
    }
    baseline = next(iter(means.values()))
    return [
        StackModelRow(
            model=model.name,
            architecture=model.architecture.name if model.architecture else None,
            stack=stack,
            idealized_runtime_s=means[stack],
            num_workloads=len(common) if means[stack] is not None else 0,
            source=found.source if means[stack] is not None else None,
            hardware=found.hardware,
            tp=found.tp,
            ratio=_ratio(means[stack], baseline),
            note=found.note
            or (None if means[stack] is not None else "no workload every compared stack covers"),
        )
        for stack, found in per_stack.items()
    ]


def leaderboard_payload(board: Leaderboard, *, include_scenarios: bool = False) -> dict:
    """The board as one JSON object (rows as pydantic models): what the REST API's
    ``/v1/leaderboard`` answers and ``idealized-runtime leaderboard --json`` prints."""
    comparison = board.stack_comparison
    return {
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
