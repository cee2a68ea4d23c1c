"""/v1/fits: fit stored measurements (cost_model.fitting), list, get, HELM JSON export/import."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.bodies import json_body, request_body
from idealized_runtime.api.estimation import not_found
from idealized_runtime.api.idempotency import run_write
from idealized_runtime.api.routers.common import ERRORS, READ_ERRORS, WRITE_ERRORS, RowId
from idealized_runtime.api.routers.deps import Paging, Reader, ReadSession, Writer, WriteSession
from idealized_runtime.api.schemas import (
    MAX_ID,
    FitCreate,
    FitOut,
    HelmTable,
    HelmTableEntry,
    Metric,
    Page,
)
from idealized_runtime.api.state import invalidate_caches
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import FitMethod, Provenance
from idealized_runtime.cost_model.fitting.helm_format import (
    export_helm_table,
    import_helm_table,
)
from idealized_runtime.cost_model.fitting.methods import fit_measurements

router = APIRouter(prefix="/v1/fits", tags=["fits"])

HELM_TABLE_EXAMPLE = {
    "openai/davinci": {
        "runtime_per_output_token": 0.081,
        "runtime_for_prompt_tokens": {"1": 0.084, "256": 0.109, "512": 0.178, "1024": 0.323},
    }
}


class FitsOut(BaseModel):
    fits: list[FitOut]


@router.post(
    "",
    status_code=201,
    response_model=FitsOut,
    responses={**WRITE_ERRORS, 404: ERRORS[404]},
    openapi_extra=request_body("FitCreate"),
    summary="Fit the measurements of a stored set (one fit per model)",
    description=(
        "Refused although schema-valid (rules on stored data): a set not stored (404); a set "
        "without rows of the requested models, timings the method cannot fit (422): the helm "
        "method reads alpha(p) from timings with one output token; every method needs "
        "timings with more than one output token, the default and denoised ones at least two "
        "output lengths per model, one batch size per model and enough timings for their "
        "parameters."
    ),
)
def create_fits(
    *,
    context: Writer,
    request: FitCreate = Depends(json_body(FitCreate, "FitCreate")),
    session: WriteSession,
) -> JSONResponse:
    set_row = crud.get_measurement_set(session, request.measurement_set_id)
    if set_row is None:
        raise not_found(f"no measurement set {request.measurement_set_id}")
    set_id = set_row.id
    stack = Provenance(**set_row.stack.spec) if set_row.stack else None
    measurements = crud.set_measurements(session, set_id, request.models)
    if not measurements:
        raise InputError(f"measurement set {set_id} has no rows of the requested models")
    # Fit before the write transaction starts (SQLite: do not hold the write lock meanwhile).
    session.rollback()
    try:
        fits = fit_measurements(measurements, request.method, stack=stack)
    except InputError:
        raise
    except (ValueError, ArithmeticError) as error:  # e.g. timings spanning 1e-300 .. 1e300 s
        raise InputError(
            f"measurement set {set_id}: the {request.method} fit failed on these timings: {error}"
        ) from None

    def work(s: Session) -> FitsOut:
        rows = [
            crud.add_fit(s, fit, source="fitted", measurement_set_id=set_id)
            for fit in fits.values()
        ]
        return FitsOut(fits=[crud.fit_out(row) for row in rows])

    response = run_write(session, context, work)
    invalidate_caches()
    return response


@router.post(
    "/import/helm",
    status_code=201,
    response_model=FitsOut,
    responses=WRITE_ERRORS,
    openapi_extra=request_body("HelmTable", examples={"table": HELM_TABLE_EXAMPLE}),
    summary="Import a table in HELM's JSON format (inference_*_runtimes.json)",
    description=(
        "One entry per model; prompt sizes in any order. Runtimes are seconds between 0 and "
        "10^6, as measured ones. An entry keyed `runtime_for_input_tokens` (HELM's older "
        "tables) keeps HELM's unscaled lookup of that form. Refused although schema-valid: an "
        "entry with both alpha keys or with neither (422)."
    ),
)
def import_helm(
    *,
    metric: Metric = Query(default="idealized", description="Which kind of table it is"),
    context: Writer,
    table: dict[str, HelmTableEntry] = Depends(json_body(HelmTable, "HelmTable")),
    session: WriteSession,
) -> JSONResponse:
    method: FitMethod = "helm" if metric == "idealized" else "denoised"
    fits = import_helm_table(
        {model: entry.model_dump(exclude_none=True) for model, entry in table.items()}, method
    )

    def work(s: Session) -> FitsOut:
        rows = [
            crud.add_fit(s, fit, source="import", measurement_set_id=None) for fit in fits.values()
        ]
        return FitsOut(fits=[crud.fit_out(row) for row in rows])

    response = run_write(session, context, work)
    invalidate_caches()
    return response


@router.get("", response_model=Page[FitOut], responses=READ_ERRORS)
def list_fits(
    *,
    model: str | None = Query(default=None, max_length=200),
    method: FitMethod | None = Query(default=None),
    measurement_set_id: int | None = Query(default=None, ge=1, le=MAX_ID),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[FitOut]:
    rows, total = crud.list_fits(
        session,
        model=model,
        method=method,
        measurement_set_id=measurement_set_id,
        limit=page.limit,
        offset=page.offset,
    )
    return page.of([crud.fit_out(r) for r in rows], total)


@router.get(
    "/export/helm",
    response_model=dict[str, Any],
    responses={**READ_ERRORS, 404: ERRORS[404]},
    summary="The current fits in HELM's JSON format (inference_*_runtimes.json)",
    description=(
        "One entry per model: its newest fit of the metric (or the fits listed in `fit_id`). "
        "Non-HELM fits are projected onto HELM's form (see cost_model.fitting.helm_format)."
    ),
)
def export_helm(
    *,
    metric: Metric = Query(default="idealized"),
    model: list[str] | None = Query(default=None, max_length=1000),
    fit_id: list[Annotated[int, Field(ge=1, le=MAX_ID)]] | None = Query(
        default=None, max_length=1000
    ),
    _: Reader,
    session: ReadSession,
) -> dict[str, Any]:
    if fit_id:
        rows = []
        for identifier in fit_id:
            row = crud.get_fit(session, identifier)
            if row is None:
                raise not_found(f"no fit {identifier}")
            rows.append(row)
        chosen = {row.model: row for row in rows}
    else:
        chosen = crud.current_fits(session, metric)
        if model:
            chosen = {name: row for name, row in chosen.items() if name in set(model)}
    fits = {name: crud.fit_model(chosen[name]) for name in sorted(chosen)}
    return export_helm_table(fits)


@router.get("/{fit_id}", response_model=FitOut, responses={**READ_ERRORS, 404: ERRORS[404]})
def get_fit(fit_id: RowId, _: Reader, session: ReadSession) -> FitOut:
    row = crud.get_fit(session, fit_id)
    if row is None:
        raise not_found(f"no fit {fit_id}")
    return crud.fit_out(row)
