"""/v1/leaderboard: JSON, and the HTML report."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from api.db import read_session
from api.leaderboard_inputs import database_inputs
from api.routers.common import READ_ERRORS
from api.schemas import (
    LeaderboardModel,
    LeaderboardOut,
    LeaderboardScenario,
    LeaderboardWorkload,
)
from api.security import Principal, reader
from idealized_runtime.leaderboard import build_leaderboard

router = APIRouter(prefix="/v1", tags=["leaderboard"])


@router.get(
    "/leaderboard",
    response_model=LeaderboardOut,
    responses=READ_ERRORS,
    summary="Models ranked by idealized/denoised runtime, cost and accuracy",
)
def leaderboard(
    include_scenarios: bool = Query(default=False, description="Add per-scenario rows"),
    _: Principal = Depends(reader),
    session: Session = Depends(read_session),
) -> LeaderboardOut:
    board = build_leaderboard(database_inputs(session))
    return LeaderboardOut(
        created_at=board.inputs.created_at,
        source=board.inputs.source,
        models=[LeaderboardModel.model_validate(row) for row in board.models],
        workloads=[LeaderboardWorkload.model_validate(row) for row in board.workload_rows],
        scenarios=[LeaderboardScenario.model_validate(row) for row in board.scenario_rows]
        if include_scenarios
        else None,
    )


@router.get(
    "/leaderboard.html",
    response_class=HTMLResponse,
    responses={**READ_ERRORS, 200: {"content": {"text/html": {}}}},
    summary="The leaderboard as the self-contained HTML report",
)
def leaderboard_html(
    _: Principal = Depends(reader), session: Session = Depends(read_session)
) -> HTMLResponse:
    from idealized_runtime.report.render import render_html

    return HTMLResponse(render_html(build_leaderboard(database_inputs(session))))
