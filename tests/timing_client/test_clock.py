"""Where the client's clock starts: when the request headers begin to go out (after the
connection is open and the body encoded), as guidellm times, else when the attempt began.
Timings are injected through a fake clock and a transport that reports httpx trace events as
httpcore does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from idealized_runtime.timing import transport
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.transport import Attempt, ConnectionPool, EndpointClient


class FakeClock:
    def __init__(self) -> None:
        self.now = 10.0

    def perf_counter(self) -> float:
        return self.now


def _event(text: str | None, finish: str | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


class TracingTransport(httpx.AsyncBaseTransport):
    """Sends the request at t = 12 (reported through the trace hook when ``trace``), the first
    token at 15, the second at 16, the end of the stream at 18."""

    def __init__(self, clock: FakeClock, trace: bool) -> None:
        self.clock, self.trace = clock, trace

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.clock.now = 12.0
        hook = request.extensions.get("trace")
        if self.trace and hook is not None:
            await hook("connection.connect_tcp.started", {})
            await hook("http11.send_request_headers.started", {"request": request})
            self.clock.now = 12.5
            await hook("http11.send_request_headers.started", {"request": request})  # ignored

        async def body() -> AsyncIterator[bytes]:
            for moment, event in ((15.0, _event("a")), (16.0, _event("b"))):
                self.clock.now = moment
                yield event
            self.clock.now = 18.0
            yield _event("", "length") + b"data: [DONE]\n\n"

        return httpx.Response(200, content=body(), headers={"content-type": "text/event-stream"})


def _stream_once(monkeypatch: pytest.MonkeyPatch, trace: bool) -> Attempt:
    clock = FakeClock()
    monkeypatch.setattr(transport, "time", clock)
    config = MeasureConfig(base_url="http://127.0.0.1:9/v1", model="m", grid=[GridPoint(4, 2)])

    async def go() -> Attempt:
        pool = ConnectionPool(1, {}, 5.0)
        http = httpx.AsyncClient(transport=TracingTransport(clock, trace))
        pool._clients.append(http)
        pool.release(http)
        try:
            client = EndpointClient(config, pool, None)
            return await client.attempt(client.payload("abcd", 2, stream=True, fixed=False))
        finally:
            await pool.aclose()

    return asyncio.run(go())


def test_the_clock_starts_when_the_request_headers_go_out(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _stream_once(monkeypatch, trace=True)
    assert result.ok and result.sent_at == 12.0
    assert result.ttft_s == 3.0 and result.inter_token_latencies_s == [1.0]
    assert result.runtime_s == 6.0


def test_without_trace_events_the_clock_starts_with_the_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = _stream_once(monkeypatch, trace=False)
    assert result.ok and result.sent_at is None
    assert result.ttft_s == 5.0 and result.inter_token_latencies_s == [1.0]
    assert result.runtime_s == 8.0
