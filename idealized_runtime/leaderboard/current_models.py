"""Today's models on the leaderboard: the catalog's flagship configs (Llama 3.3, Qwen3 dense and
MoE, Gemma 3, DeepSeek-V3, gpt-oss, Mistral Small, Phi-4) at their checkpoints' precision, on a
chosen GPU and reference stack, over HELM's scenario workloads, side by side with HELM's 2022
stack on the same GPU; with a price table, the providers' prices beside the idealized dollars.

Everything comes from the shipped catalog and the hardware model (no fits, no network): per
model the deployment ``hardware_model_estimate`` plans (the fewest GPUs that hold the weights
and the longest workload's KV cache, batch 1), the idealized runtime of every workload at its
mean tokens (``compare_stacks``, the machinery of the stacks side by side), and from them:

* GPUs, GPU-seconds, dollars and kilojoules per 1,000 requests (mean over the workloads);
* dollars per 1M output tokens: a decode step's GPU-seconds at the workloads' mean contexts,
  priced at the GPU's hourly rate (batch 1: one user per deployment);
* output tokens per second per user: 1 / that mean decode step;

and beside those batch-1 figures, each model at ``plan``'s best deployment on the GPU under the
board's standard SLO (``best_deployments``: the engine, layout, output tokens/s per GPU and
dollars per 1M output tokens), from the shipped figures unless planned live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from idealized_runtime.core.prices import TOKENS_PER_PRICE_UNIT, PriceTable, ProviderPrice
from idealized_runtime.core.scenarios import Workload
from idealized_runtime.core.types import Architecture, Hardware
from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, HELM_STACK
from idealized_runtime.leaderboard.best_deployments import (
    SERVING_SOURCES,
    STANDARD,
    ServingSource,
    ShippedFigures,
    board_cell,
    read_shipped,
)
from idealized_runtime.leaderboard.flagships import FLAGSHIP, FLAGSHIP_MODELS
from idealized_runtime.leaderboard.metrics import cost_per_1000, mean_of_present
from idealized_runtime.leaderboard.rows import (
    REQUESTS_PER_COST_UNIT,
    Cost,
    CostRates,
    CurrentModelRow,
    LeaderboardInputs,
    ModelInput,
    ProviderPriceRow,
    StackComparison,
)
from idealized_runtime.leaderboard.stack_comparison import (
    compare_stacks,
    resolve_stacks,
    workload_deployment,
)

# A current datacenter GPU that holds every flagship config at its checkpoint's precision on
# one node (DeepSeek-V3 in fp8 takes two pipeline stages of 8).
DEFAULT_GPU = "h100-sxm"


@dataclass(frozen=True)
class CurrentModelsSpec:
    """Which of today's models, on which GPU and stack, and the providers' prices if any."""

    models: tuple[str, ...] = FLAGSHIP_MODELS
    hardware: str = DEFAULT_GPU
    stack: str = DEFAULT_STACK
    prices: PriceTable | None = None
    # The best deployment under the standard SLO: the shipped figures, planned now, or none.
    serving: ServingSource = "shipped"

    def resolved(self) -> CurrentModelsSpec:
        """The spec with the stack's alias resolved; an unknown architecture, GPU or stack is
        one InputError line naming the known ones."""
        from idealized_runtime.core.catalog import UnknownNameError, get_architecture, get_hardware
        from idealized_runtime.core.errors import InputError

        (stack,) = resolve_stacks([self.stack])
        try:
            for name in self.models:
                get_architecture(name)
            get_hardware(self.hardware)
        except UnknownNameError as error:
            raise InputError(str(error)) from None
        if not self.models:
            raise InputError("no model named for the board of today's models")
        if self.serving not in SERVING_SOURCES:
            raise InputError(
                f"unknown serving source {self.serving!r}; one of {', '.join(SERVING_SOURCES)}"
            )
        return CurrentModelsSpec(
            tuple(dict.fromkeys(self.models)), self.hardware, stack, self.prices, self.serving
        )


def parse_model_list(value: str) -> tuple[str, ...]:
    """NAME,NAME, where ``flagship`` stands for ``FLAGSHIP_MODELS``: the architectures of the
    board of today's models, each once, in the order named."""
    names: list[str] = []
    for name in (part.strip() for part in value.split(",")):
        names += FLAGSHIP_MODELS if name == FLAGSHIP else [name] if name else []
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class CurrentModelBoard:
    hardware: str
    stack: str
    baseline_stack: str
    rows: tuple[CurrentModelRow, ...]
    comparison: StackComparison  # per model and workload, under both stacks
    prices: tuple[ProviderPriceRow, ...] = ()
    price_source: str = ""
    workloads: tuple[Workload, ...] = field(default=(), repr=False)
    serving: ServingSource = "none"  # where the rows' best deployments come from
    serving_standard: str = STANDARD.label
    # The shipped figures' provenance (command, date, machine), when they were read.
    serving_provenance: str = ""


# Terminal sort keys: the row's figure and whether more is better.
SORT_KEYS: dict[str, tuple[str, bool]] = {
    "idealized": ("idealized_runtime_s", False),
    "gpus": ("num_gpus", False),
    "gpu-seconds": ("gpu_seconds", False),
    "usd": ("usd", False),
    "usd-per-mtok": ("usd_per_million_output_tokens", False),
    "tokens-per-s": ("output_tokens_per_s_per_user", True),
    "ratio": ("ratio", False),
    "parameters": ("num_parameters", False),
    "slo-tokens-per-gpu": ("output_tokens_per_s_per_gpu", True),
    "slo-usd-per-mtok": ("usd_per_million_output_tokens", False),
}
# Sort keys read from the row's best deployment under the standard SLO.
_BEST_KEYS = ("slo-tokens-per-gpu", "slo-usd-per-mtok")


def sort_value(row: CurrentModelRow, key: str) -> float | None:
    name, _ = SORT_KEYS[key]
    if key in _BEST_KEYS:
        best = row.best_deployment
        value = getattr(best, name) if best is not None else None
    elif name in Cost.model_fields:
        value = getattr(row.cost, name)
    else:
        value = getattr(row, name)
    return None if value is None else float(value)


def sorted_rows(rows: Sequence[CurrentModelRow], key: str) -> list[CurrentModelRow]:
    """Best first by ``key`` (``SORT_KEYS``), missing values last, ties in board order."""
    from idealized_runtime.core.errors import InputError

    if key not in SORT_KEYS:
        raise InputError(f"unknown sort key {key!r}; one of {', '.join(SORT_KEYS)}")
    descending = SORT_KEYS[key][1]
    present = [row for row in rows if sort_value(row, key) is not None]
    present.sort(key=lambda row: sort_value(row, key) or 0.0, reverse=descending)
    return present + [row for row in rows if sort_value(row, key) is None]


def current_model_board(
    spec: CurrentModelsSpec, workloads: Sequence[Workload]
) -> CurrentModelBoard:
    """The board of ``spec``'s models over ``workloads`` (HELM's scenario groups)."""
    from idealized_runtime.core.catalog import get_architecture, get_hardware

    spec = spec.resolved()
    gpu = get_hardware(spec.hardware)
    archs = {name: get_architecture(name) for name in spec.models}
    inputs = LeaderboardInputs(
        models=tuple(ModelInput(name=name, architecture=arch) for name, arch in archs.items()),
        workloads=tuple(workloads),
    )
    comparison = compare_stacks(inputs, (HELM_STACK, spec.stack), hardware=gpu.name)
    by_model = comparison.by_model()
    rates = CostRates.from_hardware(gpu)
    shipped = read_shipped() if spec.serving == "shipped" else None
    rows = []
    for name, arch in archs.items():
        runtimes = {
            row.workload: row.idealized_runtime_s
            for row in comparison.workloads
            if row.model == name and row.stack == spec.stack
        }
        row = _row(arch, gpu, spec.stack, workloads, runtimes, by_model[name], rates)
        best = board_cell(arch, gpu, spec.serving, shipped)
        rows.append(row.model_copy(update={"best_deployment": best}))
    prices = _price_rows(spec.prices, rows, workloads) if spec.prices else ()
    return CurrentModelBoard(
        hardware=gpu.name,
        stack=spec.stack,
        baseline_stack=HELM_STACK,
        rows=tuple(rows),
        comparison=comparison,
        prices=prices,
        price_source=spec.prices.source if spec.prices else "",
        workloads=tuple(workloads),
        serving=spec.serving,
        serving_provenance=_provenance(shipped),
    )


def _provenance(shipped: ShippedFigures | None) -> str:
    if shipped is None:
        return ""
    return (
        f"shipped figures of {shipped.created_at} (idealized-runtime {shipped.version}, "
        f"{shipped.machine}; regenerate: {shipped.command})"
    )


def _row(
    arch: Architecture,
    gpu: Hardware,
    stack: str,
    workloads: Sequence[Workload],
    runtimes: dict[str, float | None],
    compared: dict,
    rates: CostRates,
) -> CurrentModelRow:
    import numpy as np

    from idealized_runtime.cost_model.hardware.roofline import hardware_model_beta

    planned = workload_deployment(arch, stack, gpu, workloads)
    deployment = planned.deployment
    runtime = mean_of_present(runtimes.values())
    gpus = deployment.num_gpus if deployment is not None else None
    step_s = None
    if deployment is not None and planned.shapes:
        contexts = np.array([p for p, _ in planned.shapes.values()])
        step_s = float(np.mean(hardware_model_beta(deployment, contexts)))
    usd_per_mtok = None
    if step_s is not None and gpus is not None and rates.usd_per_gpu_second is not None:
        usd_per_mtok = step_s * gpus * rates.usd_per_gpu_second * TOKENS_PER_PRICE_UNIT
    baseline, chosen = compared[HELM_STACK], compared[stack]
    # Today's models are never in HELM's tables: say why only where its stack has no runtime.
    why_no_baseline = baseline.note if baseline.idealized_runtime_s is None else None
    precision = arch.precision.label if arch.precision else "bf16"
    active = arch.num_parameters(True) if arch.num_experts > 1 else None
    return CurrentModelRow(
        model=arch.name,
        family=arch.family,
        num_parameters=arch.num_parameters(),
        active_parameters=active,
        precision=precision,
        hardware=gpu.name,
        stack=stack,
        tp=deployment.tp if deployment is not None else None,
        num_gpus=gpus,
        idealized_runtime_s=runtime,
        cost=cost_per_1000(runtime, gpus, rates),
        usd_per_million_output_tokens=usd_per_mtok,
        output_tokens_per_s_per_user=1.0 / step_s if step_s else None,
        baseline_runtime_s=baseline.idealized_runtime_s,
        ratio=chosen.ratio,
        num_workloads=sum(value is not None for value in runtimes.values()),
        note="; ".join(dict.fromkeys(filter(None, (planned.note, chosen.note, why_no_baseline))))
        or None,
    )


def _price_rows(
    prices: PriceTable, rows: Sequence[CurrentModelRow], workloads: Sequence[Workload]
) -> tuple[ProviderPriceRow, ...]:
    """Each price entry of a model on the board: the provider's dollars of the HELM workloads
    at their mean tokens beside the idealized dollars of the same workloads."""
    found = []
    for row in rows:
        for price in prices.for_architecture(row.model):
            usd = mean_of_present(
                price.usd(w.mean_prompt_tokens, w.mean_output_tokens) for w in workloads
            )
            per_1000 = (usd or 0.0) * REQUESTS_PER_COST_UNIT
            ideal = row.cost.usd
            found.append(
                ProviderPriceRow(
                    provider=price.provider,
                    model=price.model,
                    architecture=row.model,
                    input_usd_per_mtok=price.input_usd_per_mtok,
                    output_usd_per_mtok=price.output_usd_per_mtok,
                    usd_per_1000=per_1000,
                    idealized_usd_per_1000=ideal,
                    ratio=per_1000 / ideal if ideal else None,
                    idealized_usd_per_million_output_tokens=row.usd_per_million_output_tokens,
                )
            )
    return tuple(found)


def idealized_request_costs(
    price: ProviderPrice,
    shapes: Sequence[tuple[float, float]],
    *,
    hardware: str = DEFAULT_GPU,
    stack: str = DEFAULT_STACK,
) -> tuple[list[float], str] | None:
    """The idealized dollars of requests of (prompt, output) tokens of the architecture a price
    entry names, on ``hardware`` and ``stack`` (batch 1, the checkpoint's precision): what
    ``summarize --prices`` sets beside the provider's dollars. None when the entry names no
    architecture or a request does not fit its context."""
    import numpy as np

    from idealized_runtime.core.catalog import get_architecture, get_hardware
    from idealized_runtime.cost_model.hardware.roofline import hardware_model_runtime

    if price.architecture is None or not shapes:
        return None
    arch, gpu = get_architecture(price.architecture), get_hardware(hardware)
    (stack,) = resolve_stacks([stack])
    requests = [Workload(str(i), p, o, 1) for i, (p, o) in enumerate(shapes)]
    planned = workload_deployment(arch, stack, gpu, requests)
    if planned.deployment is None or len(planned.shapes) < len(requests):
        return None
    runtimes = hardware_model_runtime(
        planned.deployment,
        np.array([p for p, _ in planned.shapes.values()]),
        np.array([o for _, o in planned.shapes.values()]),
    )
    per_gpu_second = gpu.hourly_price_usd / 3600
    dollars = [float(r) * planned.deployment.num_gpus * per_gpu_second for r in runtimes]
    return dollars, f"{arch.name} on {gpu.name}, {stack}, batch 1"
