"""/v1/monitor: provider monitoring. Store a round (authenticated; a round's id is its identity,
so a retry stores nothing twice), list rounds, and read the time series per provider and model
with the shifts flagged and a window's medians and spread."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from pydantic import BeforeValidator
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from idealized_runtime.api import monitor_crud
from idealized_runtime.api.bodies import json_body, request_body
from idealized_runtime.api.idempotency import REPLAY_HEADER, run_write
from idealized_runtime.api.monitor_schemas import (
    MonitorRoundIn,
    MonitorRoundOut,
    MonitorSeriesList,
    MonitorSeriesOut,
)
from idealized_runtime.api.routers.common import READ_ERRORS, WRITE_ERRORS
from idealized_runtime.api.routers.deps import Paging, Reader, ReadSession, Writer, WriteSession
from idealized_runtime.api.schemas import Page
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.rounds import PROVIDER_PATTERN
from idealized_runtime.trends.series import build_series

router = APIRouter(prefix="/v1/monitor", tags=["monitoring"])
ROUND_BODY = json_body(MonitorRoundIn, "MonitorRoundIn")
ROUND_EXAMPLE = {
    "round_id": "m-3f2a9c:000042:together:llama-3.1-8b",
    "provider": "together",
    "model": "llama-3.1-8b",
    "round_index": 42,
    "started_at": "2026-11-26T10:00:00Z",
    "finished_at": "2026-11-26T10:00:04Z",
    "status": "ok",
    "requests": 6,
    "failed_requests": 0,
    "ttft_s": 0.21,
    "itl_s": 0.011,
    "output_tokens_per_s": 88.0,
    "denoised_runtime_s": 0.62,
    "idealized_runtime_s": 0.31,
    "discrepancy": 2.0,
    "error_rate": 0.0,
    "usd": 0.00012,
    "reference": "llama-3.1-8b on h100-sxm, pytorch-compiled, batch 1",
    "shapes": [{"prompt_tokens": 128, "output_tokens": 16}],
    "measurements": [
        {
            "model": "llama-3.1-8b",
            "num_prompt_tokens": 128,
            "num_output_tokens": 16,
            "runtime_s": 0.4,
            "ttft_s": 0.2,
        }
    ],
}
Provider = Annotated[
    str | None, Query(max_length=100, pattern=PROVIDER_PATTERN, description="a provider's name")
]
Model = Annotated[str | None, Query(max_length=200, description="a model's name")]
# A date-time as ISO 8601 writes it (the zone is checked by ``_aware``, with its own message):
# pydantic alone would also take a bare number as seconds since 1970.
_ISO_DATE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?"
)


def _iso_date_time(value: object) -> object:
    if isinstance(value, str) and not _ISO_DATE_TIME.fullmatch(value):
        raise ValueError("expected an ISO 8601 date-time with its zone, e.g. 2026-11-26T10:00:00Z")
    return value


From = Annotated[
    datetime | None,
    BeforeValidator(_iso_date_time),
    Query(alias="from", description="rounds started at or after (ISO 8601 with its zone)"),
]
To = Annotated[
    datetime | None,
    BeforeValidator(_iso_date_time),
    Query(alias="to", description="rounds started at or before (ISO 8601 with its zone)"),
]


def _aware(start: datetime | None, end: datetime | None) -> None:
    """Times need their zone, and a range its order (422 otherwise)."""
    for name, moment in (("from", start), ("to", end)):
        if moment is not None and moment.tzinfo is None:
            raise InputError(f"{name} needs its time zone, e.g. 2026-11-26T10:00:00Z")
    if start is not None and end is not None and start > end:
        raise InputError("from is after to")


def _stored_before(session: Session, payload: MonitorRoundIn) -> Response | None:
    """The answer to a round whose id is stored: 200 with it (the same round), or 409."""
    existing = monitor_crud.get_round(session, payload.round_id)
    if existing is None:
        return None
    if existing.fingerprint != monitor_crud.round_fingerprint(payload):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"round {payload.round_id!r} is stored with other content; a round's id names one "
            "round",
        )
    body = jsonable_encoder(monitor_crud.round_out(existing))
    return JSONResponse(body, status_code=status.HTTP_200_OK, headers={REPLAY_HEADER: "true"})


@router.post(
    "/rounds",
    status_code=201,
    response_model=MonitorRoundOut,
    responses={
        200: {"model": MonitorRoundOut, "description": "This round was stored before"},
        **WRITE_ERRORS,
    },
    openapi_extra=request_body("MonitorRoundIn", examples={"round": ROUND_EXAMPLE}),
    summary="Store one monitoring round (its measurements become a measurement set)",
    description=(
        "What `idealized-runtime monitor --to URL` sends after each probe of an endpoint: the "
        "round's statistics, its probe shapes, its load summary and its measurements, stored "
        "in one transaction (the measurements as the measurement set `monitor:<round_id>`, "
        "source api_timing). The round id is the round's identity: the same round sent again "
        "answers 200 with the stored round and writes nothing; another round under a stored "
        "id is 409.\n\nRefused although schema-valid (rules between fields of the round): "
        "finished_at before started_at, failed_requests more than requests, a status that "
        "does not match the requests (ok: some request succeeded; degraded: most failed but "
        "not all; failed: none succeeded); a "
        "measurement's ttft_s is greater than its runtime_s; a measurement set of that name "
        "made by another upload (409)."
    ),
)
def post_round(
    *,
    context: Writer,
    payload: MonitorRoundIn = Depends(ROUND_BODY),
    session: WriteSession,
) -> Response:
    stored = _stored_before(session, payload)
    if stored is not None:
        return stored

    def work(s: Session) -> MonitorRoundOut:
        row, _ = monitor_crud.store_round(s, payload, context.principal.api_key_id)
        return monitor_crud.round_out(row)

    try:
        return run_write(session, context, work)
    except IntegrityError:
        # A twin of this request stored the round first: answer as if it had come first.
        session.rollback()
        stored = _stored_before(session, payload)
        if stored is None:
            raise
        return stored


@router.get(
    "/rounds",
    response_model=Page[MonitorRoundOut],
    responses=READ_ERRORS,
    summary="Monitoring rounds in time order",
    description="Filtered by provider, model, status and the time range their rounds started "
    "in. Refused: `from` or `to` without its time zone, `from` after `to` (422).",
)
def list_rounds(
    *,
    provider: Provider = None,
    model: Model = None,
    start: From = None,
    end: To = None,
    round_status: Annotated[
        str | None,
        Query(
            alias="status", pattern="^(ok|degraded|failed)$", description="ok, degraded or failed"
        ),
    ] = None,
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[MonitorRoundOut]:
    _aware(start, end)
    items, total = monitor_crud.list_rounds(
        session, provider=provider, model=model, start=start, end=end, status=round_status,
        limit=page.limit, offset=page.offset,
    )  # fmt: skip
    return page.of(items, total)


@router.get(
    "/series",
    response_model=MonitorSeriesList,
    responses=READ_ERRORS,
    summary="Time series per provider and model, with flagged shifts and a window's spread",
    description=(
        "One item per (provider, model) that matches: its rounds that started in [from, to] "
        "(TTFT, ITL, output tokens/s, denoised and idealized runtime, their ratio, error rate, "
        "dollars), the shifts flagged in that range, and the range's medians with their 10th "
        "and 90th percentiles. Shifts are looked for over each series' whole history (the "
        "baseline of a shift may lie before `from`), with the detector of docs/monitoring.md. "
        "Refused: `from` or `to` without its time zone, `from` after `to` (422)."
    ),
)
def get_series(
    *,
    provider: Provider = None,
    model: Model = None,
    start: From = None,
    end: To = None,
    _: Reader,
    session: ReadSession,
) -> MonitorSeriesList:
    _aware(start, end)
    items = []
    for series in build_series(monitor_crud.round_points(session, provider=provider, model=model)):
        shown = series.between(start, end)
        items.append(
            MonitorSeriesOut(
                provider=series.provider,
                model=series.model,
                reference=series.reference,
                points=list(shown.points),
                changes=list(shown.changes),
                window=series.window(start, end),
            )
        )
    return MonitorSeriesList(start=start, end=end, items=items)
