"""Soak of the REST service on 127.0.0.1: mixed traffic for ``--minutes`` (default 30) against
one ``idealized-runtime serve`` process (SQLite), its resident memory (VmRSS) sampled.

Traffic, from three client threads (httpx, real HTTP):

* writes: JSON measurement sets (200 rows), CSV uploads (multipart), a monitoring round, and
  every ~30 s an 8 MiB JSON measurement set;
* refusals: a 60 MiB body whose model name is one string (refused at the string limit), a
  repeated key, an anonymous write (401), a body over the size limit (413);
* reads: single and batch (1,000 rows) estimates, the leaderboard, the monitor's series,
  ``/metrics``; plans (small search, with verification) back to back.

Prints RSS samples and a summary: RSS at the end of the warm-up (``--warmup-minutes``,
default a fifth of the run, at most 5), the highest after it, at the end, and the growth after
warm-up in percent; requests per kind and status (no 5xx expected).

Run: ``python -m benchmarks.service_soak [--minutes 30] [--sample-s 10]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

from idealized_runtime.processes import free_port, running_server

MIB = 1 << 20
SOAK_ROUNDS_FROM = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=6)


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "idealized_runtime", *args]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def workers_rss_mib(pid: int) -> float:
    """The server's worker processes (plans), together."""
    total = 0.0
    for child in children(pid):
        with contextlib.suppress(FileNotFoundError, KeyError):  # ended meanwhile
            total += rss_mib(child)
    return total


def measurement(i: int, model: str = "soak-model") -> dict[str, object]:
    return {
        "model": model,
        "num_prompt_tokens": 16 + i % 4000,
        "num_output_tokens": 1 + i % 300,
        "runtime_s": 0.05 + (i % 97) / 100,
    }


def measurement_set(rows: int, name: str) -> bytes:
    return json.dumps(
        {"name": name, "measurements": [measurement(i) for i in range(rows)]}
    ).encode()


def long_string_body(total: int = 60 * MIB) -> Iterator[bytes]:
    """A measurement set whose model name is one string of ``total`` bytes."""
    yield b'{"measurements": [{"model": "'
    block = b"m" * MIB
    for _ in range(total // MIB):
        yield block
    yield b'", "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1}]}'


def oversized_body(total: int = 65 * MIB) -> Iterator[bytes]:
    """A measurement set of ``total`` bytes of short items: over the body limit."""
    yield b'{"measurements": ['
    block = b"1," * (MIB // 2)
    for _ in range(total // MIB):
        yield block
    yield b"1]}"


def round_body(index: int) -> dict[str, object]:
    # Within the last week (the /metrics gauges read a week), a second apart.
    start = SOAK_ROUNDS_FROM + timedelta(seconds=index)
    ttft = 0.2 + (0.1 if index % 50 > 40 else 0.0)
    return {
        "round_id": f"soak:{index:06d}:prov-soak:soak-m",
        "provider": "prov-soak",
        "model": "soak-m",
        "round_index": index,
        "started_at": start.isoformat(),
        "finished_at": (start + timedelta(seconds=3)).isoformat(),
        "status": "ok",
        "requests": 2,
        "failed_requests": 0,
        "ttft_s": ttft,
        "itl_s": 0.01,
        "output_tokens_per_s": 100.0,
        "denoised_runtime_s": ttft + 0.15,
        "idealized_runtime_s": 0.1,
        "discrepancy": (ttft + 0.15) / 0.1,
        "error_rate": 0.0,
        "measurements": [
            {"model": "soak-m", "num_prompt_tokens": 128, "num_output_tokens": 16,
             "runtime_s": ttft + 0.15, "ttft_s": ttft}
        ],
    }  # fmt: skip


class Tally:
    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, int]] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def record(self, kind: str, response: httpx.Response | None, error: str = "") -> None:
        with self._lock:
            if response is None:
                self.errors[f"{kind}: {error}"] += 1
            else:
                self.counts[(kind, response.status_code)] += 1


def traffic(base_url: str, key: str, until: float, tally: Tally) -> list[threading.Thread]:
    auth = {"Authorization": f"Bearer {key}"}
    counter = iter(range(10**9))

    def call(kind: str, send) -> None:  # type: ignore[no-untyped-def]
        try:
            tally.record(kind, send())
        except Exception as error:  # a refused body's connection closed under the client
            tally.record(kind, None, type(error).__name__)

    def writes() -> None:
        last_big = 0.0
        with httpx.Client(base_url=base_url, timeout=120) as client:
            while time.monotonic() < until:
                n = next(counter)
                call(
                    "upload json",
                    lambda: client.post(
                        "/v1/measurement-sets",
                        content=measurement_set(200, f"soak-{n}"),  # noqa: B023 (called at once)
                        headers={**auth, "content-type": "application/json"},
                    ),
                )
                csv = "model,num_prompt_tokens,num_output_tokens,runtime_s\n" + "".join(
                    f"soak-csv,{16 + i},{1 + i % 50},{0.1 + i / 1000}\n" for i in range(200)
                )
                call(
                    "upload csv",
                    lambda: client.post(
                        "/v1/measurement-sets/csv",
                        files={"file": ("t.csv", csv, "text/csv")},  # noqa: B023 (called at once)
                        headers=auth,
                    ),
                )
                call(
                    "monitor round",
                    lambda: client.post("/v1/monitor/rounds", json=round_body(n), headers=auth),  # noqa: B023 (called at once)
                )
                call(
                    "refused: repeated key",
                    lambda: client.post(
                        "/v1/capability-scores",
                        headers={**auth, "content-type": "application/json"},
                        content=b'{"scores": [{"model": "m", "scenario": "s", "value": 0.5, '
                        b'"value": 0.6}]}',
                    ),
                )
                call(
                    "refused: anonymous",
                    lambda: client.post(
                        "/v1/measurement-sets",
                        content=measurement_set(1, "x"),
                        headers={"content-type": "application/json"},
                    ),
                )
                if time.monotonic() - last_big > 30:
                    last_big = time.monotonic()
                    call(
                        "upload 8 MiB",
                        lambda: client.post(
                            "/v1/measurement-sets",
                            content=measurement_set(80_000, f"soak-big-{n}"),  # noqa: B023 (called at once)
                            headers={**auth, "content-type": "application/json"},
                        ),
                    )
                    call(
                        "refused: 60 MiB string",
                        lambda: client.post(
                            "/v1/measurement-sets",
                            content=long_string_body(),
                            headers={**auth, "content-type": "application/json"},
                        ),
                    )
                    call(
                        "refused: too large",
                        lambda: client.post(
                            "/v1/measurement-sets",
                            content=oversized_body(),
                            headers={**auth, "content-type": "application/json"},
                        ),
                    )
                time.sleep(0.2)

    def reads() -> None:
        batch = {"model": "openai/davinci",
                 "requests": [{"prompt_tokens": 10 + i, "output_tokens": 1 + i % 100}
                              for i in range(1000)]}  # fmt: skip
        with httpx.Client(base_url=base_url, timeout=120) as client:
            while time.monotonic() < until:
                n = next(counter)
                call(
                    "estimate",
                    lambda: client.get(
                        "/v1/estimate",
                        params={
                            "model": "openai/davinci",
                            "prompt_tokens": 1 + n % 2000,  # noqa: B023 (called at once)
                            "output_tokens": 1 + n % 200,  # noqa: B023 (called at once)
                        },
                    ),
                )
                call("estimate batch", lambda: client.post("/v1/estimate/batch", json=batch))
                call("leaderboard", lambda: client.get("/v1/leaderboard"))
                call(
                    "monitor series",
                    lambda: client.get("/v1/monitor/series", params={"provider": "prov-soak"}),
                )
                call("metrics", lambda: client.get("/metrics"))
                call("health", lambda: client.get("/v1/health"))
                time.sleep(0.1)

    def plans() -> None:
        body = {"architecture": "llama-3.1-8b", "hardware": ["h100-sxm"],
                "workload": {"prompt_tokens": 1024, "output_tokens": 128},
                "max_gpus": 2, "concurrency": [1, 4, 16, 64],
                "max_verify_requests": 200}  # fmt: skip
        with httpx.Client(base_url=base_url, timeout=300) as client:
            while time.monotonic() < until:
                call("plan", lambda: client.post("/v1/plan", json=body))
                time.sleep(5.0)

    return [threading.Thread(target=work, daemon=True) for work in (writes, reads, plans)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--warmup-minutes", type=float, default=None)
    args = parser.parse_args()
    warmup_min = args.warmup_minutes
    if warmup_min is None:
        warmup_min = min(5.0, args.minutes / 5)

    with tempfile.TemporaryDirectory(prefix="ir-soak-") as home:
        env = {"IDEALIZED_RUNTIME_HOME": home, "DATABASE_URL": ""}
        subprocess.run(cli_command("db", "seed"), env={**os.environ, **env}, check=True,
                       capture_output=True)  # fmt: skip
        key = subprocess.run(
            cli_command("apikey", "create", "--name", "soak"), env={**os.environ, **env},
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with running_server(
            cli_command("serve", "--port", str(port)), f"{url}/v1/health", env=env,
            log_path=Path(home) / "server.log",
        ) as server:  # fmt: skip
            pid = server.pid
            started = time.monotonic()
            until = started + args.minutes * 60
            tally = Tally()
            threads = traffic(url, key, until, tally)
            samples = [(0.0, rss_mib(pid))]
            workers = [0.0]
            print(f"server pid {pid}, RSS at start {samples[0][1]:.0f} MiB", flush=True)
            for thread in threads:
                thread.start()
            while time.monotonic() < until:
                time.sleep(min(args.sample_s, max(0.0, until - time.monotonic())))
                elapsed = time.monotonic() - started
                samples.append((elapsed, rss_mib(pid)))
                workers.append(workers_rss_mib(pid))
                print(
                    f"{elapsed / 60:6.1f} min  RSS {samples[-1][1]:7.1f} MiB  "
                    f"(plan workers {workers[-1]:.0f} MiB)",
                    flush=True,
                )
            for thread in threads:
                thread.join(timeout=300)
            samples.append((time.monotonic() - started, rss_mib(pid)))
            log = (Path(home) / "server.log").read_text(errors="replace")

    warm = [rss for t, rss in samples if t <= warmup_min * 60]
    after = [rss for t, rss in samples if t > warmup_min * 60]
    at_warm = warm[-1]
    print()
    print(f"soak: {args.minutes:g} min of mixed traffic, warm-up {warmup_min:g} min, "
          f"RSS sampled every {args.sample_s:g} s ({len(samples)} samples)")  # fmt: skip
    print(f"| {'RSS (MiB)':<34} | {'value':>8} |")
    print(f"|{'-' * 36}|{'-' * 10}|")
    for label, value in [
        ("at start", samples[0][1]),
        ("at the end of the warm-up", at_warm),
        ("highest after the warm-up", max(after) if after else at_warm),
        ("at the end", samples[-1][1]),
    ]:
        print(f"| {label:<34} | {value:8.1f} |")
    growth = ((max(after) if after else at_warm) - at_warm) / at_warm * 100
    print(f"| {'growth after warm-up (highest, %)':<34} | {growth:8.1f} |")
    end_growth = (samples[-1][1] - at_warm) / at_warm * 100
    print(f"| {'growth after warm-up (end, %)':<34} | {end_growth:8.1f} |")
    print(f"| {'plan worker processes, highest':<34} | {max(workers):8.1f} |")
    print()
    print(f"| {'requests':<28} | {'status':>6} | {'count':>7} |")
    print(f"|{'-' * 30}|{'-' * 8}|{'-' * 9}|")
    for (kind, code), count in sorted(tally.counts.items()):
        print(f"| {kind:<28} | {code:>6} | {count:>7} |")
    for what, count in sorted(tally.errors.items()):
        print(f"| {what:<37} | {count:>7} |")
    server_errors = sum(c for (_, code), c in tally.counts.items() if code >= 500 and code != 503)
    print(f"\nserver errors (5xx other than 503): {server_errors}; "
          f"tracebacks in the server log: {log.count('Traceback')}")  # fmt: skip


if __name__ == "__main__":
    main()
