"""The HTTP/SSE transport to one OpenAI-compatible endpoint: requests over connections of their
own, the clock of each attempt (from when its headers go out), streamed chunks read into time to
first token and inter-token latencies, and retries.

Retries: 429, 408/409/425, 5xx, timeouts, connection errors and malformed answers, with
exponential backoff and full jitter, or the server's ``Retry-After``. A 400/422 that rejects an
optional field drops it for the rest of the run and sends again. A 200 that is not a completion
(an HTML page) is an error without retry. Error texts are one line, redacted of the API key,
which is read from the environment variable the config names and sent only as a bearer token.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import os
import random
import re
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

from idealized_runtime import __version__
from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.config import MeasureConfig

# Fields that pin the output length on servers that know them (vLLM, llama.cpp: ignore_eos /
# min_tokens; transformers serve: generation_config) and that others may reject with a 400:
# they are dropped for the rest of the run the first time a server rejects them.
FIXED_LENGTH_FIELDS = ("ignore_eos", "min_tokens", "generation_config")
STREAM_USAGE_FIELD = "stream_options"
OPTIONAL_FIELDS = (*FIXED_LENGTH_FIELDS, STREAM_USAGE_FIELD)
RETRY_AFTER_CAP_S = 300.0
ERROR_TEXT_LIMIT = 500


class _NotAnAPIResponse(Exception):
    """A 200 answer that is not an OpenAI-style completion (e.g. an HTML page)."""


@dataclass
class Attempt:
    """What one HTTP attempt gave."""

    ok: bool = False
    status: int | None = None
    error: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime | None = None
    runtime_s: float | None = None
    ttft_s: float | None = None  # first token of any kind, reasoning included
    ttft_answer_s: float | None = None  # first token of the answer (after any reasoning)
    inter_token_latencies_s: list[float] = field(default_factory=list)
    num_chunks: int = 0
    reasoning_chunks: int = 0  # streamed chunks with reasoning text
    answer_chunks: int = 0  # streamed chunks with answer text
    reasoning_seen: bool = False  # reasoning text came back (streamed or not)
    answer_text: list[str] = field(default_factory=list)  # a conversation resends it
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


# Where servers put a reasoning model's thinking, apart from the answer: vLLM, SGLang and
# DeepSeek's API send ``reasoning_content``; newer vLLM and OpenRouter ``reasoning``.
REASONING_FIELDS = ("reasoning_content", "reasoning")


def reasoning_text(part: dict[str, Any]) -> str | None:
    """The reasoning text of a delta, message or completions choice (None without any)."""
    for name in REASONING_FIELDS:
        value = part.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def api_key_from_env(config: MeasureConfig) -> str | None:
    """The key from the variable ``api_key_env`` names (None without one); unset is an error."""
    if not config.api_key_env:
        return None
    value = os.environ.get(config.api_key_env)
    if not value:
        raise InputError(f"environment variable {config.api_key_env} (the API key) is not set")
    return value


def request_headers(api_key: str | None) -> dict[str, str]:
    """Headers of every request: named, so that a server's access log tells our requests from
    other clients', and the key as a bearer token."""
    headers = {"User-Agent": f"idealized-runtime/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Built once per process: a default context per client (or per run, for a monitor's
    rounds) would load the CA bundle each time, 50 ms here."""
    return ssl.create_default_context()


class ConnectionPool:
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

    def _new(self) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            headers=self._headers,
            timeout=httpx.Timeout(self._timeout_s),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            verify=_tls_context(),
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


class EndpointClient:
    """Requests of one run to its endpoint: request bodies, attempts over the pool's
    connections, retries, and the optional fields the server rejected (dropped for the rest of
    the run)."""

    def __init__(self, config: MeasureConfig, pool: ConnectionPool, api_key: str | None):
        self.config, self.pool, self._api_key = config, pool, api_key
        self.url = config.url
        self.dropped: set[str] = set()
        self._rng = random.Random(config.seed)
        self.retry_waited_s = 0.0  # waits between retries so far (the run's retry budget)

    def payload(
        self,
        text: str,
        max_tokens: int,
        *,
        stream: bool,
        fixed: bool,
        history: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        """A request's body; ``history``: the (user, assistant) exchanges of a conversation
        before ``text``, resent in full (chat: as messages; completions: as the prompt's
        beginning), so that they are a prefix the server may have cached."""
        config = self.config
        body: dict[str, Any] = {"model": config.model, "max_tokens": max_tokens, "stream": stream}
        if config.endpoint == "chat":
            body["messages"] = [
                message
                for user, assistant in history
                for message in (
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": assistant},
                )
            ] + [{"role": "user", "content": text}]
        else:
            body["prompt"] = "".join(user + assistant for user, assistant in history) + text
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

    async def attempt(self, body: dict[str, Any]) -> Attempt:
        http = await self.pool.acquire()
        try:
            return await self._attempt(http, body)
        finally:
            self.pool.release(http)

    async def _attempt(self, http: httpx.AsyncClient, body: dict[str, Any]) -> Attempt:
        result = Attempt()
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

    def _check_status(self, response: httpx.Response, text: str, result: Attempt) -> bool:
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
        self, http: httpx.AsyncClient, body: dict[str, Any], start: float, result: Attempt
    ) -> None:
        response = await http.post(self.url, json=body, extensions={"trace": result.trace})
        runtime_s = result.since_sent(start)
        if not self._check_status(response, response.text, result):
            return
        self._take_completion(response, response.text, runtime_s, result)

    @staticmethod
    def _take_completion(
        response: httpx.Response, text: str, runtime_s: float, result: Attempt
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
        message = first.get("message")
        part = message if isinstance(message, dict) else first
        answer = part.get("content") if isinstance(message, dict) else part.get("text")
        if isinstance(answer, str):
            result.answer_text.append(answer)
        result.reasoning_seen = reasoning_text(part) is not None

    async def _stream(
        self, http: httpx.AsyncClient, body: dict[str, Any], start: float, result: Attempt
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
                    part = delta if chat else choice
                    piece = part.get("content") if chat else part.get("text")
                    thought = reasoning_text(part)
                    finish = choice.get("finish_reason")
                    if finish:
                        result.finish_reason = finish
                    if (
                        first_field is None
                        and "role" not in delta
                        and (piece is not None or thought is not None or finish)
                    ):
                        first_field = result.since_sent(start)
                    if piece or thought:
                        # Time to first token is the first chunk with text, reasoning or answer:
                        # chat streams open with a role-only chunk that says nothing about the
                        # model's speed. Gaps run over reasoning and answer alike (one decode).
                        now = result.since_sent(start)
                        if last is None:
                            result.ttft_s = now
                        else:
                            result.inter_token_latencies_s.append(now - last)
                        last = now
                        if thought:
                            result.reasoning_chunks += 1
                            result.reasoning_seen = True
                        if piece:
                            result.answer_chunks += 1
                            result.answer_text.append(piece)
                            if result.ttft_answer_s is None:
                                result.ttft_answer_s = now
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

    async def request(self, body: dict[str, Any]) -> tuple[Attempt, int, list[float]]:
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
            delay = min(delay, RETRY_AFTER_CAP_S)
            budget = self.config.retry_budget_s
            if budget is not None and self.retry_waited_s + delay > budget:
                return result, attempts, waits
            self.retry_waited_s += delay
            waits.append(delay)
            await asyncio.sleep(delay)

    async def probe(self, text: str) -> int | None:
        """The server's count of ``text`` (``usage.prompt_tokens``; None when it reports no
        usage), with one output token: how prompts are calibrated."""
        result, _, _ = await self.request(self.payload(text, 1, stream=False, fixed=False))
        if not result.ok:
            raise InputError(f"probe request to {self.url} failed: {result.error}")
        usage = result.usage or {}
        count = usage.get("prompt_tokens")
        return int(count) if isinstance(count, (int, float)) else None
