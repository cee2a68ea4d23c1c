"""Nothing lost, nothing twice: the monitor sends its rounds to the real service
(``idealized-runtime serve`` on a loopback port, a SQLite file); the service is killed with
SIGKILL while the monitor runs on, then the monitor itself in the middle of a round's probe;
both are started again and every round of the 50 arrives exactly once, each with exactly its
own requests, and the provider's slowdown from round 25 on is flagged by the service."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from idealized_runtime.processes import stop_process, wait_until_healthy
from tests.monitor.conftest import fake_provider, monitoring_file
from tests.servers import cli_command, free_port

ROUNDS = 50
SHIFT_ROUND = 25  # the provider's first slower round
REQUESTS_PER_ROUND = 4
KEY_ENV = "IR_MONITOR_TEST_KEY"
# Long enough that a round's probe is caught half done.
LATENCY = ("--first-token-delay", "0.05", "--token-delay", "0.005", "--jitter", "0.1")
GUARD_S = 120.0  # a wait that never ends is a failure, not a hang


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def kill_hard(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


class Processes:
    """Every process this test starts, stopped (by PID) at its end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def start(self, command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        with open(log, "ab") as handle:
            process = subprocess.Popen(
                command, env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT
            )
        self.started.append(process)
        return process


@pytest.fixture
def processes() -> Iterator[Processes]:
    owned = Processes()
    yield owned
    for process in owned.started:
        stop_process(process, grace_s=5.0)


def test_rounds_survive_kill_9_of_the_monitor_and_of_the_service(
    tmp_path: Path, processes: Processes
) -> None:
    env = {
        "IDEALIZED_RUNTIME_HOME": str(tmp_path / "home"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'service.sqlite3'}",
    }
    for args in (("db", "upgrade"), ("apikey", "create", "--name", "monitor")):
        made = subprocess.run(
            cli_command(*args), env={**os.environ, **env}, capture_output=True, text=True
        )
        assert made.returncode == 0, made.stderr
    env[KEY_ENV] = made.stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = cli_command("serve", "--port", str(port))

    def start_service() -> subprocess.Popen:
        service = processes.start(serve, env, tmp_path / "service.log")
        wait_until_healthy(service, f"{url}/v1/health", GUARD_S, tmp_path / "service.log")
        return service

    def stored() -> list[dict]:
        page = httpx.get(f"{url}/v1/monitor/rounds", params={"limit": 500}, timeout=30).json()
        return page["items"]

    state = tmp_path / "state"

    def records() -> list[Path]:
        return sorted(state.glob("rounds/*/*.round.json"))

    def mid_probe() -> bool:
        """A round's probe has written some of its requests but not its record."""
        for rows in state.glob("rounds/*/*.jsonl"):
            done = rows.with_name(rows.name.removesuffix(".jsonl") + ".round.json")
            lines = rows.read_text().count("\n") if rows.exists() else 0
            if 0 < lines < REQUESTS_PER_ROUND and not done.exists():
                return True
        return False

    shift = ("--shift-after", str(SHIFT_ROUND * REQUESTS_PER_ROUND), "--shift-factor", "2")
    with fake_provider(tmp_path, "provider", *LATENCY, "--seed", "5", *shift) as provider:
        config = monitoring_file(
            tmp_path / "monitor.yaml",
            [{"provider": "prov", "base_url": provider, "model": "m"}],
        )
        monitor = cli_command("monitor", str(config), "--to", url, "--api-key-env", KEY_ENV,
                              "--state", str(state), "--rounds", str(ROUNDS))  # fmt: skip
        service = start_service()
        first = processes.start(monitor, env, tmp_path / "monitor-1.log")
        wait_for("five stored rounds", lambda: len(stored()) >= 5)
        # The service dies; the monitor goes on and keeps its rounds.
        kill_hard(service)
        before = len(records())
        wait_for("three more rounds", lambda: len(records()) >= before + 3)
        # The monitor dies in the middle of a round's probe.
        wait_for("a probe half done", mid_probe)
        kill_hard(first)
        assert first.returncode == -signal.SIGKILL
        unfinished = len(records())
        assert unfinished < ROUNDS
        # Both again: the service on its database, the monitor on its state.
        service = start_service()
        assert len(stored()) < unfinished  # the rounds run without the service still wait
        second = processes.start(monitor, env, tmp_path / "monitor-2.log")
        assert second.wait(timeout=GUARD_S) == 0, (tmp_path / "monitor-2.log").read_text()
        rounds = stored()
        sent = httpx.get(provider.removesuffix("/v1") + "/stats", timeout=30).json()

    # Every round exactly once, in order, with exactly its own requests.
    assert sorted(r["round_index"] for r in rounds) == list(range(ROUNDS))
    assert len({r["round_id"] for r in rounds}) == ROUNDS
    assert all(r["status"] == "ok" and r["requests"] == REQUESTS_PER_ROUND for r in rounds)
    # Each with its timestamp, its load summary and its measurement set.
    started = [datetime.fromisoformat(r["started_at"].replace("Z", "+00:00")) for r in rounds]
    finished = [datetime.fromisoformat(r["finished_at"].replace("Z", "+00:00")) for r in rounds]
    assert all(a.tzinfo is not None and a <= b for a, b in zip(started, finished, strict=True))
    assert all(r["summary"]["requests"] == REQUESTS_PER_ROUND for r in rounds)
    assert all(r["denoised_runtime_s"] and r["ttft_s"] for r in rounds)
    sets = {r["measurement_set_id"] for r in rounds}
    assert len(sets) == ROUNDS
    for set_id in sets:
        rows = httpx.get(f"{url}/v1/measurement-sets/{set_id}/measurements", timeout=30).json()
        assert rows["total"] == REQUESTS_PER_ROUND
    # The provider saw each probe once, but for the one the kill cut off (sent again).
    probes = ROUNDS * REQUESTS_PER_ROUND
    assert probes <= sent["streamed"] <= probes + 1, sent
    # The slowdown is found in the series the service keeps across the kills (one request
    # sent again after the monitor's kill may move it by a request).
    series = httpx.get(f"{url}/v1/monitor/series", timeout=30).json()["items"]
    (changes,) = [item["changes"] for item in series]
    ttft = [c for c in changes if c["statistic"] == "ttft_s"]
    assert len(ttft) == 1 and ttft[0]["direction"] == "up", changes
    assert abs(ttft[0]["start_round_index"] - SHIFT_ROUND) <= 2, changes
    # And the state folder holds each round's requests once.
    rows = sorted(state.glob("rounds/*/*.jsonl"))
    assert len(rows) == ROUNDS
    assert all(len(path.read_text().splitlines()) == REQUESTS_PER_ROUND for path in rows)
