"""Shared router pieces: path ids and the documented error responses (the dependencies every
endpoint declares are in ``api.routers.deps``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from idealized_runtime.api.schemas import MAX_ID, ErrorOut

# A path id: out-of-range values are a 422, not a database overflow.
RowId = Annotated[int, Path(ge=1, le=MAX_ID)]

ERRORS: dict[int, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "The body cannot be parsed"},
    401: {"model": ErrorOut, "description": "Missing or invalid API key"},
    404: {"model": ErrorOut, "description": "Not found"},
    409: {
        "model": ErrorOut,
        "description": "Conflict: a duplicate name, or an Idempotency-Key already used with "
        "another request",
    },
    413: {"model": ErrorOut, "description": "Request body too large"},
    415: {"model": ErrorOut, "description": "Unsupported media type (Content-Type)"},
    422: {"model": ErrorOut, "description": "Invalid input; detail says where"},
    503: {"model": ErrorOut, "description": "Database busy; retry"},
}
READ_ERRORS = {code: ERRORS[code] for code in (401, 422)}
# Reads with a body (batch estimate, compare) can also be too large, or name unknown objects.
READ_BODY_ERRORS = {code: ERRORS[code] for code in (400, 401, 404, 413, 415, 422)}
# Expensive reads (``api.compute``): 503 with Retry-After while the server computes its most.
COMPUTE_ERRORS = {
    **READ_BODY_ERRORS,
    503: {
        "model": ErrorOut,
        "description": "The server computes as many requests as it allows at once; retry after "
        "Retry-After seconds",
        "headers": {"Retry-After": {"description": "Seconds", "schema": {"type": "integer"}}},
    },
}
WRITE_ERRORS = {code: ERRORS[code] for code in (400, 401, 409, 413, 415, 422, 503)}
