"""The timing client's own overhead, against a local server that answers instantly.

A minimal raw-asyncio HTTP server (this file with ``--serve PORT``, in a separate process) answers
every POST with the same small completion. Against it we measure, in one run:

* throughput at concurrency 64: ``measure()`` (durable JSONL rows, retries armed, usage
  checks) vs a bare ``httpx.AsyncClient`` sending the same requests with 64 workers;
* added latency per request at concurrency 1: the ``runtime_s`` our client records (and its
  wall time per request, rows included) minus a raw-socket round trip of the same request on a
  keep-alive connection, which is the least any client can measure.

Usage: python benchmarks/client_overhead.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from idealized_runtime.processes import free_port, stop_process, wait_until_healthy
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.measure import measure

PROMPT, OUTPUT = 4, 1
ANSWER = json.dumps(
    {
        "id": "x",
        "object": "text_completion",
        "model": "instant",
        "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
        "usage": {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT, "total_tokens": 5},
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    + f"content-length: {len(ANSWER)}\r\n\r\n".encode()
    + ANSWER
)
HEALTH = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


# --- the instant server ------------------------------------------------------------------------


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            writer.write(RESPONSE if head.startswith(b"POST") else HEALTH)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


# --- clients -----------------------------------------------------------------------------------


def _config(url: str, repeats: int, concurrency: int) -> MeasureConfig:
    return MeasureConfig(
        base_url=url,
        model="instant",
        grid=[GridPoint(PROMPT, OUTPUT)],
        repeats=repeats,
        concurrency=concurrency,
        stream=False,
        tokenizer="bytes",
        fixed_length_fields=False,
    )


async def ours(url: str, requests: int, concurrency: int, folder: Path) -> tuple[float, list]:
    output = folder / f"ours-{concurrency}.jsonl"
    start = time.perf_counter()
    summary = await measure(_config(url, requests, concurrency), output, handle_sigint=False)
    elapsed = time.perf_counter() - start
    assert summary.ok == requests, summary
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    return elapsed, [row["runtime_s"] for row in rows]


async def bare_httpx(url: str, requests: int, concurrency: int, sharded: bool = False) -> float:
    """Workers posting the same request: through one client with ``concurrency`` connections
    (the usual way), or ``sharded``: one single-connection client per worker, as ours does."""
    body = {"model": "instant", "prompt": "abcd", "max_tokens": OUTPUT, "stream": False}
    per_client = 1 if sharded else concurrency
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    clients = [httpx.AsyncClient(limits=limits) for _ in range(concurrency if sharded else 1)]
    remaining = iter(range(requests))

    async def worker(client: httpx.AsyncClient) -> None:
        for _ in remaining:
            (await client.post(f"{url}/completions", json=body)).json()

    start = time.perf_counter()
    await asyncio.gather(*(worker(clients[i % len(clients)]) for i in range(concurrency)))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(client.aclose() for client in clients))
    return elapsed


def raw_socket_round_trips(port: int, requests: int) -> list[float]:
    body = json.dumps({"model": "instant", "prompt": "abcd", "max_tokens": OUTPUT}).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    times = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(requests):
            start = time.perf_counter()
            sock.sendall(request)
            received = b""
            while len(received) < len(RESPONSE):
                received += sock.recv(65536)
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per throughput run")
    parser.add_argument("--latency-requests", type=int, default=500)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_until_healthy(server, f"http://127.0.0.1:{port}/health", timeout_s=20)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            asyncio.run(bare_httpx(url, 200, 8))  # warm-up: imports, connections
            ours_s, _ = asyncio.run(ours(url, args.requests, 64, folder))
            bare_s = asyncio.run(bare_httpx(url, args.requests, 64))
            sharded_s = asyncio.run(bare_httpx(url, args.requests, 64, sharded=True))
            n = args.latency_requests
            raw = raw_socket_round_trips(port, n)
            wall_s, recorded = asyncio.run(ours(url, n, 1, folder))
            bare1_s = asyncio.run(bare_httpx(url, n, 1))
    finally:
        stop_process(server)

    ours_rps, bare_rps = args.requests / ours_s, args.requests / bare_s
    sharded_rps = args.requests / sharded_s
    raw_ms = statistics.median(raw) * 1e3
    recorded_ms = statistics.median(recorded) * 1e3
    wall_ms = wall_s / n * 1e3
    bare1_ms = bare1_s / n * 1e3
    print("Timing client overhead against an instant local server (non-streaming requests)")
    print(f"{'metric':<52} {'ours':>10} {'reference':>10} {'ratio':>7}")
    print(
        f"{'throughput at concurrency 64, req/s (ref: bare httpx)':<52} "
        f"{ours_rps:>10.0f} {bare_rps:>10.0f} {ours_rps / bare_rps:>7.2f}"
    )
    print(
        f"{'  same, ref: bare httpx, one client per connection':<52} "
        f"{ours_rps:>10.0f} {sharded_rps:>10.0f} {ours_rps / sharded_rps:>7.2f}"
    )
    print(
        f"{'recorded runtime_s, median ms (ref: raw socket)':<52} "
        f"{recorded_ms:>10.3f} {raw_ms:>10.3f} {recorded_ms / raw_ms:>7.2f}"
    )
    print(
        f"{'wall per request at concurrency 1, ms (ref: raw)':<52} "
        f"{wall_ms:>10.3f} {raw_ms:>10.3f} {wall_ms / raw_ms:>7.2f}"
    )
    print(
        f"{'bare httpx per request at concurrency 1, ms (ref: raw)':<52} "
        f"{bare1_ms:>10.3f} {raw_ms:>10.3f} {bare1_ms / raw_ms:>7.2f}"
    )
    print(f"added latency per request (recorded - raw socket): {recorded_ms - raw_ms:.3f} ms")
    print("targets: >= 500 req/s at concurrency 64; added latency < 2 ms")


if __name__ == "__main__":
    main()
