"""/v1/plan: the best deployment under an SLO, as ``idealized-runtime plan`` answers it."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from idealized_runtime.api.bodies import json_body, request_body
from idealized_runtime.api.compute import check_plan_work, compute_slot, run_computation
from idealized_runtime.api.db import get_database
from idealized_runtime.api.estimation import not_found
from idealized_runtime.api.routers.common import COMPUTE_ERRORS
from idealized_runtime.api.routers.deps import Reader
from idealized_runtime.api.schemas import PlanIn
from idealized_runtime.api.state import estimate_cache
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanResult

router = APIRouter(prefix="/v1", tags=["plan"])


@router.post(
    "/plan",
    response_model=PlanResult,
    responses=COMPUTE_ERRORS,
    openapi_extra=request_body("PlanIn"),
    summary="The best deployment under an SLO: Pareto frontiers per GPU and engine",
    description=(
        "Searches engine stacks, precisions, layouts (TP, EP, attention DP), aggregated and "
        "disaggregated (xPyD) serving and concurrency for `workload` on each of `hardware`, "
        "and returns each GPU and engine's Pareto frontier (output tokens/s per GPU against "
        "tokens/s per user), the configuration with the most tokens/s per GPU under `slo`, "
        "the replicas and GPUs for `rate`, and dollars and joules per million output tokens. "
        "The architecture is a stored one or an HF config.json object (`config`). Unknown "
        "GPUs: 404; a model that fits nowhere, an unknown stack or format, a workload "
        "longer than the architecture's context length, or of one output token (a plan "
        "trades tokens/s per user, 1 / TPOT, which needs two): 422; an "
        "`activations` format the weights cannot take (a precision and hardware pair the "
        "engines do not run): 422. Refused by "
        "rules that depend on stored data: when no deployment could be evaluated (the stored "
        "GPU has no kernel measurements of any engine stack, or the model fits on none of its "
        "layouts), 422 says why for each stack; and by rules on the content of `config` "
        "(the keys its model_type needs, a consistent shape). A workload that gives both "
        "shared prefix tokens and a hit rate together, or a shared prefix longer than the "
        "prompts, is refused with its reason (422). A plan "
        "that would evaluate more deployments x concurrency levels, or simulate more requests, "
        "than the server allows is refused in one line (422); while the server runs as many "
        "computations as it allows, 503 with Retry-After."
    ),
)
def create_plan(
    request: Request,
    _: Reader,
    payload: PlanIn = Depends(json_body(PlanIn, "PlanIn")),
    _slot: None = Depends(compute_slot),
) -> PlanResult:
    from idealized_runtime.cost_model.planning.search import plan

    cache = estimate_cache()
    with get_database().read_sessions() as session:
        architecture = _architecture(
            payload, cache.architecture_for(session, payload.architecture or "")
        )
        gpus = [
            cache.cached_hardware(n) or cache.load_hardware(session, n) for n in payload.hardware
        ]
    settings = payload.model_dump(exclude={"architecture", "config", "hardware"})
    question = PlanRequest(architecture=architecture, hardware=gpus, **settings)
    check_plan_work(question, request)
    return run_computation(plan, question)


def _architecture(payload: PlanIn, stored: Architecture | None) -> Architecture:
    """The body's HF config, else the stored architecture it names (404 when none)."""
    from idealized_runtime.core.architectures import architecture_from_hf_config

    if (payload.architecture is None) == (payload.config is None):
        raise InputError("give exactly one of architecture (a stored name) or config")
    if payload.config is not None:
        label = str(payload.config.get("_name_or_path") or "config")
        return architecture_from_hf_config(payload.config, name=label, path="config")
    if stored is None:
        raise not_found(f"unknown architecture {payload.architecture!r}; GET /v1/models lists them")
    return stored
