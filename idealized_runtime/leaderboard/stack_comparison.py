"""The same models side by side under several reference stacks (``compare_stacks``): a model's
own fit where it was measured on that stack, else the hardware model's estimate for its
architecture on that stack; every idealized runtime names the stack it was computed on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from idealized_runtime.core.scenarios import Workload
from idealized_runtime.core.types import (
    BF16,
    Architecture,
    Deployment,
    FittedCostModel,
    Hardware,
    Provenance,
)
from idealized_runtime.cost_model.hardware.stacks.catalog import HELM_STACK
from idealized_runtime.leaderboard.metrics import mean_of_present, runtime_at
from idealized_runtime.leaderboard.rows import (
    HELM_RUNNER,
    STACK_RUNNER_PREFIX,
    LeaderboardInputs,
    ModelInput,
    StackComparison,
    StackModelRow,
    StackSource,
    StackWorkloadRow,
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


def fit_stack_name(fit: FittedCostModel | None) -> str | None:
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
    values = {
        w.name: runtime_at(fit, w.mean_prompt_tokens, w.mean_output_tokens) for w in workloads
    }
    return _StackRuntimes(
        values={name: value for name, value in values.items() if value is not None},
        source="fit",
        hardware=_fit_hardware(model),
        tp=tp or (fit.stack.tensor_parallel_size if fit.stack else None),
    )


@dataclass(frozen=True)
class WorkloadDeployment:
    """How the hardware model serves an architecture's workloads on one stack and GPU: the
    deployment (None when it cannot: a precision the GPU refuses, too large a model), the
    workloads' (prompt, output) tokens that fit the context, and why some or all are left out."""

    deployment: Deployment | None
    shapes: dict[str, tuple[float, float]]
    note: str | None = None


def workload_deployment(
    arch: Architecture,
    stack: str,
    hardware: Hardware,
    workloads: Sequence[Workload],
    tp: int | None = None,
) -> WorkloadDeployment:
    """The deployment ``hardware_model_estimate`` plans for the largest of ``workloads`` (so
    every workload fits) on ``stack`` at the checkpoint's precision, with the stack's efficiency
    for that weight format; workloads longer than the context are left out with a note."""
    from idealized_runtime.core.errors import InputError
    from idealized_runtime.cost_model.hardware.estimate import plan_request
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
        return WorkloadDeployment(None, {}, note)
    largest = max(inside.values(), key=sum)
    precision = arch.precision or BF16  # the checkpoint's, as hardware_model_estimate
    try:
        deployment = plan_request(
            arch,
            hardware,
            math.ceil(largest[0]),
            math.ceil(largest[1]),
            tp=tp,
            precision=precision,
            efficiency=get_stack(stack).efficiency_for(precision.weights),
            stack=stack,
        )
    except InputError as error:
        return WorkloadDeployment(None, {}, str(error))
    return WorkloadDeployment(deployment, inside, note)


# The same architecture on the same stack recurs under each of its names, and the service answers
# repeated side-by-side requests: computed once (a few hundred entries at most).
@lru_cache(maxsize=512)
def _hardware_model_runtimes(
    arch: Architecture,
    stack: str,
    hardware: Hardware,
    workloads: tuple[Workload, ...],
    tp: int | None,
) -> _StackRuntimes:
    """The hardware model on ``stack``: the workloads' deployment (``workload_deployment``),
    then every workload's runtime at its mean (fractional) tokens in one vectorized pass."""
    import numpy as np

    from idealized_runtime.cost_model.hardware.roofline import hardware_model_runtime

    planned = workload_deployment(arch, stack, hardware, workloads, tp)
    if planned.deployment is None:
        return _StackRuntimes({}, hardware=hardware.name, tp=tp, note=planned.note)
    inside = planned.shapes
    runtimes = hardware_model_runtime(
        planned.deployment,
        np.array([p for p, _ in inside.values()]),
        np.array([o for _, o in inside.values()]),
    )
    return _StackRuntimes(
        values=dict(zip(inside, (float(r) for r in runtimes), strict=True)),
        source="hardware-model",
        hardware=hardware.name,
        tp=planned.deployment.tp,
        note=planned.note,
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
    if fit is not None and fit_stack_name(fit) == stack and _fit_hardware(model) == hardware.name:
        return _fit_runtimes(model, workloads, tp)
    if arch is None:
        why = "no architecture known: the hardware model needs the model's shape"
        return _StackRuntimes({}, note=why)
    found = _hardware_model_runtimes(arch, stack, hardware, tuple(workloads), tp)
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
        stack: mean_of_present(found.values[w] for w in common) if found.values else None
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
