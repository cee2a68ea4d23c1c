"""/v1/load-summaries: what users saw from a model at each load level (throughput, latency
percentiles, error rate, SLO goodput), measured or simulated; upload summaries or raw rows."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.bodies import (
    body_chunks,
    checked_json,
    media_type,
    text_lines,
    upload_chunks,
    validate_json,
)
from idealized_runtime.api.idempotency import WriteContext, run_write, upload_write_context
from idealized_runtime.api.openapi import register_request_schema
from idealized_runtime.api.routers.common import READ_ERRORS, WRITE_ERRORS
from idealized_runtime.api.routers.deps import Paging, Reader, ReadSession, WriteSession
from idealized_runtime.api.schemas import (
    LOAD_SOURCE_PATTERN,
    SLO_PATTERN,
    LoadSummaries,
    LoadSummariesWritten,
    LoadSummaryOut,
    Page,
)
from idealized_runtime.api.settings import get_settings
from idealized_runtime.api.uploads import UPLOAD_NAME, raw_load_rows
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import LoadSummary

router = APIRouter(prefix="/v1/load-summaries", tags=["load summaries"])
RAW_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "text/plain")
SUMMARIES = TypeAdapter(LoadSummaries)
register_request_schema("LoadSummaries", LoadSummaries)
RAW_EXAMPLE = (
    '{"model": "m", "load": "concurrency=4", "ok": true, "runtime_s": 1.2, "ttft_s": 0.1, '
    '"num_output_tokens": 32, "inter_token_latencies_s": [], "started_at_s": 0.0}\n'
)
UNSUPPORTED = (
    "send application/json (summaries), or raw rows as application/x-ndjson or "
    "multipart/form-data with a 'file' part"
)


def _summaries(request: Request, slo: str | None) -> list[LoadSummary]:
    """A JSON list of summaries, or raw request rows (JSONL body or multipart 'file')
    summarized here with ``slo``; read as the body streams in (runs in a worker thread)."""
    from idealized_runtime.timing.summary import parse_slo, summarize

    if media_type(request) == "application/json":
        if slo is not None:
            raise InputError("slo applies to raw rows (JSONL); these summaries are final")
        return validate_json(SUMMARIES, checked_json(body_chunks(request)))
    chunks = upload_chunks(request, RAW_TYPES, UNSUPPORTED)
    rows = raw_load_rows(text_lines(chunks, UPLOAD_NAME), get_settings().max_upload_rows)
    summaries = summarize(rows, parse_slo(slo) if slo is not None else None)
    if not summaries:
        raise InputError("no summaries (or no request rows) in the body")
    return summaries


@router.post(
    "",
    status_code=201,
    response_model=LoadSummariesWritten,
    responses=WRITE_ERRORS,
    summary="Store load summaries (a JSON list), or raw request rows (JSONL) summarized here",
    description=(
        "A JSON list of summaries as `idealized-runtime summarize --json` prints them, or the "
        "raw JSONL rows `measure` writes (application/x-ndjson body or multipart 'file'), "
        "summarized per model and load level with the optional `slo` (ttft=S,tpot=S,e2e=S). "
        "Replaces the stored (model, load, source) rows.\n\nRefused although schema-valid: "
        "`slo` with a JSON body (it applies to raw rows; a rule between a parameter and the "
        "media type); rules on the file's content: raw rows that are not UTF-8 text of JSON "
        "objects, one per line, or hold no request; more rows than the server's "
        "max_upload_rows (422)."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/LoadSummaries"}},
                "application/x-ndjson": {
                    "schema": {"type": "string", "minLength": 1},
                    "example": RAW_EXAMPLE,
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
def post_load_summaries(
    *,
    request: Request,
    source: Annotated[
        str,
        Query(
            min_length=1,
            max_length=200,
            pattern=LOAD_SOURCE_PATTERN,
            description="measured, simulated, or a label (letters, digits, _ . : -)",
        ),
    ] = "measured",
    slo: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=SLO_PATTERN,
            description="For raw rows: latency targets in seconds, ttft=S,tpot=S,e2e=S (any "
            "of them, each once)",
        ),
    ] = None,
    context: WriteContext = Depends(upload_write_context),
    session: WriteSession,
) -> Response:
    summaries = _summaries(request, slo)
    # The fingerprint covers the summaries as parsed (the body is not kept whole).
    context.digest.update(SUMMARIES.dump_json(summaries))

    def work(s: Session) -> LoadSummariesWritten:
        rows = crud.upsert_load_summaries(s, summaries, source)
        return LoadSummariesWritten(
            written=len(rows), items=[crud.load_summary_out(row) for row in rows]
        )

    return run_write(session, context, work)


@router.get("", response_model=Page[LoadSummaryOut], responses=READ_ERRORS)
def list_load_summaries(
    *,
    model: str | None = Query(default=None, max_length=200),
    source: str | None = Query(default=None, max_length=200),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[LoadSummaryOut]:
    items, total = crud.list_load_summaries(
        session, model=model, source=source, limit=page.limit, offset=page.offset
    )
    return page.of(items, total)
