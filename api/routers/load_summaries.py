"""/v1/load-summaries: what users saw from a model at each load level (throughput, latency
percentiles, error rate, SLO goodput), measured or simulated; upload summaries or raw rows."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.db import read_session, write_session
from idealized_runtime.api.idempotency import WriteContext, run_write, write_context
from idealized_runtime.api.routers.common import READ_ERRORS, WRITE_ERRORS, page_params
from idealized_runtime.api.schemas import LoadSource, LoadSummariesWritten, LoadSummaryOut, Page
from idealized_runtime.api.security import Principal, reader
from idealized_runtime.api.settings import get_settings
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import LoadSummary

router = APIRouter(prefix="/v1/load-summaries", tags=["load summaries"])
RAW_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "text/plain")
SUMMARIES = TypeAdapter(list[LoadSummary])
RAW_EXAMPLE = (
    '{"model": "m", "load": "concurrency=4", "ok": true, "runtime_s": 1.2, "ttft_s": 0.1, '
    '"num_output_tokens": 32, "inter_token_latencies_s": [], "started_at_s": 0.0}\n'
)


async def _summaries(
    request: Request,
    slo: str | None = Query(
        default=None, max_length=200, description="for raw rows: ttft=S,tpot=S,e2e=S"
    ),
) -> list[LoadSummary]:
    """A JSON list of summaries, or raw request rows (JSONL body or multipart 'file') that are
    summarized here with ``slo``."""
    from idealized_runtime.timing.summary import parse_raw_lines, parse_slo, summarize

    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if content_type == "application/json":
        if slo is not None:
            raise InputError("slo applies to raw rows (JSONL); these summaries are final")
        summaries = SUMMARIES.validate_json(body)
    elif content_type in (*RAW_TYPES, "multipart/form-data"):
        if content_type == "multipart/form-data":
            form = await request.form(max_files=1, max_fields=20)
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise InputError("multipart upload: expected a file part named 'file'")
            body = await upload.read()
        rows = parse_raw_lines(body.decode("utf-8", errors="replace"), path="upload")
        limit = get_settings().max_upload_rows
        if len(rows) > limit:
            raise InputError(f"{len(rows)} rows in one upload; at most {limit} (split it)")
        summaries = summarize(rows, parse_slo(slo) if slo is not None else None)
    else:
        raise HTTPException(
            status_code=status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            detail="send application/json (summaries), or raw rows as application/x-ndjson or "
            "multipart/form-data with a 'file' part",
        )
    if not summaries:
        raise InputError("no summaries (or no request rows) in the body")
    return summaries


@router.post(
    "",
    status_code=201,
    response_model=LoadSummariesWritten,
    responses={**WRITE_ERRORS, 415: {"description": "Neither JSON nor JSONL"}},
    summary="Store load summaries (a JSON list), or raw request rows (JSONL) summarized here",
    description=(
        "A JSON list of summaries as `idealized-runtime summarize --json` prints them, or the "
        "raw JSONL rows `measure` writes (application/x-ndjson body or multipart 'file'), "
        "summarized per model and load level with the optional `slo` (ttft=S,tpot=S,e2e=S). "
        "Replaces the stored (model, load, source) rows."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/LoadSummary"},
                    }
                },
                "application/x-ndjson": {"schema": {"type": "string"}, "example": RAW_EXAMPLE},
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
def post_load_summaries(
    source: LoadSource = Query(default="measured", description="measured, simulated, a label"),
    context: WriteContext = Depends(write_context),  # first: authenticate before parsing
    summaries: list[LoadSummary] = Depends(_summaries),
    session: Session = Depends(write_session),
) -> JSONResponse:
    def work(s: Session) -> LoadSummariesWritten:
        rows = crud.upsert_load_summaries(s, summaries, source)
        return LoadSummariesWritten(
            written=len(rows), items=[crud.load_summary_out(row) for row in rows]
        )

    return run_write(session, context, work)


@router.get("", response_model=Page[LoadSummaryOut], responses=READ_ERRORS)
def list_load_summaries(
    model: str | None = Query(default=None, max_length=200),
    source: str | None = Query(default=None, max_length=200),
    page: tuple[int, int] = Depends(page_params),
    _: Principal = Depends(reader),
    session: Session = Depends(read_session),
) -> Page[LoadSummaryOut]:
    limit, offset = page
    items, total = crud.list_load_summaries(
        session, model=model, source=source, limit=limit, offset=offset
    )
    return Page(items=items, total=total, limit=limit, offset=offset)
