"""/v1/measurement-sets: bulk upload (JSON or CSV), list, get, delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.bodies import (
    json_chunks,
    request_body,
    spooled,
    text_lines,
    upload_chunks,
)
from idealized_runtime.api.estimation import not_found
from idealized_runtime.api.idempotency import (
    WriteContext,
    run_write,
    upload_write_context,
)
from idealized_runtime.api.openapi import register_request_schema
from idealized_runtime.api.routers.common import ERRORS, READ_ERRORS, WRITE_ERRORS, RowId
from idealized_runtime.api.routers.deps import Paging, Reader, ReadSession, Writer, WriteSession
from idealized_runtime.api.schemas import (
    MeasurementOut,
    MeasurementSetCreate,
    MeasurementSetOut,
    MeasurementSource,
    Page,
)
from idealized_runtime.api.settings import get_settings
from idealized_runtime.api.uploads import (
    UPLOAD_NAME,
    MeasurementColumns,
    csv_measurements,
    helm_measurements,
    json_measurement_set,
)
from idealized_runtime.core.types import Dtype, Provenance

router = APIRouter(prefix="/v1/measurement-sets", tags=["measurements"])
CSV_TYPES = ("text/csv", "application/csv", "text/plain")
register_request_schema("MeasurementSetCreate", MeasurementSetCreate)
CSV_EXAMPLE = (
    "model,num_prompt_tokens,num_output_tokens,runtime_s\ngptj-6b,512,1,0.12\ngptj-6b,512,32,0.71\n"
)


def _store(
    session: Session,
    context: WriteContext,
    *,
    name: str | None,
    source: str,
    metadata: dict[str, Any],
    stack: Provenance | None,
    measurements: MeasurementColumns,
) -> Response:
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
    openapi_extra=request_body("MeasurementSetCreate"),
    summary="Upload a measurement set as JSON (all rows or none)",
    description=(
        "Read measurement by measurement as the body arrives.\n\nRefused although "
        "schema-valid: a measurement whose ttft_s is greater than its runtime_s (a rule "
        "between two fields); more measurements than the server's max_upload_rows (422, at "
        "the first one past it); integers beyond 64 bits anywhere in the body (the streaming "
        "parser's range), a string longer than the server's max_string_bytes, a key repeated "
        "in one object (422, where it is read)."
    ),
)
def upload_json(
    *,
    request: Request,
    context: WriteContext = Depends(upload_write_context),
    session: WriteSession,
) -> Response:
    # Read measurement by measurement as the body arrives: memory holds the rows stored so far.
    payload, measurements = json_measurement_set(
        json_chunks(request, context.digest),
        get_settings().max_upload_rows,
        get_settings().max_string_bytes,
    )
    return _store(
        session,
        context,
        name=payload.name,
        source=payload.source,
        metadata=payload.metadata,
        stack=payload.stack,
        measurements=measurements,
    )


MULTIPART_FILE = {
    "schema": {
        "type": "object",
        "properties": {"file": {"type": "string", "format": "binary"}},
        "required": ["file"],
    }
}


@router.post(
    "/csv",
    status_code=201,
    response_model=MeasurementSetOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409]},
    summary="Upload a measurement set as CSV (text/csv body or multipart 'file')",
    description=(
        "Columns model, num_prompt_tokens, num_output_tokens, runtime_s; optional batch_size, "
        "ttft_s, std_s, ok (rows with ok false are skipped). Read as it streams in; errors name "
        "the row and column.\n\nRefused although schema-valid (rules on the file's content): "
        "text that is not UTF-8, not CSV, without a header row naming the required columns "
        "once each or without data rows; a value that is not a number as written (ASCII "
        "digits: no 1_000), out of range, a ttft_s greater than the row's runtime_s; a model "
        "name longer than 200 characters or with control, NUL or bidirectional-formatting "
        "characters; more rows than the server's max_upload_rows (422)."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "text/csv": {
                    "schema": {"type": "string", "minLength": 1},
                    "example": CSV_EXAMPLE,
                },
                "multipart/form-data": MULTIPART_FILE,
            },
        }
    },
)
def upload_csv(
    *,
    request: Request,
    name: str | None = Query(default=None, min_length=1, max_length=200),
    source: MeasurementSource = Query(default="import"),
    hardware: str | None = Query(default=None, min_length=1, max_length=200),
    runner: str | None = Query(default=None, min_length=1, max_length=200),
    num_devices: int | None = Query(default=None, ge=1, le=100_000),
    dtype: Dtype | None = Query(default=None),
    context: WriteContext = Depends(upload_write_context),
    session: WriteSession,
) -> Response:
    chunks = upload_chunks(
        request,
        CSV_TYPES,
        "send text/csv, or multipart/form-data with a 'file' part",
        context.digest,
    )
    measurements = csv_measurements(text_lines(chunks, UPLOAD_NAME), get_settings().max_upload_rows)
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
# The smallest .gz file (a .zip's end record alone is 22 bytes): anything shorter is no archive.
MIN_ARCHIVE_BYTES = 20


@router.post(
    "/helm",
    status_code=201,
    response_model=MeasurementSetOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409]},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                media: {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "minLength": MIN_ARCHIVE_BYTES,
                    }
                }
                for media in ("application/gzip", "application/zip")
            },
        }
    },
    summary="Upload HELM runs (.tar.gz or .zip of benchmark_output/runs folders)",
    description=(
        "Reads each run's run_spec.json and per_instance_stats.json: one measurement per "
        "request with a measured inference_runtime (model: the run's model deployment). "
        "Store it, then fit it with method=denoised. Nothing else is decompressed from a .zip; "
        "a .tar.gz is one compressed stream, so its other members are decompressed to be "
        "passed over (counted, not kept).\n\nRefused although schema-valid (rules on the "
        "file's content): bytes that are not a .tar(.gz, .bz2, .xz) or .zip archive, an "
        "archive without a HELM run, a run without its per_instance_stats.json, run files "
        "that are not JSON of HELM's shape, a value out of range (the error names the member, "
        "run and instance); an archive beyond the server's limits: bytes decompressed "
        "(max_archive_bytes), entries (max_archive_members), 64 MiB per run file, "
        "measurements (max_upload_rows) (422)."
    ),
)
def upload_helm(
    *,
    request: Request,
    name: str | None = Query(default=None, min_length=1, max_length=200),
    context: WriteContext = Depends(upload_write_context),
    session: WriteSession,
) -> Response:
    settings = get_settings()
    chunks = upload_chunks(
        request,
        ARCHIVE_TYPES,
        "send a .tar.gz or .zip (application/gzip, application/zip), or multipart "
        "with a 'file' part",
        context.digest,
    )
    # A .zip is read from its end: the upload is spooled (to disk beyond a few MB) first.
    with spooled(chunks) as file:
        measurements, runs = helm_measurements(
            file,
            max_rows=settings.max_upload_rows,
            max_bytes=settings.max_archive_bytes,
            max_members=settings.max_archive_members,
        )
    return _store(
        session,
        context,
        name=name,
        source="import",
        metadata={"format": "helm", "runs": runs},
        stack=Provenance(runner="api"),
        measurements=measurements,
    )


@router.get("", response_model=Page[MeasurementSetOut], responses=READ_ERRORS)
def list_sets(
    *,
    source: MeasurementSource | None = Query(default=None),
    model: str | None = Query(default=None, max_length=200, description="Sets with this model"),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[MeasurementSetOut]:
    rows, total = crud.list_measurement_sets(
        session, source=source, model=model, limit=page.limit, offset=page.offset
    )
    return page.of([crud.measurement_set_out(r) for r in rows], total)


@router.get(
    "/{set_id:int}",
    response_model=MeasurementSetOut,
    responses={**READ_ERRORS, 404: ERRORS[404]},
)
def get_set(set_id: RowId, _: Reader, session: ReadSession) -> MeasurementSetOut:
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
    *,
    set_id: RowId,
    model: str | None = Query(default=None, max_length=200),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[MeasurementOut]:
    if crud.get_measurement_set(session, set_id) is None:
        raise not_found(f"no measurement set {set_id}")
    rows, total = crud.list_measurements(
        session, set_id, model=model, limit=page.limit, offset=page.offset
    )
    return page.of([crud.measurement_out(r) for r in rows], total)


@router.delete(
    "/{set_id:int}",
    status_code=204,
    responses={**WRITE_ERRORS, 404: ERRORS[404]},
    summary="Delete a set and its measurements (fits made from it are kept)",
)
def delete_set(
    set_id: RowId,
    context: Writer,
    session: WriteSession,
) -> Response:
    def work(s: Session) -> None:
        if not crud.delete_measurement_set(s, set_id):
            raise not_found(f"no measurement set {set_id}")

    return run_write(session, context, work, status_code=204)
