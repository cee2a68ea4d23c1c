"""The leaderboard's data: what it is built from (``LeaderboardInputs``: models with their fits,
profiles, scenario results, cost rates) and the rows it is made of (per model, per scenario, per
workload, per compared stack), with the names they share across the report, the CSV files and
the REST API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from idealized_runtime.core.scenarios import ScenarioResult, Workload
from idealized_runtime.core.types import (
    Architecture,
    FittedCostModel,
    Hardware,
    Measurement,
    utc_now,
)
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


BestStatus = Literal["met", "no-fit", "no-slo", "no-engine", "not-computed"]


class BestDeployment(_Row):
    """A model at ``plan``'s best deployment on the board's GPU under the board's standard SLO
    (``leaderboard.best_deployments.STANDARD``): the engine and layout, its output tokens/s per
    GPU and dollars per 1M output tokens as ``plan`` ranks them, and its request-by-request
    simulation; or, with ``status`` other than ``met``, why there is none (``note``)."""

    status: BestStatus = Field(
        description="met: a deployment meets the SLO in its simulation; no-fit: the model does "
        "not fit the GPUs; no-slo: no deployment meets the SLO; no-engine: no engine stack is "
        "calibrated on the GPU; not-computed: not planned (see note)"
    )
    engine: str | None = None
    weights: str | None = None
    layout: str | None = Field(default=None, description="plan's layout, e.g. 1P(tp2)1D tp4")
    token_budget: int | None = None
    gpus: int | None = Field(default=None, description="Per replica")
    concurrency: int | None = Field(default=None, description="Closed-loop clients per replica")
    output_tokens_per_s_per_gpu: float | None = None
    usd_per_million_output_tokens: float | None = Field(
        default=None, description="The replica's GPU-seconds per 1M output tokens, priced"
    )
    tokens_per_s_per_user: float | None = None
    ttft_s: float | None = Field(default=None, description="The steady-state estimate's")
    tpot_s: float | None = None
    simulated_ttft_p50_s: float | None = None
    simulated_tpot_p50_s: float | None = None
    simulated_output_tokens_per_s_per_gpu: float | None = None
    candidates_simulated: int = 0
    source: Literal["shipped", "live"] = Field(
        default="live", description="shipped: read from data/current_models_serving.json"
    )
    note: str | None = None

    def deployment_text(self) -> str:
        """``vllm tp2 c=206``, or the reason in a few words."""
        if self.status == "met":
            return f"{self.engine} {self.layout} c={self.concurrency}"
        if self.status == "no-slo" and self.candidates_simulated:
            return f"none verified ({self.candidates_simulated} simulated)"
        return {
            "no-fit": "does not fit",
            "no-slo": "misses the SLO",
            "no-engine": "no engine data",
        }.get(self.status, "not computed")

    def cell_text(self) -> str:
        if self.status != "met":
            return self.deployment_text()
        return f"{self.deployment_text()}: {self.output_tokens_per_s_per_gpu:,.0f} tok/s/GPU"


class CurrentModelRow(_Row):
    """One of today's models on the chosen GPU and stack, and under HELM's 2022 stack."""

    model: str = Field(description="Catalog architecture")
    family: str
    num_parameters: int
    active_parameters: int | None = Field(description="Per token, for mixtures of experts")
    precision: str = Field(description="The checkpoint's (weights, KV cache, compute)")
    hardware: str
    stack: str
    tp: int | None
    num_gpus: int | None
    idealized_runtime_s: float | None = Field(description="Mean over the HELM workloads")
    cost: Cost = Field(description="GPU-seconds, $ and kJ per 1,000 requests")
    usd_per_million_output_tokens: float | None = Field(
        description="Decode GPU-seconds of a million output tokens at the GPU's hourly price"
    )
    output_tokens_per_s_per_user: float | None = Field(description="1 / decode step, batch 1")
    baseline_stack: str = HELM_STACK
    baseline_runtime_s: float | None = Field(
        description="The same model and GPU under HELM's 2022 stack, over the same workloads"
    )
    ratio: float | None = Field(description="idealized_runtime_s / baseline_runtime_s")
    num_workloads: int
    note: str | None = None
    best_deployment: BestDeployment | None = Field(
        default=None,
        description="plan's best deployment on this GPU under the board's standard SLO (None: "
        "not asked for)",
    )


class ProviderPriceRow(_Row):
    """A provider's price for one of the board's models beside its idealized dollars."""

    provider: str
    model: str
    architecture: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    usd_per_1000: float = Field(description="At the HELM workloads' mean tokens, per 1,000")
    idealized_usd_per_1000: float | None
    ratio: float | None = Field(description="usd_per_1000 / idealized_usd_per_1000")
    idealized_usd_per_million_output_tokens: float | None


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
