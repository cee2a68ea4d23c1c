"""Time a black-box OpenAI-compatible API over a grid of prompt and output sizes.

``measure(config, output)`` sends every (grid point, repeat) request that ``output`` does not
hold yet and appends one JSON line per finished request (the raw JSONL contract below), so a
killed run resumes where it stopped by running it again. The rows feed the denoised fit.

Raw JSONL row (one object per line):
    model, endpoint, num_prompt_tokens, num_output_tokens (actual: the server's usage when it
    reports one, else requested), requested_prompt_tokens, requested_output_tokens, repeat, ok,
    runtime_s (null when failed), ttft_s (streaming only), inter_token_latencies_s (streaming),
    status, error, attempts, retry_waits_s, started_at, finished_at (ISO UTC, of the last attempt),
    usage_mismatch, usage_reported, usage, server_model, system_fingerprint, response_id,
    finish_reason, stream, num_chunks, prompt_source, dropped_fields, client,
    load (the level's label: "concurrency=8", "rate=4.0", "sweep:synchronous", "sweep:rate=3.2",
    "sweep:throughput", "trace"), started_at_s and finished_at_s (seconds since the level's run
    started, monotonic clock, retries included), run_id (one uninterrupted run of the level).
The resume key is (model, endpoint, requested_prompt_tokens, requested_output_tokens, repeat,
load); a failed row (after its retries) counts as done. ``measure_levels`` runs several levels
into one file and ``measure_sweep`` finds the levels of a sweep; both resume per level.

API keys are read from the environment variable the config names, sent as a bearer token, and
never written anywhere (server error texts are redacted).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import os
import queue
import random
import re
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field

from idealized_runtime import __version__
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import append_line_durably, atomic_writer, truncate_partial_line
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.load_patterns import (
    TraceRequest,
    run_at_arrivals,
    run_poisson,
    run_with_concurrency,
)
from idealized_runtime.timing.prompts import (
    LocalTokenizer,
    PromptBuilder,
    PromptRecipe,
    calibrate,
    load_tokenizer,
)
from idealized_runtime.timing.summary import load_label, summarize_level

Endpoint = Literal["completions", "chat"]
ENDPOINT_PATHS = {"completions": "/completions", "chat": "/chat/completions"}
# Fields that pin the output length on servers that know them (vLLM, llama.cpp: ignore_eos /
# min_tokens; transformers serve: generation_config) and that others may reject with a 400:
# they are dropped for the rest of the run the first time a server rejects them.
FIXED_LENGTH_FIELDS = ("ignore_eos", "min_tokens", "generation_config")
STREAM_USAGE_FIELD = "stream_options"
OPTIONAL_FIELDS = (*FIXED_LENGTH_FIELDS, STREAM_USAGE_FIELD)
RETRY_AFTER_CAP_S = 300.0
ERROR_TEXT_LIMIT = 500
Key = tuple[str, str, int, int, int, str]


class MeasureConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(description="e.g. http://127.0.0.1:8000/v1 (/v1 added if no path)")
    model: str = Field(min_length=1, description="model name sent to the server")
    label: str | None = Field(default=None, description="model name written to rows")
    api_key_env: str | None = Field(default=None, description="environment variable of the key")
    endpoint: Endpoint = "completions"
    grid: list[GridPoint]
    repeats: int = Field(default=3, ge=1, le=10_000)
    concurrency: int = Field(default=1, ge=1, le=4096)
    rate: float | None = Field(default=None, gt=0, description="Poisson arrivals per second")
    stream: bool = True
    tokenizer: str | None = None
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=5, ge=0, le=100)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    fixed_length_fields: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)
    shuffle: bool = True  # random order spreads slow periods of the server over the grid
    seed: int = 0
    max_in_flight: int = Field(default=256, ge=1)
    workload: list[TraceRequest] | None = Field(
        default=None, description="replay these arrivals instead of the grid (load 'trace')"
    )
    start_at_s: float | None = Field(
        default=None,
        description="wall-clock time (Unix seconds) at which a trace's earliest arrival is sent",
    )
    level_label: str | None = Field(default=None, description="load label written to rows")
    # An open-loop level (rate, trace) stops offering requests when the server is over-saturated:
    # more than stop_in_flight requests open at once (the queue is growing), or more than
    # stop_error_rate of at least stop_min_finished finished requests failed.
    stop_in_flight: int | None = Field(default=None, ge=1)
    stop_error_rate: float = Field(default=0.5, gt=0, le=1)
    stop_min_finished: int = Field(default=10, ge=1)

    @property
    def recorded_model(self) -> str:
        return self.label or self.model

    @property
    def url(self) -> str:
        parts = urlsplit(self.base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(
                f"base URL must be http(s)://host[:port][/path], got {self.base_url!r}"
            )
        path = parts.path or "/v1"
        return (
            urlunsplit((parts.scheme, parts.netloc, path, "", "")) + ENDPOINT_PATHS[self.endpoint]
        )

    @property
    def load(self) -> str:
        if self.level_label:
            return self.level_label
        if self.workload is not None:
            return "trace"
        if self.rate is not None:
            return f"rate={float(self.rate)}"
        return f"concurrency={self.concurrency}"


class MeasureSummary(BaseModel):
    output: str
    planned: int  # (grid point, repeat) requests in the config
    already_done: int  # found in the output file when the run started
    written: int  # rows appended by this run
    ok: int
    failed: int
    usage_mismatches: int
    interrupted: bool
    elapsed_s: float
    dropped_fields: list[str]
    prompt_source: str
    prompt_offset: int
    load: str = ""
    stopped: str | None = None  # why an over-saturated level stopped early


class _NotAnAPIResponse(Exception):
    """A 200 answer that is not an OpenAI-style completion (e.g. an HTML page)."""


@dataclass(frozen=True)
class _Job:
    point: GridPoint
    repeat: int
    arrival_s: float = 0.0  # trace replays only


@dataclass
class _Attempt:
    """What one HTTP attempt gave."""

    ok: bool = False
    status: int | None = None
    error: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime | None = None
    runtime_s: float | None = None
    ttft_s: float | None = None
    inter_token_latencies_s: list[float] = field(default_factory=list)
    num_chunks: int = 0
    body: dict[str, Any] = field(default_factory=dict)  # last JSON object (or final chunk)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    # perf_counter when the request's headers began to go out (connection open, body encoded):
    # the clock of TTFT and latency, as guidellm's; None until then.
    sent_at: float | None = None

    def since_sent(self, start: float) -> float:
        """Seconds from the request leaving (or ``start``, if that was not seen) to now."""
        return time.perf_counter() - (self.sent_at if self.sent_at is not None else start)

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's trace hook: notes when the request headers start to go out."""
        if self.sent_at is None and event.endswith(".send_request_headers.started"):
            self.sent_at = time.perf_counter()


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z") if moment else None


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    with contextlib.suppress(TypeError, ValueError):
        moment = email.utils.parsedate_to_datetime(value)
        return max(0.0, (moment - datetime.now(timezone.utc)).total_seconds())
    return None


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^(attempt-1)))."""
    return rng.uniform(0.0, min(cap_s, base_s * 2 ** (attempt - 1)))


def one_line(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """A server's error body as one short line: the message of an OpenAI/FastAPI-style JSON
    error, the title (else the text) of an HTML page, whitespace collapsed."""
    text = text.strip()
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict):
            error = data.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            if not isinstance(message, str):
                message = data.get("detail", data.get("message"))
            if isinstance(message, str) and message.strip():
                text = message
    if text[:200].lstrip().lower().startswith(("<!doctype html", "<html")) or "<body" in text:
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        body = re.sub(r"<(head|script|style)\b.*?</\1>", " ", text, flags=re.IGNORECASE | re.DOTALL)
        body = " ".join(re.sub(r"<[^>]+>", " ", body).split())
        text = f"HTML page {' '.join(title.group(1).split())!r}: {body}" if title else body
        text = text if text.startswith("HTML") else f"HTML page: {text}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def row_key(row: dict[str, Any]) -> Key | None:
    try:
        return (
            str(row["model"]),
            str(row.get("endpoint", "completions")),
            int(row.get("requested_prompt_tokens", row["num_prompt_tokens"])),
            int(row.get("requested_output_tokens", row["num_output_tokens"])),
            int(row["repeat"]),
            load_label(row.get("load")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def read_done_keys(path: Path) -> set[Key]:
    """Keys of the rows already in ``path``. A trailing partial line (a run killed while
    writing) is cut off so that the next append starts a fresh line."""
    keys: set[Key] = set()
    for line in truncate_partial_line(path).splitlines():
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        key = row_key(row) if isinstance(row, dict) else None
        if key is not None:
            keys.add(key)
    return keys


class _RowWriter:
    """Appends rows from a background thread, one fsync per batch (group commit), so the
    event loop that timestamps responses never waits on the disk."""

    _STOP = object()

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._handle = path.open("a", encoding="utf-8")
        self._queue: queue.Queue[Any] = queue.Queue()
        self.error: OSError | None = None  # a failed write (disk full): the run must stop
        self._thread = threading.Thread(target=self._loop, name="row-writer", daemon=True)
        self._thread.start()

    def write(self, row: dict[str, Any]) -> None:
        self.check()
        self._queue.put(json.dumps(row, separators=(",", ":"), allow_nan=False))

    def check(self) -> None:
        if self.error is not None:
            raise InputError(
                f"cannot write rows: {self.error.strerror or self.error}", path=str(self._path)
            )

    def _loop(self) -> None:
        while True:
            lines = [self._queue.get()]
            while True:
                try:
                    lines.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = lines[-1] is self._STOP
            lines = [line for line in lines if line is not self._STOP]
            if lines and self.error is None:
                try:
                    self._handle.write("".join(line + "\n" for line in lines[:-1]))
                    append_line_durably(self._handle, lines[-1])
                except OSError as error:
                    self.error = error
            if stop:
                return

    def close(self) -> None:
        self._queue.put(self._STOP)
        self._thread.join()
        with contextlib.suppress(OSError):  # already reported by check()
            self._handle.close()


class _ConnectionPool:
    """HTTP clients of one connection each, handed out one request at a time.

    One httpx client per connection: an httpx pool's bookkeeping grows with its connections
    (one client with 64 connections managed ~150 req/s here, 64 clients of one ~500), and a
    request holds its client from before its timer starts, so no request is ever timed while it
    waits for a connection inside the client.
    """

    def __init__(self, limit: int, headers: dict[str, str], timeout_s: float) -> None:
        self._limit, self._headers, self._timeout_s = limit, headers, timeout_s
        self._idle: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        self._clients: list[httpx.AsyncClient] = []
        self._ssl = None

    def _new(self) -> httpx.AsyncClient:
        if self._ssl is None:
            import ssl

            # Built once: a default context per client would load the CA bundle each time.
            self._ssl = ssl.create_default_context()
        client = httpx.AsyncClient(
            headers=self._headers,
            timeout=httpx.Timeout(self._timeout_s),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            verify=self._ssl,
        )
        self._clients.append(client)
        return client

    async def acquire(self) -> httpx.AsyncClient:
        if self._idle.empty() and len(self._clients) < self._limit:
            return self._new()
        return await self._idle.get()

    def release(self, client: httpx.AsyncClient) -> None:
        self._idle.put_nowait(client)

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self._clients))


class _Client:
    """One measurement run: prompts, requests with retries, rows."""

    def __init__(self, config: MeasureConfig, pool: _ConnectionPool, api_key: str | None):
        self.config, self.pool, self._api_key = config, pool, api_key
        self.url = config.url
        self.dropped: set[str] = set()
        self._rng = random.Random(config.seed)
        self.builder: PromptBuilder | None = None

    # --- requests ----------------------------------------------------------------------------

    def payload(self, text: str, max_tokens: int, *, stream: bool, fixed: bool) -> dict[str, Any]:
        config = self.config
        body: dict[str, Any] = {"model": config.model, "max_tokens": max_tokens, "stream": stream}
        if config.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if stream:
            body[STREAM_USAGE_FIELD] = {"include_usage": True}
        if fixed and config.fixed_length_fields:
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
            body["generation_config"] = json.dumps(
                {"min_new_tokens": max_tokens, "max_new_tokens": max_tokens}
            )
        body.update(config.extra_body)
        for name in self.dropped:
            body.pop(name, None)
        return body

    def _redact(self, text: str) -> str:
        # Redacted before it is shortened, so that a cut cannot leave part of the key.
        text = text.replace(self._api_key, "***") if self._api_key else text
        return one_line(text)

    async def attempt(self, body: dict[str, Any]) -> _Attempt:
        http = await self.pool.acquire()
        try:
            return await self._attempt(http, body)
        finally:
            self.pool.release(http)

    async def _attempt(self, http: httpx.AsyncClient, body: dict[str, Any]) -> _Attempt:
        result = _Attempt()
        start = time.perf_counter()
        send = self._stream if body.get("stream") else self._plain
        try:
            await asyncio.wait_for(send(http, body, start, result), self.config.timeout_s)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            result.ok, result.retryable = False, True
            result.error = f"timeout after {self.config.timeout_s:g} s"
        except httpx.TransportError as error:  # refused, reset, dropped mid-response
            result.ok, result.retryable = False, True
            result.error = self._redact(f"{type(error).__name__}: {error}".rstrip(": "))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            result.ok, result.retryable = False, True
            result.error = f"malformed response: {error}"
        except _NotAnAPIResponse as error:  # e.g. a login page or a proxy's HTML: no retry
            result.ok, result.retryable = False, False
            result.error = self._redact(str(error))
        result.finished_at = datetime.now(timezone.utc)
        return result

    def _check_status(self, response: httpx.Response, text: str, result: _Attempt) -> bool:
        result.status = response.status_code
        if response.status_code == 200:
            return True
        result.error = f"HTTP {response.status_code}: " + self._redact(
            text.strip() or response.reason_phrase
        )
        result.retryable = response.status_code in (408, 409, 425, 429) or (
            response.status_code >= 500
        )
        result.retry_after_s = retry_after_seconds(response.headers.get("retry-after"))
        return False

    async def _plain(
        self, http: httpx.AsyncClient, body: dict[str, Any], start: float, result: _Attempt
    ) -> None:
        response = await http.post(self.url, json=body, extensions={"trace": result.trace})
        runtime_s = result.since_sent(start)
        if not self._check_status(response, response.text, result):
            return
        self._take_completion(response, response.text, runtime_s, result)

    @staticmethod
    def _take_completion(
        response: httpx.Response, text: str, runtime_s: float, result: _Attempt
    ) -> None:
        """A whole (non-streamed) completion; anything but one is _NotAnAPIResponse."""
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict) or "choices" not in data:
            kind = response.headers.get("content-type", "no content type")
            raise _NotAnAPIResponse(
                f"HTTP 200 but not an OpenAI-style completion ({kind}): {one_line(text, 200)}"
            )
        result.ok, result.runtime_s, result.body = True, runtime_s, data
        result.usage = data.get("usage") or None
        choices = data.get("choices") or [{}]
        first = choices[0] if isinstance(choices[0], dict) else {}
        result.finish_reason = first.get("finish_reason")

    async def _stream(
        self, http: httpx.AsyncClient, body: dict[str, Any], start: float, result: _Attempt
    ) -> None:
        chat = self.config.endpoint == "chat"
        stream = http.stream("POST", self.url, json=body, extensions={"trace": result.trace})
        async with stream as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", errors="replace")
                self._check_status(response, text, result)
                return
            result.status = 200
            last: float | None = None
            # Fallback for a stream whose tokens all decode to no text (special tokens, part of
            # a character; transformers serve then sends only its final chunk): the first chunk
            # that carries a completion, other than chat's role-only opening.
            first_field: float | None = None
            other: list[str] = []  # what is not an event: a server that did not stream
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    if result.num_chunks == 0 and sum(map(len, other)) < 100_000:
                        other.append(line)
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if not isinstance(chunk, dict):
                    continue
                if chunk.get("error"):
                    result.error = self._redact(json.dumps(chunk["error"]))
                    result.retryable = True
                    return
                result.num_chunks += 1
                result.body = chunk
                if chunk.get("usage"):
                    result.usage = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") if chat else choice.get("text")
                    finish = choice.get("finish_reason")
                    if finish:
                        result.finish_reason = finish
                    if (
                        first_field is None
                        and "role" not in delta
                        and (piece is not None or finish)
                    ):
                        first_field = result.since_sent(start)
                    if piece:
                        # Time to first token is the first chunk with text: chat streams open
                        # with a role-only chunk that says nothing about the model's speed.
                        now = result.since_sent(start)
                        if last is None:
                            result.ttft_s = now
                        else:
                            result.inter_token_latencies_s.append(now - last)
                        last = now
            if result.num_chunks == 0:
                # No event at all: a server that ignored "stream" (a JSON completion is still a
                # timing, without TTFT) or something else (an HTML page), which is an error.
                self._take_completion(response, "\n".join(other), result.since_sent(start), result)
                return
        result.ok, result.runtime_s = True, result.since_sent(start)
        if result.ttft_s is None and first_field is not None:
            result.ttft_s = first_field

    def drop_rejected_fields(self, body: dict[str, Any], error: str | None) -> bool:
        """After a 400: drop the optional fields the server names (all of them if it names
        none) for the rest of the run. False when there was nothing left to drop."""
        present = [name for name in OPTIONAL_FIELDS if name in body and name not in self.dropped]
        if not present:
            return False
        named = [name for name in present if name in (error or "")]
        self.dropped.update(named or present)
        return True

    async def request(self, body: dict[str, Any]) -> tuple[_Attempt, int, list[float]]:
        """Send with retries; returns the last attempt, the number of attempts and the waits
        between them."""
        attempts = retries = 0
        waits: list[float] = []
        while True:
            attempts += 1
            result = await self.attempt(body)
            if result.ok:
                return result, attempts, waits
            if result.status in (400, 422) and self.drop_rejected_fields(body, result.error):
                body = {k: v for k, v in body.items() if k not in self.dropped}
                continue  # bounded: each pass drops at least one of a few fields
            if not result.retryable or retries >= self.config.max_retries:
                return result, attempts, waits
            retries += 1
            delay = result.retry_after_s
            if delay is None:
                delay = backoff_delay(
                    retries, self.config.backoff_base_s, self.config.backoff_max_s, self._rng
                )
            waits.append(min(delay, RETRY_AFTER_CAP_S))
            await asyncio.sleep(waits[-1])

    # --- prompts -----------------------------------------------------------------------------

    async def probe(self, text: str) -> int | None:
        result, _, _ = await self.request(self.payload(text, 1, stream=False, fixed=False))
        if not result.ok:
            raise InputError(f"probe request to {self.url} failed: {result.error}")
        usage = result.usage or {}
        count = usage.get("prompt_tokens")
        return int(count) if isinstance(count, (int, float)) else None

    async def prepare_prompts(self, cache: Path) -> PromptBuilder:
        config = self.config
        tokenizer: LocalTokenizer | None = (
            load_tokenizer(config.tokenizer) if config.tokenizer else None
        )
        identity = {
            "url": self.url,
            "model": config.model,
            "endpoint": config.endpoint,
            "tokenizer": config.tokenizer,
            # Calibrated prompts cycle over this many units (one per repeat, up to 3): a resume
            # with more repeats must not reuse a recipe of fewer units (identical prompts would
            # be prefix-cache hits on a provider).
            "units": min(config.repeats, 3),
        }
        recipe = None
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            saved = json.loads(cache.read_text(encoding="utf-8"))
            if saved["server"] == identity:
                recipe = PromptRecipe(**saved["recipe"])
        if recipe is None:
            recipe = await calibrate(
                self.probe,
                tokenizer,
                wanted_units=min(config.repeats, 3),
                chat=config.endpoint == "chat",
            )
            with atomic_writer(cache) as handle:
                json.dump({"server": identity, "recipe": recipe.to_json()}, handle, indent=1)
        self.builder = PromptBuilder(recipe, tokenizer)
        return self.builder

    origin = 0.0  # perf_counter at the start of this run of the level
    run_id = ""

    # --- rows --------------------------------------------------------------------------------

    async def measure_job(self, job: _Job) -> dict[str, Any]:
        assert self.builder is not None
        config = self.config
        p, o = job.point
        text = self.builder.text(p, job.repeat)
        started_at_s = time.perf_counter() - self.origin
        result, attempts, waits = await self.request(
            self.payload(text, o, stream=config.stream, fixed=True)
        )
        finished_at_s = time.perf_counter() - self.origin
        usage = result.usage if isinstance(result.usage, dict) else None
        reported_p = usage.get("prompt_tokens") if usage else None
        reported_o = usage.get("completion_tokens") if usage else None
        actual_p = int(reported_p) if isinstance(reported_p, (int, float)) else p
        actual_o = int(reported_o) if isinstance(reported_o, (int, float)) else o
        body = result.body
        return {
            "model": config.recorded_model,
            "endpoint": config.endpoint,
            "num_prompt_tokens": actual_p,
            "num_output_tokens": actual_o,
            "requested_prompt_tokens": p,
            "requested_output_tokens": o,
            "repeat": job.repeat,
            "ok": result.ok,
            "runtime_s": result.runtime_s if result.ok else None,
            "ttft_s": result.ttft_s if result.ok else None,
            "inter_token_latencies_s": result.inter_token_latencies_s if config.stream else [],
            "status": result.status,
            "error": None if result.ok else result.error,
            "attempts": attempts,
            "retry_waits_s": [round(wait, 6) for wait in waits],
            "started_at": _iso(result.started_at),
            "finished_at": _iso(result.finished_at),
            "usage_mismatch": bool(result.ok and usage and (actual_p, actual_o) != (p, o)),
            "usage_reported": usage is not None,
            "usage": usage,
            "server_model": body.get("model"),
            "system_fingerprint": body.get("system_fingerprint"),
            "response_id": body.get("id"),
            "finish_reason": result.finish_reason,
            "stream": config.stream,
            "num_chunks": result.num_chunks,
            "prompt_source": self.builder.recipe.source,
            "dropped_fields": sorted(self.dropped),
            "load": config.load,
            "started_at_s": round(started_at_s, 6),
            "finished_at_s": round(finished_at_s, 6),
            "run_id": self.run_id,
            "client": f"idealized-runtime {__version__}",
        }


def _trace_zero(config: MeasureConfig) -> float | None:
    """The wall-clock time of a trace's time 0 with ``start_at_s`` (its earliest arrival then
    goes out at ``start_at_s``, whichever of its requests a resumed run still has to send)."""
    if config.start_at_s is None or not config.workload:
        return None
    return config.start_at_s - min(request.arrival_s for request in config.workload)


def _planned(config: MeasureConfig) -> int:
    if config.workload is not None:
        return len(config.workload)
    return config.repeats * len(config.grid)


def _plan(config: MeasureConfig, done: set[Key]) -> tuple[list[_Job], int]:
    identity = (config.recorded_model, config.endpoint)
    if config.workload is not None:
        # A trace's requests are told apart by their index (the repeat column).
        jobs = [
            _Job(GridPoint(p, o), index, arrival)
            for index, (arrival, p, o) in enumerate(config.workload)
            if (*identity, p, o, index, config.load) not in done
        ]
        return jobs, _planned(config) - len(jobs)
    jobs = [
        _Job(point, repeat)
        for repeat in range(config.repeats)
        for point in config.grid
        if (*identity, *point, repeat, config.load) not in done
    ]
    if config.shuffle:
        random.Random(config.seed).shuffle(jobs)
    return jobs, _planned(config) - len(jobs)


def calibration_cache_path(output: Path) -> Path:
    return output.with_name(output.name + ".calibration.json")


def _prepare_output(output: Path) -> tuple[set[Key], bool]:
    """Check that ``output`` can be appended to before any request is sent (its parent folders
    are created); the keys it already holds and whether it existed."""
    if output.is_dir():
        raise InputError("is a folder; -o names the JSONL file to write", path=str(output))
    existed = output.exists()
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("a", encoding="utf-8"):
            pass
        return read_done_keys(output), existed
    except OSError as error:
        raise InputError(f"cannot write: {error.strerror or error}", path=str(output)) from None


def _api_key(config: MeasureConfig) -> str | None:
    if not config.api_key_env:
        return None
    value = os.environ.get(config.api_key_env)
    if not value:
        raise InputError(f"environment variable {config.api_key_env} (the API key) is not set")
    return value


async def measure(
    config: MeasureConfig, output: Path, progress: bool = False, *, handle_sigint: bool = True
) -> MeasureSummary:
    """Measure every (grid point, repeat) not yet in ``output``; Ctrl-C (SIGINT) cancels the
    requests in flight and returns with ``interrupted=True`` (rows written so far are kept)."""
    output = Path(output)
    started = time.perf_counter()
    api_key = _api_key(config)
    done, existed = _prepare_output(output)
    jobs, already_done = _plan(config, done)
    # Named, so that a server's access log tells our requests from other clients'.
    headers = {"User-Agent": f"idealized-runtime/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    open_loop = config.rate is not None or config.workload is not None
    # An open loop (a rate, a trace) sends at its arrival times, whatever is still in flight.
    limit = config.max_in_flight if open_loop else config.concurrency
    pool = _ConnectionPool(limit, headers, config.timeout_s)
    counts = {"written": 0, "ok": 0, "failed": 0, "mismatch": 0, "started": 0}
    client = _Client(config, pool, api_key)
    interrupted = False
    writer: _RowWriter | None = None
    stopped: list[str] = []

    def over_saturated() -> bool:
        finished = counts["written"]
        in_flight = counts["started"] - finished
        if config.stop_in_flight is not None and in_flight > config.stop_in_flight:
            stopped.append(f"{in_flight} requests in flight (limit {config.stop_in_flight})")
        elif (
            finished >= config.stop_min_finished
            and counts["failed"] > config.stop_error_rate * finished
        ):
            stopped.append(f"{counts['failed']} of {finished} requests failed")
        return bool(stopped)

    async def work() -> None:
        nonlocal writer
        if not jobs:
            return
        try:
            await client.prepare_prompts(calibration_cache_path(output))
        except OSError as error:  # the cache beside the output cannot be written
            path = calibration_cache_path(output)
            raise InputError(f"cannot write: {error.strerror or error}", path=str(path)) from None
        writer = _RowWriter(output)
        client.origin, client.run_id = time.perf_counter(), uuid.uuid4().hex[:12]
        with _ProgressBar(progress, len(jobs)) as bar:

            async def run(job: _Job) -> None:
                counts["started"] += 1
                row = await client.measure_job(job)
                assert writer is not None
                writer.write(row)
                counts["written"] += 1
                counts["ok" if row["ok"] else "failed"] += 1
                counts["mismatch"] += row["usage_mismatch"]
                bar.advance(counts["failed"])

            stop = over_saturated if open_loop else None
            if config.workload is not None:
                await run_at_arrivals(
                    jobs, [job.arrival_s for job in jobs], run, should_stop=stop,
                    zero_at_wall_s=_trace_zero(config),
                )  # fmt: skip
            elif config.rate is not None:
                await run_poisson(
                    jobs,
                    run,
                    config.rate,
                    seed=config.seed,
                    max_in_flight=config.max_in_flight,
                    should_stop=stop,
                )
            else:
                await run_with_concurrency(jobs, run, config.concurrency)

    task = asyncio.ensure_future(work())
    loop = asyncio.get_running_loop()
    sigint_installed = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    if handle_sigint and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            sigint_installed = True
    try:
        await task
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        if sigint_installed:
            loop.remove_signal_handler(signal.SIGINT)
        if writer is not None:
            writer.close()
        await pool.aclose()
        if not existed and counts["written"] == 0:
            # Nothing measured (bad input, an unreachable server): leave no empty file behind.
            with contextlib.suppress(OSError):
                if output.stat().st_size == 0:
                    output.unlink()
    if writer is not None:
        writer.check()
    recipe = client.builder.recipe if client.builder else None
    return MeasureSummary(
        output=str(output),
        planned=_planned(config),
        already_done=already_done,
        written=counts["written"],
        ok=counts["ok"],
        failed=counts["failed"],
        usage_mismatches=counts["mismatch"],
        interrupted=interrupted,
        elapsed_s=time.perf_counter() - started,
        dropped_fields=sorted(client.dropped),
        prompt_source=recipe.source if recipe else "none",
        prompt_offset=recipe.offset if recipe else 0,
        load=config.load,
        stopped=stopped[0] if stopped else None,
    )


def run_measure(config: MeasureConfig, output: Path, progress: bool = False) -> MeasureSummary:
    """Synchronous ``measure`` (its own event loop)."""
    return asyncio.run(measure(config, output, progress))


class LevelsSummary(BaseModel):
    output: str
    levels: list[MeasureSummary]
    skipped: list[str]  # levels not run: stopped before (state file) or after an over-saturation
    interrupted: bool


def levels_state_path(output: Path) -> Path:
    return output.with_name(output.name + ".levels.json")


def _read_stopped(output: Path) -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError, TypeError):
        data = json.loads(levels_state_path(output).read_text(encoding="utf-8"))
        stopped = data.get("stopped", {})
        if isinstance(stopped, dict):
            return {str(k): str(v) for k, v in stopped.items()}
    return {}


def _write_stopped(output: Path, stopped: dict[str, str]) -> None:
    with atomic_writer(levels_state_path(output)) as handle:
        json.dump({"stopped": stopped}, handle, indent=1)


async def measure_levels(
    config: MeasureConfig,
    levels: list[dict[str, Any]],
    output: Path,
    progress: bool = False,
    *,
    skip_after_stop: bool = False,
    _done: list[MeasureSummary] | None = None,
) -> LevelsSummary:
    """Run ``config`` at each level (a dict of MeasureConfig fields, e.g. {"concurrency": 8} or
    {"rate": 4.0}) into one file, in order. A level that over-saturated the server is recorded
    beside the output (``.levels.json``) and not offered again on resume; with
    ``skip_after_stop`` the levels after it are skipped too (higher rates of a sweep)."""
    output = Path(output)
    summaries = list(_done or [])
    skipped: list[str] = []
    stopped = _read_stopped(output)
    for index, update in enumerate(levels):
        level = config.model_copy(update=update)
        if level.load in stopped:
            skipped.append(level.load)
            if skip_after_stop:
                skipped.extend(config.model_copy(update=u).load for u in levels[index + 1 :])
                break
            continue
        summary = await measure(level, output, progress)
        summaries.append(summary)
        if summary.interrupted:
            return LevelsSummary(
                output=str(output), levels=summaries, skipped=skipped, interrupted=True
            )
        if summary.stopped:
            stopped[level.load] = summary.stopped
            _write_stopped(output, stopped)
            if skip_after_stop:
                skipped.extend(config.model_copy(update=u).load for u in levels[index + 1 :])
                break
    return LevelsSummary(output=str(output), levels=summaries, skipped=skipped, interrupted=False)


SWEEP_SYNCHRONOUS, SWEEP_THROUGHPUT = "sweep:synchronous", "sweep:throughput"


def sweep_rates(synchronous_rps: float, throughput_rps: float, count: int) -> list[float]:
    """``count`` rates evenly spaced strictly between the synchronous and the saturated
    throughput (requests per second), rounded to 4 significant digits."""
    low, high = sorted((synchronous_rps, throughput_rps))
    step = (high - low) / (count + 1)
    return [float(f"{low + step * (i + 1):.4g}") for i in range(count)]


def _level_rows(output: Path, config: MeasureConfig, load: str) -> list[dict[str, Any]]:
    rows = []
    for line in truncate_partial_line(output).splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if (
                isinstance(row, dict)
                and row.get("model") == config.recorded_model
                and load_label(row.get("load")) == load
            ):
                rows.append(row)
    return rows


async def measure_sweep(
    config: MeasureConfig, count: int, output: Path, progress: bool = False
) -> LevelsSummary:
    """A sweep: the grid one request at a time (``sweep:synchronous``), then all at once (up to
    ``max_in_flight``: ``sweep:throughput``), then Poisson arrivals at ``count`` rates evenly
    between the two throughputs (``sweep:rate=R``), lowest first. A rate level stops early when
    more than 3 x (saturated throughput x unloaded mean latency) requests are open (the queue
    grows) or most requests fail; the higher rates are then skipped. The rates come from the
    rows in ``output``, so a resumed sweep finds the same levels."""
    if count < 1:
        raise InputError("--sweep needs at least 1 rate between the two bounds")
    output = Path(output)
    jobs = _planned(config)
    bounds = [
        {"concurrency": 1, "rate": None, "level_label": SWEEP_SYNCHRONOUS},
        {
            "concurrency": max(1, min(config.max_in_flight, jobs)),
            "rate": None,
            "level_label": SWEEP_THROUGHPUT,
        },
    ]
    first = await measure_levels(config, bounds, output, progress)
    if first.interrupted:
        return first
    rates: list[float] = []
    summaries = {}
    for label in (SWEEP_SYNCHRONOUS, SWEEP_THROUGHPUT):
        summaries[label] = summarize_level(
            config.recorded_model, label, _level_rows(output, config, label)
        )
    low = summaries[SWEEP_SYNCHRONOUS].requests_per_s
    high = summaries[SWEEP_THROUGHPUT].requests_per_s
    if low <= 0 or high <= 0:
        raise InputError("the sweep's bounds completed no request; see the rows' errors")
    rates = sweep_rates(low, high, count)
    # Little's law: serving the saturated throughput at the unloaded latency needs about
    # high x (synchronous mean latency) requests open; three times that means a growing queue.
    unloaded = summaries[SWEEP_SYNCHRONOUS].e2e_s.mean or 0.0
    in_flight = max(4, math.ceil(3 * high * unloaded))
    levels = [
        {
            "rate": rate,
            "level_label": f"sweep:rate={rate}",
            "stop_in_flight": config.stop_in_flight or in_flight,
        }
        for rate in rates
    ]
    return await measure_levels(
        config, levels, output, progress, skip_after_stop=True, _done=first.levels
    )


class _ProgressBar(contextlib.AbstractContextManager):
    """A rich progress bar on stderr with a live error count; a no-op when disabled."""

    def __init__(self, enabled: bool, total: int) -> None:
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("measuring"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("[red]{task.fields[errors]} errors"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task("measure", total=total, errors=0)

    def __enter__(self) -> _ProgressBar:
        if self._progress is not None:
            self._progress.start()
        return self

    def advance(self, errors: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, errors=errors)

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
