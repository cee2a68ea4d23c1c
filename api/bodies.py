"""Request bodies, read by the routes themselves rather than by FastAPI: after the key check
(``api.middleware``), as they stream in, and validated strictly.

* JSON bodies (``json_body``) are read as they arrive by the streaming parser
  (``api.json_stream``: a string longer than the server's limit or a key repeated inside an
  object is refused where it is read), then validated by pydantic-core from the bytes in strict
  mode: ``true`` is no number, ``"3"`` and ``1e3`` are no integer; ``NaN`` and ``Infinity``
  (not JSON) are refused by the input models. Errors have FastAPI's shape, under ``body``.
* Uploads (CSV, JSONL, archives, a JSON measurement set: ``api.json_stream``) are read chunk
  by chunk (``body_chunks``) from a worker thread, so a limit is enforced where it is reached,
  without holding the body.
"""

from __future__ import annotations

import codecs
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import IO, Any

import anyio.from_thread
from fastapi import HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from idealized_runtime.api.json_stream import (
    JsonChecker,
    JsonSyntaxError,
    check_json,
    check_whole_json,
    refusal_reason,
    yajl_cannot_read,
)
from idealized_runtime.api.metrics import mark_refusal
from idealized_runtime.api.openapi import register_request_schema
from idealized_runtime.api.settings import get_settings
from idealized_runtime.core.errors import InputError

# Uploads larger than this go to a temporary file while they are read (an archive is read
# twice: a .zip from its end).
SPOOL_IN_MEMORY_BYTES = 8 << 20
FILE_PART_CHUNK_BYTES = 1 << 16


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _is_json(content_type: str) -> bool:
    # As FastAPI: no Content-Type is taken as JSON.
    return content_type in ("", "application/json") or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


def _validation_error(error: ValidationError) -> RequestValidationError:
    return RequestValidationError(
        [{**item, "loc": ("body", *item["loc"])} for item in error.errors(include_url=False)]
    )


def _require_json(request: Request) -> None:
    content_type = media_type(request)
    if not _is_json(content_type):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"send application/json, not {content_type!r}"
        )


def json_body(schema: Any, name: str) -> Callable[..., Any]:
    """A dependency giving the request's JSON body validated strictly as ``schema``, and
    documenting it in the OpenAPI document under ``name`` (``openapi_extra=request_body(name)``
    on the route)."""
    adapter: TypeAdapter[Any] = TypeAdapter(schema)
    register_request_schema(name, schema)

    async def dependency(request: Request) -> Any:
        _require_json(request)
        body = await _checked_body(request)  # bounded by BodyLimitMiddleware
        return await run_in_threadpool(validate_json, adapter, body)

    return dependency


# Bytes of a body read on the event loop before the parser's work moves to a worker thread.
_INLINE_PARSE_BYTES = 1 << 18


async def _checked_body(request: Request) -> bytes:
    """The body as it arrives, read by the streaming parser chunk by chunk: refused (422) at
    the first byte that makes it no JSON, a string over the limit or a repeated key."""
    limit = get_settings().max_string_bytes
    checker = JsonChecker(limit)
    parts = []
    stream = request.stream()
    try:
        try:
            async for chunk in stream:
                parts.append(chunk)
                if checker.offset < _INLINE_PARSE_BYTES:
                    checker.feed(chunk)
                else:
                    await run_in_threadpool(checker.feed, chunk)
            checker.close()
        except JsonSyntaxError as error:
            if not yajl_cannot_read(error):
                raise
            parts += [chunk async for chunk in stream]
            await run_in_threadpool(check_whole_json, b"".join(parts), limit)
    except JsonSyntaxError as error:
        mark_refusal(request, refusal_reason(error))
        raise json_refusal(error) from None
    return b"".join(parts)


def json_refusal(error: JsonSyntaxError) -> RequestValidationError:
    """FastAPI's error for a body that is not JSON (or breaks the parser's bounds)."""
    return RequestValidationError(
        [{"type": "json_invalid", "loc": ("body",), "msg": f"Invalid JSON: {error}", "input": {}}]
    )


def checked_json(chunks: Iterable[bytes]) -> bytes:
    """``_checked_body`` for a body read from a worker thread (``body_chunks``)."""
    try:
        return check_json(chunks, get_settings().max_string_bytes)
    except JsonSyntaxError as error:
        raise json_refusal(error) from None


def validate_json(schema: TypeAdapter[Any], body: bytes) -> Any:
    """``body`` validated strictly as ``schema``; errors as FastAPI's, under ``body``."""
    try:
        return schema.validate_json(body, strict=True)
    except ValidationError as error:
        raise _validation_error(error) from None


def request_body(name: str, *, examples: dict[str, Any] | None = None) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON body registered with ``json_body(..., name)``."""
    content: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{name}"}}
    if examples:
        content["examples"] = {key: {"value": value} for key, value in examples.items()}
    return {"requestBody": {"required": True, "content": {"application/json": content}}}


# --- streamed bodies (called from a worker thread: sync routes and dependencies) ---------------


def body_chunks(request: Request) -> Iterator[bytes]:
    """The request body as it arrives, for code running in a worker thread: each chunk is
    awaited on the event loop, so no more than one chunk is held. BodyLimitMiddleware's 413
    surfaces here as an exception once the limit is passed."""
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = anyio.from_thread.run(stream.__anext__)
        except StopAsyncIteration:
            return
        if chunk:
            yield chunk


def json_chunks(request: Request, digest: Any | None = None) -> Iterator[bytes]:
    """A JSON body as it streams in (415 for another media type, before any byte is read),
    each chunk also going into ``digest``."""
    _require_json(request)
    for chunk in body_chunks(request):
        if digest is not None:
            digest.update(chunk)
        yield chunk


def upload_chunks(
    request: Request, accepted: Iterable[str], unsupported: str, digest: Any | None = None
) -> Iterator[bytes]:
    """An upload as it streams in: the whole body (of an ``accepted`` media type) or the
    ``file`` part of a multipart form; any other type is a 415 saying ``unsupported``, before
    any byte is read. Each chunk also goes into ``digest`` (the idempotency fingerprint)."""
    content_type = media_type(request)
    if content_type == "multipart/form-data":
        chunks = _file_part_chunks(request)
    elif content_type in accepted:
        chunks = body_chunks(request)
    else:
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, unsupported)
    for chunk in chunks:
        if digest is not None:
            digest.update(chunk)
        yield chunk


def _file_part_chunks(request: Request) -> Iterator[bytes]:
    # Starlette spools the file part (in memory up to 1 MB, then on disk) while parsing the form.
    form = anyio.from_thread.run(partial(request.form, max_files=1, max_fields=20))
    try:
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError("multipart upload: expected a file part named 'file'")
        while chunk := upload.file.read(FILE_PART_CHUNK_BYTES):
            yield chunk
    finally:
        # Closed here, in whatever thread closes the generator (a refusal leaves it to the
        # garbage collector, on the event loop's thread): form.close() would need a worker
        # thread's way back to the loop, and its error would be logged on every upload.
        for value in form.values():
            if not isinstance(value, str):
                value.file.close()


_LINE_END = re.compile(r"\r\n|\r|\n")


def text_lines(chunks: Iterable[bytes], name: str) -> Iterator[str]:
    """UTF-8 text (a byte-order mark skipped) as lines with their ends, decoded as the bytes
    arrive. Line ends are those of a file opened with ``newline=""``: \\r\\n, \\r or \\n."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts: list[str] = []  # text since the last line end, joined once a line is complete
    offset = 0

    def decode(data: bytes, final: bool = False) -> str:
        held = len(decoder.getstate()[0])  # bytes of a character cut by the previous chunk
        try:
            return decoder.decode(data, final=final)
        except UnicodeDecodeError as error:
            at = offset - held + error.start
            raise InputError(f"not UTF-8 text (byte {at})", path=name) from None

    first = True
    for chunk in chunks:
        text = decode(chunk)
        if first and text:
            text, first = text.removeprefix("\ufeff"), False  # a byte-order mark (Excel's)
        offset += len(chunk)
        if "\n" not in text and "\r" not in text:
            parts.append(text)
            continue
        buffer = "".join(parts) + text
        # A \r at the very end may be the first half of \r\n: keep it for the next chunk.
        complete = len(buffer) - 1 if buffer.endswith("\r") else len(buffer)
        start = 0
        for match in _LINE_END.finditer(buffer, 0, complete):
            yield buffer[start : match.end()]
            start = match.end()
        parts = [buffer[start:]] if start < len(buffer) else []
    rest = "".join(parts) + decode(b"", final=True)
    start = 0
    for match in _LINE_END.finditer(rest):
        yield rest[start : match.end()]
        start = match.end()
    if start < len(rest):
        yield rest[start:]


@contextmanager
def spooled(chunks: Iterable[bytes]) -> Iterator[IO[bytes]]:
    """The chunks in a file positioned at its start: in memory up to SPOOL_IN_MEMORY_BYTES,
    then in a temporary file, removed on leaving."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES) as file:
        for chunk in chunks:
            file.write(chunk)
        file.seek(0)
        yield file  # type: ignore[misc]
