"""/v1/capability-scores: accuracy (and other per-scenario figures) of models, for the
leaderboard's efficiency-vs-capability frontiers."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.bodies import json_body, request_body
from idealized_runtime.api.idempotency import run_write
from idealized_runtime.api.routers.common import READ_ERRORS, WRITE_ERRORS
from idealized_runtime.api.routers.deps import Paging, Reader, ReadSession, Writer, WriteSession
from idealized_runtime.api.schemas import CapabilityScoreOut, CapabilityScoresIn, Page

router = APIRouter(prefix="/v1/capability-scores", tags=["capability scores"])


class ScoresWritten(BaseModel):
    written: int


@router.post(
    "",
    status_code=201,
    response_model=ScoresWritten,
    responses=WRITE_ERRORS,
    openapi_extra=request_body("CapabilityScoresIn"),
    summary="Insert or replace (model, scenario, metric) values",
    description=(
        "Metrics the leaderboard reads: `exact_match` (or `accuracy`), `raw_runtime_s`, "
        "`idealized_runtime_s`, `mean_prompt_tokens`, `mean_output_tokens`.\n\nRefused "
        "although schema-valid: a value outside its metric's range (a rule between two "
        "fields): accuracy and exact_match (the default metric) in [0, 1], raw_runtime_s and "
        "idealized_runtime_s in [0, 10^6] s, mean_prompt_tokens and mean_output_tokens in "
        "[0, 10^7] (422)."
    ),
)
def put_scores(
    *,
    context: Writer,
    payload: CapabilityScoresIn = Depends(json_body(CapabilityScoresIn, "CapabilityScoresIn")),
    session: WriteSession,
) -> JSONResponse:
    def work(s: Session) -> ScoresWritten:
        return ScoresWritten(written=crud.upsert_capability_scores(s, payload.scores))

    return run_write(session, context, work)


@router.get("", response_model=Page[CapabilityScoreOut], responses=READ_ERRORS)
def list_scores(
    *,
    model: str | None = Query(default=None, max_length=200),
    scenario: str | None = Query(default=None, max_length=200),
    metric: str | None = Query(default=None, max_length=200),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[CapabilityScoreOut]:
    items, total = crud.list_capability_scores(
        session, model=model, scenario=scenario, metric=metric, limit=page.limit, offset=page.offset
    )
    return page.of(items, total)
