"""Exception handlers: every user error becomes a 4xx with a readable ``detail``."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from idealized_runtime.api.schemas import PATTERN_MEANINGS
from idealized_runtime.core.catalog import UnknownNameError
from idealized_runtime.core.errors import InputError

log = logging.getLogger(__name__)
MAX_VALIDATION_ERRORS = 20  # a 100,000-row batch with every row wrong needs no 100,000 errors


def _input_error(_: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _unknown_name(_: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, status_code=status.HTTP_404_NOT_FOUND)


def _integrity(_: Request, error: Exception) -> JSONResponse:
    # Unique constraints are the only integrity errors a valid request can meet (a duplicate
    # name); foreign keys are checked by the routers before writing.
    log.info("integrity error: %s", error)
    return JSONResponse(
        {"detail": "conflict: an object with this name (or key) exists already"},
        status_code=status.HTTP_409_CONFLICT,
    )


def _data(_: Request, error: Exception) -> JSONResponse:
    # The database refused a value the schemas let through: PostgreSQL stores no NUL (0x00)
    # character in text or JSON. The user's input, so 422 (the transaction is rolled back).
    log.info("data error: %s", error)
    text = str(getattr(error, "orig", error))
    if "nul" in text.lower() or "\\u0000" in text:
        detail = "text must not contain NUL (0x00) characters"
    else:
        detail = f"a value cannot be stored: {text.splitlines()[0] if text else 'invalid data'}"
    return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _operational(_: Request, error: Exception) -> JSONResponse:
    text = str(error).lower()
    if "locked" in text or "busy" in text or "could not serialize" in text:
        return JSONResponse(
            {"detail": "the database is busy; retry shortly"},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "1"},
        )
    raise error


def _shown_error(item: dict[str, Any]) -> dict[str, Any]:
    shown = {key: value for key, value in item.items() if key in ("type", "loc", "msg", "ctx")}
    pattern = (item.get("ctx") or {}).get("pattern")
    given = item.get("input")
    if item.get("type") == "int_type" and isinstance(given, float) and given.is_integer():
        shown["msg"] = "Input should be an integer written as one: 3, not 3.0 or 3e0"
    if item.get("type") == "string_pattern_mismatch" and pattern in PATTERN_MEANINGS:
        # Say what the pattern means rather than quote a long regular expression.
        shown["msg"] = PATTERN_MEANINGS[pattern]
        shown.pop("ctx", None)
    return shown


class CountedValidationError(RequestValidationError):
    """Validation errors of which only the first MAX_VALIDATION_ERRORS were kept (a streamed
    upload does not hold an error per row), and how many there were."""

    def __init__(self, errors: list[dict[str, Any]], count: int) -> None:
        super().__init__(errors)
        self.count = count


def _validation(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    errors = list(error.errors())
    count = error.count if isinstance(error, CountedValidationError) else len(errors)
    shown = [_shown_error(item) for item in errors[:MAX_VALIDATION_ERRORS]]
    body = {"detail": jsonable_encoder(shown)}
    if count > MAX_VALIDATION_ERRORS:
        body["error_count"] = count
    return JSONResponse(body, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _pydantic(_: Request, error: Exception) -> JSONResponse:
    # A domain type refused a value that the request schema let through (e.g. inside an
    # imported table): the user's input, so 422.
    assert isinstance(error, ValidationError)
    shown = [
        {key: value for key, value in item.items() if key in ("type", "loc", "msg")}
        for item in error.errors()[:MAX_VALIDATION_ERRORS]
    ]
    return JSONResponse(
        {"detail": jsonable_encoder(shown)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
    )


def _path_methods(app: FastAPI) -> list[tuple[re.Pattern[str], bool, set[str]]]:
    cached = getattr(app.state, "path_methods", None)
    if cached is None:
        cached = [
            (
                re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path))),
                "{" not in path,
                {method.upper() for method in item if method in _HTTP_METHODS},
            )
            for path, item in app.openapi().get("paths", {}).items()
        ]
        app.state.path_methods = cached
    return cached


_HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


async def _http(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code != status.HTTP_405_METHOD_NOT_ALLOWED:
        return await http_exception_handler(request, error)  # type: ignore[return-value]
    # Routing answers 405 with the methods of the first route whose path matched; a path served
    # by several routes (GET and POST, GET and DELETE) must list all of them: take them from the
    # OpenAPI document, which is what clients read.
    # A literal path (/v1/measurement-sets/csv) wins over a template (/v1/measurement-sets/{id}).
    matches = [(literal, methods) for pattern, literal, methods in _path_methods(request.app)
               if pattern.fullmatch(request.url.path)]  # fmt: skip
    allowed: set[str] = set()
    for literal, methods in matches:
        if literal or not any(other for other, _ in matches):
            allowed.update(methods)
    return JSONResponse(
        {"detail": "Method Not Allowed"},
        status_code=status.HTTP_405_METHOD_NOT_ALLOWED,
        headers={"Allow": ", ".join(sorted(allowed)) or (error.headers or {}).get("Allow", "")},
    )


def _overflow(_: Request, error: Exception) -> JSONResponse:
    # A value (or a count derived from it, e.g. an architecture's parameters) beyond what the
    # database's 64-bit integers hold: the input is out of range, so 422.
    log.info("overflow: %s", error)
    return JSONResponse(
        {"detail": "a number is too large to store (at most 2**63 - 1)"},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(OverflowError, _overflow)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(ValidationError, _pydantic)
    app.add_exception_handler(InputError, _input_error)
    app.add_exception_handler(UnknownNameError, _unknown_name)
    app.add_exception_handler(IntegrityError, _integrity)
    app.add_exception_handler(OperationalError, _operational)
    app.add_exception_handler(DataError, _data)
    app.add_exception_handler(RequestValidationError, _validation)
