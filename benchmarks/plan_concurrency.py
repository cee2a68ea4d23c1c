"""Fifty anonymous plans at once against one server process (``idealized-runtime serve``,
SQLite, default settings: two computations at once): what the plans get (200, or 503 with
Retry-After) and how ``GET /v1/health`` and ``GET /v1/models`` answer meanwhile (p50, p99,
max over sequential requests from another client), beside the same reads with no plan running
(same server, same run).

Run: ``python -m benchmarks.plan_concurrency [--plans 50] [--reads 200]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from idealized_runtime.processes import free_port, running_server

PLAN = {
    "architecture": "llama-3.1-8b",
    "hardware": ["h100-sxm"],
    "workload": {"prompt_tokens": 1024, "output_tokens": 128},
}


def read_latencies(url: str, count: int, stop: threading.Event | None = None) -> list[float]:
    """Milliseconds of alternating health and catalog reads, one at a time."""
    out: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(count):
            if stop is not None and stop.is_set():
                break
            start = time.perf_counter()
            response = client.get("/v1/health" if i % 2 == 0 else "/v1/models")
            out.append((time.perf_counter() - start) * 1e3)
            assert response.status_code == 200, response.text
    return out


def row(label: str, values: list[float]) -> str:
    p50, p99 = np.percentile(values, [50, 99])
    return f"| {label} | {len(values)} | {p50:.1f} | {p99:.1f} | {max(values):.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=50)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ir-plans-") as home:
        env = {"IDEALIZED_RUNTIME_HOME": home, "DATABASE_URL": ""}
        subprocess.run(
            [sys.executable, "-m", "idealized_runtime", "db", "seed"],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "idealized_runtime", "serve", "--port", str(port)]
        with running_server(command, f"{url}/v1/health", env=env):
            read_latencies(url, 20)  # warm
            quiet = read_latencies(url, args.reads)

            def one_plan(_: int) -> tuple[int, str | None, float]:
                start = time.perf_counter()
                with httpx.Client(base_url=url, timeout=600) as client:
                    response = client.post("/v1/plan", json=PLAN)
                return (
                    response.status_code,
                    response.headers.get("retry-after"),
                    time.perf_counter() - start,
                )

            with ThreadPoolExecutor(args.plans) as pool:
                started = time.perf_counter()
                futures = [pool.submit(one_plan, i) for i in range(args.plans)]
                busy = read_latencies(url, args.reads)
                results = [future.result() for future in futures]
                elapsed = time.perf_counter() - started

    statuses = Counter(code for code, _, _ in results)
    refused = [r for r in results if r[0] in (429, 503)]
    with_retry_after = sum(1 for _, retry, _ in refused if retry)
    print(f"{args.plans} anonymous plans at once (Llama-3.1-8B on H100, default search), one "
          f"server process; all answered in {elapsed:.1f} s")  # fmt: skip
    print(f"plans: {dict(sorted(statuses.items()))}; refused with Retry-After: "
          f"{with_retry_after}/{len(refused)}")  # fmt: skip
    computed = [s for code, _, s in results if code == 200]
    if computed:
        print(f"computed plans: {len(computed)}, slowest {max(computed):.2f} s")
    print()
    print("| reads (health, models alternating) | n | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---|---|---|---|")
    print(row("no plan running", quiet))
    print(row(f"during {args.plans} plans", busy))
    p99_quiet, p99_busy = np.percentile(quiet, 99), np.percentile(busy, 99)
    print(f"\np99 during plans / p99 quiet: {p99_busy / p99_quiet:.2f}")


if __name__ == "__main__":
    main()
