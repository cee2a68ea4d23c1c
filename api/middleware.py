"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs a task per request on the hot path).

On the way in: ``ServerTimingMiddleware`` times the request, ``KeyCheckMiddleware`` refuses a
caller without a valid key from the headers alone, ``BodyLimitMiddleware`` cuts off a body
beyond the limit while it streams. Nothing reads a body before the key is checked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from fastapi import HTTPException
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from idealized_runtime.api.memory import trim_heap
from idealized_runtime.api.security import (
    KEY_FOR_READS,
    KEY_REQUIRED,
    PRINCIPAL_STATE,
    authenticate,
    route_access,
)

# A body this large leaves heap behind that glibc keeps: given back after its request.
TRIM_AFTER_BODY_BYTES = 4 << 20


class BodyTooLarge(Exception):
    pass


async def send_json(
    send: Send, status: int, detail: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(
                    (name.lower().encode(), value.encode())
                    for name, value in (headers or {}).items()
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


def _route_path(scope: Scope) -> str:
    """The path routes match (Starlette's: without the root path the server was mounted at)."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :]
    return path


class KeyCheckMiddleware:
    """401 for a caller without a valid key, before anything reads or parses the body: on every
    write, and on reads when ``reads_require_key``. The caller it found goes into the request's
    state for the route's dependencies (``api.security.require_key`` / ``reader``).

    Which routes need a key comes from the routes' own dependencies (``route_access``), given
    as ``routes`` (the routers' routes: FastAPI's application keeps included routers as
    opaque entries in recent versions). A path no route serves passes through (404 or 405,
    body unread)."""

    def __init__(self, app: ASGIApp, reads_require_key: bool, routes: Iterable[BaseRoute]) -> None:
        self.app, self.reads_require_key = app, reads_require_key
        self._routes = [
            (route.path_regex, route.methods or set(), route_access(route))
            for route in routes
            if isinstance(route, APIRoute)
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The hot path (public GETs) pays for one comparison.
        if scope["type"] != "http" or (
            not self.reads_require_key and scope["method"] in ("GET", "HEAD")
        ):
            await self.app(scope, receive, send)
            return
        access = self._access(scope)
        if access == KEY_REQUIRED or (access == KEY_FOR_READS and self.reads_require_key):
            try:
                principal = await run_in_threadpool(authenticate, _header(scope, b"authorization"))
            except HTTPException as refusal:
                await send_json(send, refusal.status_code, str(refusal.detail), refusal.headers)
                return
            scope.setdefault("state", {})[PRINCIPAL_STATE] = principal
        await self.app(scope, receive, send)

    def _access(self, scope: Scope) -> str | None:
        path, method = _route_path(scope), scope["method"]
        for pattern, methods, access in self._routes:
            if method in methods and pattern.match(path):
                return access
        return None


class BodyLimitMiddleware:
    """413 for bodies over ``max_bytes``: at once from Content-Length, else counted while the
    body streams in (also when Content-Length is absent or smaller than what arrives), so that
    a huge upload is cut off without being buffered."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared.strip().isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)
        finally:
            if received >= TRIM_AFTER_BODY_BYTES:
                await run_in_threadpool(trim_heap)

    async def _refuse(self, send: Send) -> None:
        # Close the connection: the rest of the body is not read.
        await send_json(
            send,
            413,
            f"request body larger than {self.max_bytes} bytes "
            "(the server's IDEALIZED_RUNTIME_MAX_BODY_BYTES)",
            {"Connection": "close"},
        )


class ServerTimingMiddleware:
    """``Server-Timing: app;dur=<ms>``: from the request reaching the app (headers read) to the
    response starting, so it includes reading and parsing the body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                elapsed_ms = (time.perf_counter() - start) * 1e3
                headers: list[Any] = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={elapsed_ms:.2f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed_send)
