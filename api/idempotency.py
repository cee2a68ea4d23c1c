"""``Idempotency-Key`` for writes: the first request's response is stored in the same
transaction as its effects, so a retry (also a concurrent one) returns it instead of writing
again, and the same key with a different request is refused (409).

Concurrency: the record is inserted *before* the work. On PostgreSQL a concurrent twin blocks
on the unique index until the first commits, then fails and replays; on SQLite write
transactions begin IMMEDIATE, so twins are serialised and the second finds the record."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Header, HTTPException, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.models import IdempotencyRecordRow
from idealized_runtime.api.security import Principal, require_key

REPLAY_HEADER = "Idempotent-Replayed"


@dataclass(frozen=True)
class WriteContext:
    principal: Principal
    key: str | None
    # The request's fingerprint: method, path, query, content type and body. An upload adds its
    # body as it streams in (``upload_write_context``).
    digest: Any
    method: str
    path: str

    @property
    def request_sha256(self) -> str:
        return self.digest.hexdigest()


IDEMPOTENCY_KEY = Header(
    default=None,
    alias="Idempotency-Key",
    min_length=1,
    max_length=200,
    description="Makes a retried write a no-op that returns the first response",
)


def _context(request: Request, principal: Principal, key: str | None) -> WriteContext:
    digest = hashlib.sha256()
    digest.update(request.method.encode() + b" " + request.url.path.encode() + b"?")
    digest.update(request.url.query.encode() + b"\n")
    digest.update(request.headers.get("content-type", "").encode() + b"\n")
    return WriteContext(principal, key, digest, request.method, request.url.path)


async def write_context(
    request: Request,
    principal: Principal = Depends(require_key),
    idempotency_key: str | None = IDEMPOTENCY_KEY,
) -> WriteContext:
    """Dependency of writes with a JSON body (or none): the caller, and the fingerprint of the
    request for idempotency. The body (within the size limit) is read once: ``json_body``
    reads the same cached bytes."""
    context = _context(request, principal, idempotency_key)
    context.digest.update(await request.body())
    return context


def upload_write_context(
    request: Request,
    principal: Principal = Depends(require_key),
    idempotency_key: str | None = IDEMPOTENCY_KEY,
) -> WriteContext:
    """Dependency of uploads that stream their body: the route adds each chunk to the
    fingerprint as it reads it (``api.bodies.upload_chunks``), before ``run_write``."""
    return _context(request, principal, idempotency_key)


def _response(body: Any, status_code: int, headers: dict[str, str] | None = None) -> Response:
    if status_code == status.HTTP_204_NO_CONTENT:
        return Response(status_code=status_code, headers=headers)
    return JSONResponse(body, status_code=status_code, headers=headers)


def _replay(record: IdempotencyRecordRow, context: WriteContext) -> Response:
    if record.request_sha256 != context.request_sha256:
        raise HTTPException(
            status_code=status.HTTP_409_CONFLICT,
            detail="Idempotency-Key was already used with a different request; use a new key",
        )
    return _response(record.response_body, record.status_code, {REPLAY_HEADER: "true"})


def run_write(
    session: Session,
    context: WriteContext,
    work: Callable[[Session], BaseModel | None],
    status_code: int = status.HTTP_201_CREATED,
) -> Response:
    """Run ``work`` in one transaction (all or nothing), idempotently when a key was sent.
    ``work`` returns the response body (None for a 204)."""
    api_key_id = context.principal.api_key_id
    assert api_key_id is not None  # writes are authenticated
    record: IdempotencyRecordRow | None = None
    try:
        if context.key is not None:
            existing = crud.get_idempotency_record(session, api_key_id, context.key)
            if existing is not None:
                session.rollback()
                return _replay(existing, context)
            record = IdempotencyRecordRow(
                api_key_id=api_key_id,
                key=context.key,
                method=context.method,
                path=context.path[:500],
                request_sha256=context.request_sha256,
                status_code=0,
                response_body={},
            )
            session.add(record)
            session.flush()  # a concurrent twin blocks (PostgreSQL) or fails right here
        result = work(session)
        body = {} if result is None else jsonable_encoder(result)
        if record is not None:
            record.status_code = status_code
            record.response_body = body
        session.commit()
    except IntegrityError:
        session.rollback()
        if context.key is not None:
            existing = crud.get_idempotency_record(session, api_key_id, context.key)
            if existing is not None and existing.status_code:
                return _replay(existing, context)
        raise
    return _response(body, status_code)
