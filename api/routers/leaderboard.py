"""/v1/leaderboard: JSON, and the HTML report."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse

from idealized_runtime.api.leaderboard_inputs import database_inputs
from idealized_runtime.api.routers.common import READ_ERRORS
from idealized_runtime.api.routers.deps import Reader, ReadSession
from idealized_runtime.api.schemas import LeaderboardOut, StackName
from idealized_runtime.leaderboard.build import build_leaderboard, leaderboard_payload

router = APIRouter(prefix="/v1", tags=["leaderboard"])

MAX_STACKS = 8
STACKS_QUERY = (
    "Reference stacks to compare the models under, side by side (repeat the parameter; the "
    "first is the ratios' baseline), e.g. stacks=helm-megatron-2022&stacks=pytorch-compiled"
)


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
    _: Reader,
    session: ReadSession,
) -> LeaderboardOut:
    board = build_leaderboard(database_inputs(session), stacks=stacks)
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
    _: Reader,
    session: ReadSession,
) -> HTMLResponse:
    from idealized_runtime.report.render import render_html

    return HTMLResponse(render_html(build_leaderboard(database_inputs(session), stacks=stacks)))
