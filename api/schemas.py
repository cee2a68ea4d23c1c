"""Request and response bodies of the REST API.

They compose the domain types of ``idealized_runtime.core.types``: a stored architecture is an
``Architecture`` plus its id, an uploaded measurement is a ``Measurement``, a fit is a
``FittedCostModel`` plus where it came from. Only API-specific envelopes are defined here.

One concern, one module on purpose: the service's wire format. Every router and the OpenAPI
document read these bodies, and several bodies share field types (token counts, table seconds,
an architecture or an HF config), so they stay in one place to look them up. The monitoring
bodies are in ``api.monitor_schemas``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from idealized_runtime.core.architectures import SUPPORTED_FAMILIES
from idealized_runtime.core.types import (
    MAX_RUNTIME_S,
    MAX_TOKENS,
    Architecture,
    FitMethod,
    FittedCostModel,
    Hardware,
    LoadSummary,
    Measurement,
    Name,
    OutputTokenCount,
    Provenance,
    RopeScaling,
    TokenCount,
)
from idealized_runtime.cost_model.planning.request import PlanSettings
from idealized_runtime.leaderboard.rows import (
    Cost,
    CurrentModelRow,
    ModelRow,
    ProviderPriceRow,
    ScenarioRow,
    StackModelRow,
    StackWorkloadRow,
    WorkloadRow,
)

Metric = Literal["idealized", "denoised"]
MeasurementSource = Literal["local_profile", "api_timing", "import"]
FitSource = Literal["fitted", "import"]
MAX_PAGE = 1000
MAX_COMPARE_MODELS = 50
# Batch lists are bounded by the server setting max_batch_rows (422); this is the schema's cap.
SCHEMA_MAX_ROWS = 10_000_000
# Row ids are 32-bit integers on every backend.
MAX_ID = 2**31 - 1

T = TypeVar("T")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# Request bodies are validated strictly (``api.bodies``): JSON types as the schema states them.
# NaN and Infinity are no JSON numbers; the input forms of the domain types refuse them too
# (their own floats accept them for the library's sake).
_NO_NAN = ConfigDict(allow_inf_nan=False)


def _finite_json(value: Any, where: str = "") -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where or 'value'}: NaN and Infinity are not JSON numbers")
    if isinstance(value, dict):
        for key, item in value.items():
            _finite_json(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _finite_json(item, f"{where}[{index}]")
    return value


# A free-form JSON object (metadata): any JSON, but JSON (no NaN, no Infinity).
JsonObject = Annotated[dict[str, Any], AfterValidator(_finite_json)]
HF_FAMILIES = tuple(dict.fromkeys((*SUPPORTED_FAMILIES, "gemma3")))


def _hf_config(value: dict[str, Any]) -> dict[str, Any]:
    _finite_json(value)
    family = value.get("model_type")
    if family not in HF_FAMILIES:
        raise ValueError(
            f"unsupported model_type {family!r}; supported: {', '.join(HF_FAMILIES)}"
            if family is not None
            else f"no model_type; one of {', '.join(HF_FAMILIES)}"
        )
    return value


# An HF config.json object: its model_type decides which other keys it needs.
HfConfig = Annotated[
    dict[str, Any],
    AfterValidator(_hf_config),
    WithJsonSchema(
        {
            "type": "object",
            "description": "An HF config.json object; its model_type decides the keys it needs",
            "required": ["model_type"],
            "properties": {"model_type": {"enum": list(HF_FAMILIES)}},
        }
    ),
]
# Characters a measurement's model name may not hold: control characters (NUL included) and
# bidirectional formatting (the CSV reader's rule, cost_model.fitting.file_rows).
MODEL_NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]+$"


class RopeScalingIn(RopeScaling):
    model_config = _NO_NAN


class ArchitectureIn(Architecture):
    """An architecture as a request gives it."""

    model_config = ConfigDict(allow_inf_nan=False, title="Architecture")
    rope_scaling: RopeScalingIn | None = None


class HardwareIn(Hardware):
    """An accelerator as a request gives it."""

    model_config = ConfigDict(allow_inf_nan=False, title="Hardware")


class MeasurementIn(Measurement):
    """One timed request as a request gives it."""

    model_config = ConfigDict(allow_inf_nan=False, title="Measurement")
    model: Name = Field(pattern=MODEL_NAME_PATTERN)

    @model_validator(mode="after")
    def _first_token_within_request(self) -> MeasurementIn:
        if self.ttft_s is not None and self.ttft_s > self.runtime_s:
            raise ValueError(
                f"ttft_s {self.ttft_s:g} is greater than runtime_s {self.runtime_s:g}: the first "
                "token comes within the request"
            )
        return self


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int = Field(description="Rows matching the filters, over all pages")
    limit: int
    offset: int


class ErrorOut(BaseModel):
    detail: Any = Field(description="What is wrong, and where")


# --- catalog -----------------------------------------------------------------------------------


class ModelOut(Architecture):
    """A stored architecture."""

    id: int
    total_parameters: int = Field(description="All weights, embeddings included")
    created_at: datetime


class HardwareOut(Hardware):
    id: int
    created_at: datetime


# --- measurements ------------------------------------------------------------------------------


class MeasurementSetCreate(_Body):
    """A set of timings uploaded as JSON; CSV goes to ``/v1/measurement-sets/csv``."""

    name: Name | None = Field(default=None, description="Unique; generated when omitted")
    source: MeasurementSource = "import"
    metadata: JsonObject = Field(default_factory=dict)
    stack: Provenance | None = None
    measurements: list[MeasurementIn] = Field(min_length=1, max_length=SCHEMA_MAX_ROWS)

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "name": "gpt-j-timings-2026-11",
                    "source": "api_timing",
                    "metadata": {"provider": "example"},
                    "measurements": [
                        {
                            "model": "gptj-6b",
                            "num_prompt_tokens": 512,
                            "num_output_tokens": 32,
                            "runtime_s": 1.21,
                        }
                    ],
                }
            ]
        },
    )


class MeasurementSetEnvelope(MeasurementSetCreate):
    """MeasurementSetCreate less its measurements, which are read one by one as the body streams
    in (``api.uploads.json_measurement_set``); they are validated here only when they are not
    a JSON array."""

    measurements: list[MeasurementIn] = Field(default_factory=list)


class MeasurementSetOut(BaseModel):
    id: int
    name: str
    source: MeasurementSource
    metadata: dict[str, Any]
    stack: Provenance | None
    row_count: int
    models: list[str]
    created_at: datetime


class MeasurementOut(Measurement):
    id: int
    set_id: int


# --- fits --------------------------------------------------------------------------------------


class FitCreate(_Body):
    measurement_set_id: int = Field(ge=1, le=MAX_ID)
    method: FitMethod = "default"
    models: list[Name] | None = Field(
        default=None, max_length=1000, description="Fit only these models of the set"
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"measurement_set_id": 1, "method": "default"}]},
    )


class FitOut(FittedCostModel):
    id: int
    source: FitSource
    measurement_set_id: int | None


# --- estimates ---------------------------------------------------------------------------------


class CostOut(BaseModel):
    """Cost-aware variants; present when the hardware (and so the GPU count) is known."""

    hardware: str
    num_gpus: int
    gpu_seconds: float
    joules: float | None
    dollars: float | None


STACK_DESCRIPTION = (
    "A reference stack (`idealized-runtime stacks`): estimate from the hardware model on that "
    "stack, for the model's architecture, instead of from a stored fit"
)


class EstimateQuery(BaseModel):
    """Query parameters of GET /v1/estimate."""

    model: Name = Field(examples=["openai/davinci"])
    prompt_tokens: TokenCount = Field(examples=[512])
    output_tokens: OutputTokenCount = Field(examples=[64], description="0: prompt only")
    metric: Metric = "idealized"
    fit_id: int | None = Field(default=None, ge=1, le=MAX_ID, description="Default: newest")
    hardware: Name | None = Field(default=None, description="Default: the fit's stack")
    num_gpus: int | None = Field(
        default=None, ge=1, le=100_000, description="Default: the serving model's minimum"
    )
    stack: Name | None = Field(default=None, description=STACK_DESCRIPTION)


class EstimateOut(BaseModel):
    model: str
    metric: Metric
    fit_id: int | None = Field(description="The stored fit used; null for a stack estimate")
    method: FitMethod | Literal["calibrated"]
    prompt_tokens: int
    output_tokens: int
    runtime_s: float
    cost: CostOut | None = None
    stack: str | None = Field(default=None, description="The reference stack, if one was asked")


@with_config(ConfigDict(extra="forbid"))
class RequestShape(TypedDict):
    """One request: its prompt and output lengths, in tokens."""

    prompt_tokens: TokenCount
    output_tokens: Annotated[OutputTokenCount, Field(description="0: prompt only")]


Requests = Annotated[list[RequestShape], Field(min_length=1, max_length=SCHEMA_MAX_ROWS)]


class BatchEstimateIn(_Body):
    """Many requests of one model."""

    model: Name
    requests: Requests
    metric: Metric = "idealized"
    fit_id: int | None = Field(default=None, ge=1, le=MAX_ID)
    hardware: Name | None = None
    num_gpus: int | None = Field(default=None, ge=1, le=100_000)
    stack: Name | None = Field(default=None, description=STACK_DESCRIPTION)
    include_rows: bool = Field(default=True, description="False: totals only")

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": "openai/davinci",
                    "requests": [
                        {"prompt_tokens": 512, "output_tokens": 1},
                        {"prompt_tokens": 1024, "output_tokens": 64},
                    ],
                }
            ]
        },
    )


class CostColumnsOut(BaseModel):
    hardware: str
    num_gpus: int
    gpu_seconds: list[float] | None
    joules: list[float] | None
    dollars: list[float] | None
    total_gpu_seconds: float
    total_joules: float | None
    total_dollars: float | None


class BatchEstimateOut(BaseModel):
    model: str
    metric: Metric
    fit_id: int | None
    method: FitMethod | Literal["calibrated"]
    stack: str | None = None
    count: int
    total_runtime_s: float
    mean_runtime_s: float
    runtime_s: list[float] | None = Field(description="Per row; null when include_rows is false")
    cost: CostColumnsOut | None = None
    server_time_ms: float = Field(description="Time spent computing, after the body was parsed")


class HfModelIn(_Body):
    """An architecture registered from a Hugging Face config.json object, under ``name``."""

    name: Name
    config: HfConfig


def _model_body_kind(value: object) -> str:
    """An HF config body is the one with a ``config`` object; anything else is our schema."""
    if isinstance(value, dict):
        return "hf_config" if "config" in value else "architecture"
    return "hf_config" if isinstance(value, HfModelIn) else "architecture"


# POST /v1/models: our Architecture, or {name, config} (tagged, so that validation errors point
# at the one form the body is, under loc ["body", "architecture" | "hf_config", ...]).
ModelIn = Annotated[
    Annotated[ArchitectureIn, Tag("architecture")] | Annotated[HfModelIn, Tag("hf_config")],
    Discriminator(_model_body_kind),
]


# Exactly one of a stored architecture's name or an HF config.json object (the other absent or
# null), for the bodies that take either.
ARCHITECTURE_OR_CONFIG: list[dict[str, Any]] = [
    {
        "required": ["architecture"],
        "properties": {"architecture": {"type": "string"}, "config": {"type": "null"}},
    },
    {
        "required": ["config"],
        "properties": {"config": {"type": "object"}, "architecture": {"type": "null"}},
    },
]


class HardwareModelEstimateIn(_Body):
    """One request estimated by the hardware model (no profile): what ``idealized-runtime
    estimate --arch`` computes. The architecture is a stored one (``architecture``) or a Hugging
    Face config.json object (``config``)."""

    architecture: Name | None = Field(default=None, description="A stored architecture name")
    config: HfConfig | None = None
    hardware: Name
    prompt_tokens: TokenCount
    output_tokens: TokenCount
    batch_size: int = Field(default=1, ge=1, le=4096)
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=1024)
    weights: str | None = Field(
        default=None,
        max_length=20,
        description="bf16 | fp16 | fp32 | fp8 | int8[-gN] | int4[-gN] | mxfp4; default: the "
        "checkpoint's precision (quantization_config), else bf16",
    )
    kv_cache: str | None = Field(default=None, max_length=20, description="bf16|fp16|fp8|int8")
    activations: str | None = Field(
        default=None, max_length=20, description="bf16 | fp16 | fp8 (fp8 tensor cores)"
    )
    ideal: bool = Field(default=False, description="Ideal roofline instead of the calibration")
    stack: Name | None = Field(
        default=None,
        description="Engine stack (vllm, sglang, tensorrt-llm: the request's steps on the "
        "engine's measured kernels) or reference stack (`idealized-runtime stacks`); default: "
        "the best-calibrated modern stack",
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "architecture": "llama-3.1-70b",
                    "hardware": "h100-sxm",
                    "prompt_tokens": 1000,
                    "output_tokens": 200,
                    "weights": "int4",
                }
            ],
            "oneOf": ARCHITECTURE_OR_CONFIG,
        },
    )

    @property
    def tp(self) -> int | None:
        """The tensor-parallel size under the name the hardware model's requests use."""
        return self.tensor_parallel_size


class HardwareModelEstimateOut(BaseModel):
    source: Literal["calibrated", "analytic", "engine"]
    calibration: str | None
    model: str
    hardware: str
    precision: str
    prompt_tokens: int
    output_tokens: int
    batch_size: int
    runtime_s: float
    alpha_s: float
    beta_s: float
    output_tokens_per_s: float
    tensor_parallel_size: int
    num_gpus: int
    gpu_seconds: float
    energy_j: float
    cost_usd: float
    notes: list[str]


# --- plan --------------------------------------------------------------------------------------


class PlanIn(PlanSettings):
    """A deployment plan (``idealized-runtime plan``): the architecture is a stored one
    (``architecture``) or a Hugging Face config.json object (``config``), the GPUs to consider
    are catalog names; the rest as ``PlanSettings``."""

    architecture: Name | None = Field(default=None, description="A stored architecture name")
    config: HfConfig | None = None
    hardware: list[Name] = Field(min_length=1, max_length=16, description="GPU names")

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "architecture": "llama-3.3-70b",
                    "hardware": ["h100-sxm", "b200"],
                    "workload": {"prompt_tokens": 8192, "output_tokens": 1024},
                    "slo": {"ttft_s": 2.0, "tpot_s": 0.0333},
                    "rate": 50,
                    "verify": False,
                }
            ],
            "oneOf": ARCHITECTURE_OR_CONFIG,
        },
    )


# --- compare -----------------------------------------------------------------------------------


class CompareIn(_Body):
    models: list[Name] = Field(min_length=1, max_length=MAX_COMPARE_MODELS)
    workload: Name | None = Field(
        default=None, description="A HELM scenario group (GET /v1/workloads) or scenario name"
    )
    requests: Requests | None = Field(default=None, description="Or your own requests")
    metric: Metric = "idealized"
    hardware: Name | None = Field(default=None, description="For GPU-seconds, joules, dollars")

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"models": ["openai/davinci", "openai/curie"], "workload": "mmlu"}],
            # Exactly one of workload / requests (the other absent or null).
            "oneOf": [
                {
                    "required": ["workload"],
                    "properties": {"workload": {"type": "string"}, "requests": {"type": "null"}},
                },
                {
                    "required": ["requests"],
                    "properties": {"requests": {"type": "array"}, "workload": {"type": "null"}},
                },
            ],
        },
    )


class CompareRow(BaseModel):
    model: str
    fit_id: int
    method: FitMethod
    total_runtime_s: float
    mean_runtime_s: float
    ratio_to_best: float = Field(description="total / the best (smallest) total; 1.0 is best")
    cost: CostOut | None = Field(default=None, description="Totals over the workload")
    cost_ratio_to_best: float | None = None


class CompareOut(BaseModel):
    workload: str
    num_requests: int
    mean_prompt_tokens: float
    mean_output_tokens: float
    metric: Metric
    best: str
    rows: list[CompareRow]


class WorkloadOut(BaseModel):
    name: str
    mean_prompt_tokens: float
    mean_output_tokens: float
    num_results: int


# --- capability scores -------------------------------------------------------------------------


# The range of each metric the leaderboard reads (any other metric: within +-MAX_SCORE).
MAX_SCORE = 1e12
SCORE_RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0),
    "exact_match": (0.0, 1.0),
    "raw_runtime_s": (0.0, MAX_RUNTIME_S),
    "idealized_runtime_s": (0.0, MAX_RUNTIME_S),
    "mean_prompt_tokens": (0.0, float(MAX_TOKENS)),
    "mean_output_tokens": (0.0, float(MAX_TOKENS)),
}


def score_in_range(metric: str, value: float) -> bool:
    low, high = SCORE_RANGES.get(metric, (-MAX_SCORE, MAX_SCORE))
    return low <= value <= high


class CapabilityScore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Name
    scenario: Name
    metric: Name = "exact_match"
    value: float = Field(
        allow_inf_nan=False,
        ge=-MAX_SCORE,
        le=MAX_SCORE,
        description="accuracy and exact_match in [0, 1]; raw_runtime_s and "
        "idealized_runtime_s in [0, 10^6] s; mean_prompt_tokens and mean_output_tokens in "
        "[0, 10^7]; any other metric within +-10^12",
    )

    @model_validator(mode="after")
    def _within_the_metric_range(self) -> CapabilityScore:
        if not score_in_range(self.metric, self.value):
            low, high = SCORE_RANGES.get(self.metric, (-MAX_SCORE, MAX_SCORE))
            raise ValueError(
                f"{self.metric} must be between {low:g} and {high:g}, not {self.value:g}"
            )
        return self


class CapabilityScoresIn(_Body):
    scores: list[CapabilityScore] = Field(min_length=1, max_length=100_000)


class CapabilityScoreOut(BaseModel):
    id: int
    model: str
    scenario: str
    metric: str
    value: float


# --- service -----------------------------------------------------------------------------------


class HealthOut(BaseModel):
    status: Literal["ok"]
    database: Literal["ok"]


class VersionOut(BaseModel):
    version: str
    api: Literal["v1"]
    database_backend: str
    schema_revision: str | None


# --- leaderboard -------------------------------------------------------------------------------


# The leaderboard's own row models, read from its (frozen) rows as they are.
CostPer1000 = Cost
LeaderboardModel = ModelRow
LeaderboardWorkload = WorkloadRow
LeaderboardScenario = ScenarioRow
LeaderboardStackModel = StackModelRow
LeaderboardStackWorkload = StackWorkloadRow


def _stack_names() -> tuple[str, ...]:
    """Every reference stack name and alias the shipped data knows (the ``stacks`` enum)."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import ALIASES, shipped_stacks

    return tuple(sorted({*shipped_stacks(), *ALIASES}))


# A reference stack's name (`idealized-runtime stacks`); an unknown one is a 422.
StackName = Literal[_stack_names()]  # type: ignore[valid-type]


def _current_model_names() -> tuple[str, ...]:
    """``flagship`` and every catalog architecture (the ``current_models`` enum)."""
    from idealized_runtime.core.catalog import architectures
    from idealized_runtime.leaderboard.current_models import FLAGSHIP

    return (FLAGSHIP, *sorted(architectures()))


def _hardware_names() -> tuple[str, ...]:
    from idealized_runtime.core.catalog import hardware_catalog

    return tuple(sorted(hardware_catalog()))


# Today's models and their GPU: catalog names (an unknown one is a 422).
CurrentModelName = Literal[_current_model_names()]  # type: ignore[valid-type]
HardwareName = Literal[_hardware_names()]  # type: ignore[valid-type]


class CurrentModelsOut(BaseModel):
    """The board of today's models (``leaderboard.current_models``): per model the batch-1
    idealized figures and, in ``best_deployment``, plan's best deployment under the standard
    SLO (``serving_standard``) from the shipped figures (``serving_provenance``)."""

    hardware: str
    stack: str
    baseline_stack: str
    serving: str = Field(description="Where best_deployment comes from: shipped or none")
    serving_standard: str = Field(description="The workload, SLO, engines and GPUs planned for")
    serving_provenance: str = Field(description="The shipped figures' date, machine, command")
    models: list[CurrentModelRow]
    prices: list[ProviderPriceRow]


class LeaderboardOut(BaseModel):
    created_at: datetime
    source: str
    models: list[LeaderboardModel]
    workloads: list[LeaderboardWorkload]
    scenarios: list[LeaderboardScenario] | None = Field(
        default=None, description="Per (scenario, model) rows when include_scenarios=true"
    )
    stacks: list[str] | None = Field(
        default=None, description="The compared stacks (aliases resolved) when stacks= is given"
    )
    stack_hardware: str | None = Field(
        default=None, description="GPU the compared stacks' hardware-model runtimes are on"
    )
    stack_models: list[LeaderboardStackModel] | None = Field(
        default=None,
        description="Per (model, stack) when stacks= is given: mean idealized runtime over the "
        "workloads every stack covers, and the ratio to the first stack's",
    )
    stack_workloads: list[LeaderboardStackWorkload] | None = Field(
        default=None, description="Per (model, workload, stack) when stacks= is given"
    )
    current_models: CurrentModelsOut | None = Field(
        default=None, description="Today's models when current_models= is given"
    )


# --- load summaries ----------------------------------------------------------------------------

LOAD_SOURCE_PATTERN = r"^[A-Za-z0-9_.:-]+$"
LoadSummaries = Annotated[list[LoadSummary], Field(min_length=1, max_length=100_000)]


def _slo_pattern() -> str:
    """``ttft=S,tpot=S,e2e=S``: each target at most once, in any order, S a positive decimal
    number of seconds (a digit other than 0 somewhere)."""
    from itertools import permutations

    seconds = r"([0-9]*[1-9][0-9]*(\.[0-9]*)?|0*\.[0-9]*[1-9][0-9]*)"
    orders = [
        ",".join(f"{name}={seconds}" for name in order)
        for count in (1, 2, 3)
        for order in permutations(("ttft", "tpot", "e2e"), count)
    ]
    return "^(" + "|".join(f"({order})" for order in orders) + ")$"


SLO_PATTERN = _slo_pattern()
# What a pattern asks for, in words: errors say this instead of quoting the expression.
PATTERN_MEANINGS = {
    SLO_PATTERN: "expected ttft=S,tpot=S,e2e=S: any of the three, each at most once, "
    "S a positive number of seconds (e.g. ttft=0.5,e2e=10)",
    LOAD_SOURCE_PATTERN: "expected letters, digits and _ . : - only",
    MODEL_NAME_PATTERN: "a model name may not hold control, NUL or bidirectional-formatting "
    "characters",
}


# --- HELM runtime tables -----------------------------------------------------------------------

# A table's runtimes are seconds, bounded like measured ones: an estimate from them stays finite.
TableSeconds = Annotated[float, Field(ge=0, le=MAX_RUNTIME_S, allow_inf_nan=False)]


PROMPT_SIZE_PATTERN = r"^[1-9][0-9]{0,6}$"
PromptRuntimes = Annotated[
    dict[Annotated[str, Field(pattern=PROMPT_SIZE_PATTERN)], TableSeconds],
    Field(min_length=1, max_length=10_000),
    # Every key a prompt size (pydantic would state the key rule as patternProperties, which
    # lets any other key through).
    WithJsonSchema(
        {
            "type": "object",
            "description": "Prompt size (tokens, as a string) -> runtime; keys in any order",
            "minProperties": 1,
            "maxProperties": 10_000,
            "propertyNames": {"pattern": PROMPT_SIZE_PATTERN},
            "additionalProperties": {"type": "number", "minimum": 0, "maximum": MAX_RUNTIME_S},
        }
    ),
]


class HelmTableEntry(_Body):
    """One model's row of HELM's inference_*_runtimes.json."""

    runtime_per_output_token: TableSeconds
    runtime_for_prompt_tokens: PromptRuntimes | None = None
    # HELM's older tables (before its first release): looked up without scaling in the grid.
    runtime_for_input_tokens: PromptRuntimes | None = None
    overhead: TableSeconds | None = None

    model_config = ConfigDict(
        json_schema_extra={
            # Exactly one alpha table (the other absent or null).
            "oneOf": [
                {
                    "required": [first],
                    "properties": {first: {"type": "object"}, second: {"type": "null"}},
                }
                for first, second in [
                    ("runtime_for_prompt_tokens", "runtime_for_input_tokens"),
                    ("runtime_for_input_tokens", "runtime_for_prompt_tokens"),
                ]
            ]
        }
    )

    @model_validator(mode="after")
    def _one_alpha_table(self) -> HelmTableEntry:
        if (self.runtime_for_prompt_tokens is None) == (self.runtime_for_input_tokens is None):
            raise ValueError(
                "give exactly one of runtime_for_prompt_tokens and runtime_for_input_tokens "
                "(HELM's older tables)"
            )
        return self


HelmTable = Annotated[dict[Name, HelmTableEntry], Field(min_length=1, max_length=10_000)]


class LoadSummaryOut(LoadSummary):
    id: int
    source: str = Field(description="measured (default), simulated, or the uploader's label")
    created_at: datetime


class LoadSummariesWritten(BaseModel):
    written: int
    items: list[LoadSummaryOut]
