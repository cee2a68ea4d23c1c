"""/v1/measurement-sets: bulk upload (JSON or CSV), list, get, delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.db import read_session, write_session
from idealized_runtime.api.estimation import not_found
from idealized_runtime.api.idempotency import WriteContext, run_write, write_context
from idealized_runtime.api.routers.common import (
    ERRORS,
    READ_ERRORS,
    WRITE_ERRORS,
    RowId,
    page_params,
)
from idealized_runtime.api.schemas import (
    MeasurementOut,
    MeasurementSetCreate,
    MeasurementSetOut,
    MeasurementSource,
    Page,
)
from idealized_runtime.api.security import Principal, reader
from idealized_runtime.api.settings import get_settings
from idealized_runtime.api.uploads import parse_measurements_csv
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Dtype, Measurement, Provenance

router = APIRouter(prefix="/v1/measurement-sets", tags=["measurements"])
CSV_TYPES = ("text/csv", "application/csv", "text/plain")
CSV_EXAMPLE = (
    "model,num_prompt_tokens,num_output_tokens,runtime_s\ngptj-6b,512,1,0.12\ngptj-6b,512,32,0.71\n"
)


def _check_rows(count: int) -> None:
    limit = get_settings().max_upload_rows
    if count > limit:
        raise HTTPException(
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f"{count} measurements in one upload; at most {limit} (split the upload)",
        )


def _store(
    session: Session,
    context: WriteContext,
    *,
    name: str | None,
    source: str,
    metadata: dict[str, Any],
    stack: Provenance | None,
    measurements: list[Measurement],
) -> JSONResponse:
    _check_rows(len(measurements))

    def work(s: Session) -> MeasurementSetOut:
        row = crud.create_measurement_set(
            s,
            name=name,
            source=source,
            metadata=metadata,
            stack=stack,
            measurements=measurements,
            created_by=context.principal.api_key_id,
        )
        return crud.measurement_set_out(row)

    return run_write(session, context, work)


@router.post(
    "",
    status_code=201,
    response_model=MeasurementSetOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409]},
    summary="Upload a measurement set as JSON (all rows or none)",
)
def upload_json(
    payload: MeasurementSetCreate,
    context: WriteContext = Depends(write_context),
    session: Session = Depends(write_session),
) -> JSONResponse:
    return _store(
        session,
        context,
        name=payload.name,
        source=payload.source,
        metadata=payload.metadata,
        stack=payload.stack,
        measurements=payload.measurements,
    )


async def _upload_bytes(request: Request, accepted: tuple[str, ...], unsupported: str) -> bytes:
    """The upload: the whole body (of an ``accepted`` type) or the ``file`` part of a multipart
    form; any other type is a 415 saying ``unsupported``."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()  # read (and cache) first: the idempotency fingerprint needs it
    if content_type == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=20)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError("multipart upload: expected a file part named 'file'")
        return await upload.read()
    if content_type not in accepted:
        raise HTTPException(status_code=status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, detail=unsupported)
    return body


async def _csv_bytes(request: Request) -> bytes:
    """The CSV: the whole body (text/csv) or the ``file`` part of a multipart form."""
    return await _upload_bytes(
        request, CSV_TYPES, "send text/csv, or multipart/form-data with a 'file' part"
    )


@router.post(
    "/csv",
    status_code=201,
    response_model=MeasurementSetOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409], 415: {"description": "Not CSV"}},
    summary="Upload a measurement set as CSV (text/csv body or multipart 'file')",
    description=(
        "Columns model, num_prompt_tokens, num_output_tokens, runtime_s; optional batch_size, "
        "ttft_s, std_s. Errors name the row and column."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "text/csv": {
                    "schema": {"type": "string", "minLength": 1},
                    "example": CSV_EXAMPLE,
                },
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"file": {"type": "string", "format": "binary"}},
                        "required": ["file"],
                    }
                },
            },
        }
    },
)
def upload_csv(
    name: str | None = Query(default=None, min_length=1, max_length=200),
    source: MeasurementSource = Query(default="import"),
    hardware: str | None = Query(default=None, min_length=1, max_length=200),
    runner: str | None = Query(default=None, min_length=1, max_length=200),
    num_devices: int | None = Query(default=None, ge=1, le=100_000),
    dtype: Dtype | None = Query(default=None),
    data: bytes = Depends(_csv_bytes),
    context: WriteContext = Depends(write_context),
    session: Session = Depends(write_session),
) -> JSONResponse:
    measurements = parse_measurements_csv(data)
    given = {
        key: value
        for key, value in (
            ("hardware", hardware),
            ("runner", runner),
            ("num_devices", num_devices),
            ("dtype", dtype),
        )
        if value is not None
    }
    return _store(
        session,
        context,
        name=name,
        source=source,
        metadata={"format": "csv"},
        stack=Provenance(**given) if given else None,
        measurements=measurements,
    )


ARCHIVE_TYPES = (
    "application/gzip",
    "application/x-gzip",
    "application/x-tar",
    "application/zip",
    "application/octet-stream",
)


async def _archive_bytes(request: Request) -> bytes:
    """The archive: the whole body, or the ``file`` part of a multipart form."""
    return await _upload_bytes(
        request,
        ARCHIVE_TYPES,
        "send a .tar.gz or .zip (application/gzip, application/zip), or multipart "
        "with a 'file' part",
    )


@router.post(
    "/helm",
    status_code=201,
    response_model=MeasurementSetOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409], 415: {"description": "Not an archive"}},
    summary="Upload HELM runs (.tar.gz or .zip of benchmark_output/runs folders)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in ("application/gzip", "application/zip")
            },
        }
    },
    description=(
        "Reads each run's run_spec.json and per_instance_stats.json: one measurement per "
        "request with a measured inference_runtime (model: the run's model deployment). "
        "Store it, then fit it with method=denoised."
    ),
)
def upload_helm(
    name: str | None = Query(default=None, min_length=1, max_length=200),
    data: bytes = Depends(_archive_bytes),
    context: WriteContext = Depends(write_context),
    session: Session = Depends(write_session),
) -> JSONResponse:
    from idealized_runtime.timing.importers.helm import import_helm_archive

    frame = import_helm_archive(data)
    timed = frame[frame["runtime_s"].notna()]
    if timed.empty:
        raise InputError("the HELM runs hold no request with a measured inference_runtime")
    measurements = [
        Measurement(model=model, num_prompt_tokens=p, num_output_tokens=o, runtime_s=runtime)
        for model, p, o, runtime in zip(
            timed["model"].tolist(),
            timed["num_prompt_tokens"].tolist(),
            timed["num_output_tokens"].tolist(),
            timed["runtime_s"].tolist(),
            strict=True,
        )
    ]
    return _store(
        session,
        context,
        name=name,
        source="import",
        metadata={"format": "helm", "runs": int(frame["run"].nunique())},
        stack=Provenance(runner="api"),
        measurements=measurements,
    )


@router.get("", response_model=Page[MeasurementSetOut], responses=READ_ERRORS)
def list_sets(
    source: MeasurementSource | None = Query(default=None),
    model: str | None = Query(default=None, max_length=200, description="Sets with this model"),
    page: tuple[int, int] = Depends(page_params),
    _: Principal = Depends(reader),
    session: Session = Depends(read_session),
) -> Page[MeasurementSetOut]:
    limit, offset = page
    rows, total = crud.list_measurement_sets(
        session, source=source, model=model, limit=limit, offset=offset
    )
    return Page(
        items=[crud.measurement_set_out(r) for r in rows], total=total, limit=limit, offset=offset
    )


@router.get(
    "/{set_id:int}",
    response_model=MeasurementSetOut,
    responses={**READ_ERRORS, 404: ERRORS[404]},
)
def get_set(
    set_id: RowId, _: Principal = Depends(reader), session: Session = Depends(read_session)
) -> MeasurementSetOut:
    row = crud.get_measurement_set(session, set_id)
    if row is None:
        raise not_found(f"no measurement set {set_id}")
    return crud.measurement_set_out(row)


@router.get(
    "/{set_id:int}/measurements",
    response_model=Page[MeasurementOut],
    responses={**READ_ERRORS, 404: ERRORS[404]},
)
def list_set_measurements(
    set_id: RowId,
    model: str | None = Query(default=None, max_length=200),
    page: tuple[int, int] = Depends(page_params),
    _: Principal = Depends(reader),
    session: Session = Depends(read_session),
) -> Page[MeasurementOut]:
    if crud.get_measurement_set(session, set_id) is None:
        raise not_found(f"no measurement set {set_id}")
    limit, offset = page
    rows, total = crud.list_measurements(session, set_id, model=model, limit=limit, offset=offset)
    return Page(
        items=[crud.measurement_out(r) for r in rows], total=total, limit=limit, offset=offset
    )


@router.delete(
    "/{set_id:int}",
    status_code=204,
    responses={**WRITE_ERRORS, 404: ERRORS[404]},
    summary="Delete a set and its measurements (fits made from it are kept)",
)
def delete_set(
    set_id: RowId,
    context: WriteContext = Depends(write_context),
    session: Session = Depends(write_session),
) -> Response:
    if not crud.delete_measurement_set(session, set_id):
        raise not_found(f"no measurement set {set_id}")
    session.commit()
    return Response(status_code=204)
