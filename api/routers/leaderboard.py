"""/v1/leaderboard: JSON, and the HTML report."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse

from idealized_runtime.api.leaderboard_inputs import database_inputs
from idealized_runtime.api.routers.common import READ_ERRORS
from idealized_runtime.api.routers.deps import Reader, ReadSession
from idealized_runtime.api.schemas import (
    CurrentModelName,
    HardwareName,
    LeaderboardOut,
    StackName,
)
from idealized_runtime.leaderboard.build import build_leaderboard, leaderboard_payload
from idealized_runtime.leaderboard.current_models import CurrentModelsSpec

router = APIRouter(prefix="/v1", tags=["leaderboard"])

MAX_STACKS = 8
STACKS_QUERY = (
    "Reference stacks to compare the models under, side by side (repeat the parameter; the "
    "first is the ratios' baseline), e.g. stacks=helm-megatron-2022&stacks=pytorch-compiled"
)


MAX_CURRENT_MODELS = 32
CURRENT_MODELS_QUERY = (
    "Add the board of today's models: flagship (the catalog's flagship configs) or catalog "
    "architecture names (repeat the parameter), with each model at plan's best deployment "
    "under the standard SLO from the shipped figures (planning live is a CLI option: "
    "minutes of CPU)"
)


def current_models_param(
    current_models: list[CurrentModelName] | None = Query(
        default=None, max_length=MAX_CURRENT_MODELS, description=CURRENT_MODELS_QUERY
    ),
    current_gpu: HardwareName | None = Query(
        default=None, description="GPU of today's models (default h100-sxm)"
    ),
    current_stack: StackName | None = Query(
        default=None, description="Reference stack of today's models (default pytorch-compiled)"
    ),
) -> CurrentModelsSpec | None:
    """The board the query asks for (any current_* parameter adds it); names are the catalog's
    (an unknown one is a 422 listing them)."""
    from idealized_runtime.leaderboard.current_models import DEFAULT_GPU, parse_model_list

    if current_models is None and current_gpu is None and current_stack is None:
        return None
    spec = CurrentModelsSpec(
        models=parse_model_list(",".join(current_models or ["flagship"])),
        hardware=current_gpu or DEFAULT_GPU,
    )
    if current_stack is not None:
        spec = CurrentModelsSpec(spec.models, spec.hardware, current_stack)
    return spec.resolved()


def stacks_param(
    stacks: list[StackName] | None = Query(
        default=None, max_length=MAX_STACKS, description=STACKS_QUERY
    ),
) -> tuple[str, ...]:
    return tuple(stacks or ())


@router.get(
    "/leaderboard",
    response_model=LeaderboardOut,
    responses=READ_ERRORS,
    summary="Models ranked by idealized/denoised runtime, cost and accuracy",
)
def leaderboard(
    *,
    include_scenarios: bool = Query(default=False, description="Add per-scenario rows"),
    stacks: tuple[str, ...] = Depends(stacks_param),
    current: CurrentModelsSpec | None = Depends(current_models_param),
    _: Reader,
    session: ReadSession,
) -> LeaderboardOut:
    board = build_leaderboard(database_inputs(session), stacks=stacks, current_models=current)
    return LeaderboardOut.model_validate(
        leaderboard_payload(board, include_scenarios=include_scenarios)
    )


@router.get(
    "/leaderboard.html",
    response_class=HTMLResponse,
    responses={**READ_ERRORS, 200: {"content": {"text/html": {}}}},
    summary="The leaderboard as the self-contained HTML report",
)
def leaderboard_html(
    *,
    stacks: tuple[str, ...] = Depends(stacks_param),
    current: CurrentModelsSpec | None = Depends(current_models_param),
    _: Reader,
    session: ReadSession,
) -> HTMLResponse:
    from idealized_runtime.report.render import render_html

    board = build_leaderboard(database_inputs(session), stacks=stacks, current_models=current)
    return HTMLResponse(render_html(board))
