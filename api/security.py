"""API keys: ``ir_<prefix>_<secret>``. The prefix finds the row; only the sha256 of the whole key
is stored and compared in constant time. 32 random bytes make brute force and rainbow tables
pointless, so a plain (unsalted, fast) hash is the right tool here, unlike for passwords."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from idealized_runtime.api.db import get_database
from idealized_runtime.api.models import ApiKeyRow
from idealized_runtime.api.settings import get_settings

KEY_PREFIX = "ir"
_PREFIX_BYTES = 6
_SECRET_BYTES = 32

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `idealized-runtime apikey create`, as `Bearer <key>`.",
)


@dataclass(frozen=True)
class NewApiKey:
    id: int
    name: str
    key: str  # shown once, never stored


@dataclass(frozen=True)
class Principal:
    """Who is calling: the API key row id (None for anonymous reads)."""

    api_key_id: int | None


ANONYMOUS = Principal(api_key_id=None)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _split(key: str) -> str | None:
    parts = key.split("_", 2)  # the secret itself may contain "_"
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1]


def create_api_key(session: Session, name: str) -> NewApiKey:
    prefix = secrets.token_hex(_PREFIX_BYTES)
    key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    row = ApiKeyRow(name=name, prefix=prefix, key_sha256=hash_key(key))
    session.add(row)
    session.commit()
    return NewApiKey(id=row.id, name=name, key=key)


def verify_api_key(session: Session, key: str) -> int | None:
    """The key's row id if it is valid and not revoked, else None."""
    prefix = _split(key)
    if prefix is None:
        return None
    row = session.execute(select(ApiKeyRow).where(ApiKeyRow.prefix == prefix)).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        # Hash anyway so that an unknown prefix costs the same time as a wrong secret.
        hmac.compare_digest(hash_key(key), "0" * 64)
        return None
    return row.id if hmac.compare_digest(hash_key(key), row.key_sha256) else None


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED,
        detail=detail,
        headers={"WWW-Authenticate": 'Bearer realm="idealized-runtime"'},
    )


def authenticate(authorization: str) -> Principal:
    """The caller named by an ``Authorization`` header value; a 401 HTTPException when the key
    is missing, malformed, unknown or revoked. Reads the database: call it off the event loop."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    with get_database().read_sessions() as session:
        key_id = verify_api_key(session, token)
    if key_id is None:
        raise _unauthorized("invalid or revoked API key")
    return Principal(api_key_id=key_id)


# Where KeyCheckMiddleware leaves the caller it authenticated, in the request's state.
PRINCIPAL_STATE = "principal"
# What a route asks of its caller (``route_access``).
KEY_REQUIRED = "key"  # writes
KEY_FOR_READS = "read"  # reads: a key when IDEALIZED_RUNTIME_READS_REQUIRE_KEY is set
_CHECKS_READER = "_checks_reader"


def _checked(request: Request) -> Principal | None:
    principal = request.scope.get("state", {}).get(PRINCIPAL_STATE)
    return principal if isinstance(principal, Principal) else None


def require_key(
    request: Request,
    _documented: HTTPAuthorizationCredentials | None = Depends(bearer_scheme),
) -> Principal:
    """Dependency of every write: the caller, authenticated by ``KeyCheckMiddleware`` before
    the body was read (``bearer_scheme`` only documents the scheme). A route the middleware did
    not authenticate (an application built without it) is checked here."""
    return _checked(request) or authenticate(request.headers.get("authorization", ""))


async def reader(request: Request) -> Principal:
    """Dependency of every read: anonymous unless IDEALIZED_RUNTIME_READS_REQUIRE_KEY is set.

    It takes no sub-dependency (one less on the hot estimate path; the OpenAPI schema marks
    reads as optionally authenticated, see ``api.openapi``)."""
    if not get_settings().reads_require_key:
        return ANONYMOUS
    principal = _checked(request)
    if principal is not None:
        return principal
    return await run_in_threadpool(authenticate, request.headers.get("authorization", ""))


def checks_reader(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a route that awaits ``reader`` itself instead of depending on it (for speed), so
    that ``route_access`` knows it is a read."""
    setattr(endpoint, _CHECKS_READER, True)
    return endpoint


def _dependency_calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _dependency_calls(sub)


def route_access(route: APIRoute) -> str | None:
    """``KEY_REQUIRED`` for a write, ``KEY_FOR_READS`` for a read, None for a public route
    (health, version), from the route's dependencies."""
    calls = set(_dependency_calls(route.dependant))
    if require_key in calls:
        return KEY_REQUIRED
    if reader in calls or getattr(route.endpoint, _CHECKS_READER, False):
        return KEY_FOR_READS
    return None
