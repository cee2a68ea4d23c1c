"""``idealized-runtime monitor`` end to end against loopback providers whose latency is injected:
a provider that slows down at a known round is flagged there, a steady one's TTFT never is over
the same rounds, a failing endpoint is a failed round that stops nothing, 429s are waited out,
``--once`` runs one round a call, and every round lands in the database with its statistics.

The latency is the fake server's (fixed delays times seeded log-normal noise, times a factor
from a given request on), so every run sees the same series up to the machine's own jitter,
which is small against the injected noise."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx

from idealized_runtime.api.report_database import database_trends
from idealized_runtime.monitor.state import exclusive
from idealized_runtime.trends.series import ProviderSeries
from tests.monitor.conftest import fake_provider, monitoring_file
from tests.servers import assert_refused_in_one_line, cli_command, run_cli

ROUNDS = 50
SHIFT_ROUND = 25  # the first round of the slower level
REQUESTS_PER_ROUND = 4  # 2 shapes x 2 repeats, sent at once
# Delays large against the machine's own scheduling jitter (a few ms on a busy CPU), with
# seeded log-normal noise of 20% per request.
LATENCY = ("--first-token-delay", "0.08", "--token-delay", "0.008", "--jitter", "0.2")


def series_of(url: str) -> dict[str, ProviderSeries]:
    return {item.provider: item for item in database_trends(url)}


def test_a_shift_is_flagged_at_its_round_and_a_steady_provider_never(tmp_path: Path) -> None:
    """Two monitors side by side for 50 rounds, each with its own state and database: one
    probes a steady provider, one a provider whose latency doubles from round 25."""
    shift = ("--shift-after", str(SHIFT_ROUND * REQUESTS_PER_ROUND), "--shift-factor", "2")
    with (
        fake_provider(tmp_path, "steady", *LATENCY, "--seed", "11") as steady,
        fake_provider(tmp_path, "slower", *LATENCY, "--seed", "12", *shift) as slower,
    ):
        endpoints = {
            "steady": {"provider": "steady", "base_url": steady, "model": "m",
                       "prices": {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0},
                       "reference": {"architecture": "llama-3.1-8b"}},
            "slower": {"provider": "slower", "base_url": slower, "model": "m"},
        }  # fmt: skip
        monitors = {}
        for name, endpoint in endpoints.items():
            config = monitoring_file(
                tmp_path / f"{name}.yaml",
                [endpoint],
                concurrency=REQUESTS_PER_ROUND,
                database=f"sqlite:///{tmp_path / name}.sqlite3",
            )
            state = tmp_path / f"{name}-state"
            command = cli_command("monitor", str(config), "--state", str(state),
                                  "--rounds", str(ROUNDS))  # fmt: skip
            monitors[name] = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        finished = {name: process.communicate(timeout=300) for name, process in monitors.items()}
    for name, process in monitors.items():
        assert process.returncode == 0, finished[name][1]
        assert f"{ROUNDS} round(s) run, {ROUNDS} stored" in finished[name][1]

    series = {}
    for name in endpoints:
        (series[name],) = database_trends(f"sqlite:///{tmp_path / name}.sqlite3")
    for item in series.values():
        assert [p.round_index for p in item.points] == list(range(ROUNDS))
        assert all(p.status == "ok" and p.requests == REQUESTS_PER_ROUND for p in item.points)
        assert all(p.denoised_runtime_s is not None for p in item.points)
        started = [p.started_at for p in item.points]
        assert started == sorted(started)
    # The steady provider: priced and referenced, and its TTFT (the injected 80 ms, large
    # against the machine's jitter) never flagged in 50 rounds. The other statistics hang on
    # 8 ms token delays, which a CPU busy with other tests for a while stretches by more than
    # the provider's noise: their false-alarm rate is measured on seeded series instead
    # (tests/trends/test_changes.py, benchmarks/monitor_change_detection.py).
    quiet = series["steady"]
    assert not [c for c in quiet.changes if c.statistic == "ttft_s"], quiet.changes
    assert quiet.reference is not None and "llama-3.1-8b" in quiet.reference
    assert all(p.usd and p.discrepancy for p in quiet.points)
    # The slower provider: TTFT and the denoised runtime shift at round 25, each flagged a few
    # rounds later (the rank test needs 4 or 5 rounds of the new level), the new level's
    # median about twice the old. ITL and output speed shift too; on a machine so busy that
    # streamed chunks arrive in bursts their medians can be too noisy to flag, but whatever
    # is flagged is flagged there and nowhere else.
    moved = series["slower"]
    flagged = {change.statistic: change for change in moved.changes}
    assert len(flagged) == len(moved.changes), moved.changes
    assert {"ttft_s", "denoised_runtime_s"} <= set(flagged), moved.changes
    assert set(flagged) <= {"ttft_s", "itl_s", "output_tokens_per_s", "denoised_runtime_s"}
    for change in moved.changes:
        assert abs(change.start_round_index - SHIFT_ROUND) <= 2, change
        assert SHIFT_ROUND + 3 <= change.round_index <= SHIFT_ROUND + 12, change
    for name in ("ttft_s", "denoised_runtime_s"):
        assert flagged[name].direction == "up" and 1.4 < 1 + flagged[name].relative < 2.5
    if "output_tokens_per_s" in flagged:
        assert flagged["output_tokens_per_s"].direction == "down"
    # The rows of every round stay in the state folder, one file per endpoint and round.
    for name in endpoints:
        rows = sorted((tmp_path / f"{name}-state").glob("rounds/*/*.jsonl"))
        assert len(rows) == ROUNDS
        assert all(len(path.read_text().splitlines()) == REQUESTS_PER_ROUND for path in rows)


def test_failing_endpoints_are_failed_rounds_and_429s_are_waited_out(tmp_path: Path) -> None:
    """Three endpoints: one that answers 429 to every request's first attempt, one with a key
    the provider refuses and one where nothing listens. ``--once`` twice: two rounds, each with
    one ok round of the first endpoint and a failed round of each of the others."""
    database = f"sqlite:///{tmp_path / 'monitor.sqlite3'}"
    with fake_provider(
        tmp_path, "limited", "--faults", "429", "--retry-after", "0.01", "--api-key", "k1"
    ) as limited:
        closed = limited.replace(limited.rsplit(":", 1)[1], "9/v1")  # discard port: nobody
        config = monitoring_file(
            tmp_path / "monitor.yaml",
            [
                {"provider": "limited", "base_url": limited, "model": "m",
                 "api_key_env": "LIMITED_KEY", "tokenizer": "bytes"},
                {"provider": "wrong-key", "base_url": limited, "model": "m",
                 "api_key_env": "WRONG_KEY", "tokenizer": "bytes"},
                {"provider": "nobody", "base_url": closed, "model": "m", "tokenizer": "bytes"},
            ],
            probe={"max_retries": 2},
            database=database,
        )  # fmt: skip
        state = tmp_path / "state"
        env = {"LIMITED_KEY": "k1", "WRONG_KEY": "nope"}
        runs = [
            run_cli_env(env, "monitor", str(config), "--state", str(state), "--once")
            for _ in range(2)
        ]
        stats = httpx.get(limited.removesuffix("/v1") + "/stats").json()
    for number, ran in enumerate(runs):
        assert ran.returncode == 0, ran.stderr
        assert f"round {number} limited/m: ok, 4/4 ok" in ran.stderr, ran.stderr
        assert f"round {number} wrong-key/m: failed" in ran.stderr
        assert f"round {number} nobody/m: failed" in ran.stderr
        assert "1 round(s) run, 3 stored" in ran.stderr
    # Every probe of the limited endpoint was refused once with 429 and sent again.
    assert stats["fault_429"] == stats["requests"] - stats["fault_429"] - stats["unauthorized"]
    assert stats["fault_429"] >= 8
    series = series_of(database)
    assert [p.status for p in series["limited"].points] == ["ok", "ok"]
    assert [p.error_rate for p in series["limited"].points] == [0.0, 0.0]
    for name, why in (("wrong-key", "401"), ("nobody", "ConnectError")):
        points = series[name].points
        assert [p.status for p in points] == ["failed", "failed"]
        assert all(p.error_rate == 1.0 and p.ttft_s is None for p in points)
        for path in sorted(state.glob(f"rounds/*/{name}--*.round.json")):
            assert why in json.loads(path.read_text())["error"], path


def run_cli_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with these environment variables added."""
    return subprocess.run(
        cli_command(*args), env={**os.environ, **env}, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_bad_monitoring_files_are_one_line_and_exit_2(tmp_path: Path) -> None:
    endpoint = {"provider": "p", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    cases = [
        ({"endpoints": []}, "endpoints"),
        ({"endpoints": [{**endpoint, "base_url": "ftp://x"}]}, "endpoints.0.base_url"),
        ({"endpoints": [{**endpoint, "api_key_env": "IR_TEST_UNSET_KEY"}]}, "IR_TEST_UNSET_KEY"),
        ({"endpoints": [endpoint, endpoint]}, "two endpoints"),
        ({"endpoints": [endpoint], "interval_s": -1}, "interval_s"),
        ({"endpoints": [endpoint], "probe": {"shapes": [[0, 4]]}}, "probe.shapes"),
        ({"endpoints": [{**endpoint, "reference": {"architecture": "nope"}}]}, "nope"),
        (
            {
                "endpoints": [{**endpoint, "reference": {"architecture": "llama-3.1-8b"}}],
                "probe": {"shapes": [[200000, 16]]},
            },
            "endpoint p/m, reference: 200000 prompt + 16 output tokens exceed the context length",
        ),
    ]
    state = tmp_path / "state"
    for number, (content, expected) in enumerate(cases):
        path = tmp_path / f"bad{number}.yaml"
        path.write_text(json.dumps(content), encoding="utf-8")
        ran = run_cli("monitor", str(path), "--state", str(state), "--database",
                      f"sqlite:///{tmp_path / 'db.sqlite3'}")  # fmt: skip
        assert_refused_in_one_line(ran, expected)
    assert not state.exists() and not (tmp_path / "db.sqlite3").exists()
    good = tmp_path / "good.yaml"
    good.write_text(json.dumps({"endpoints": [endpoint]}), encoding="utf-8")
    assert_refused_in_one_line(run_cli("monitor", str(good), "--to", "ftp://x"), "--to")
    assert_refused_in_one_line(run_cli("monitor", str(tmp_path / "none.yaml")), "none.yaml")


def test_one_monitor_at_a_time_on_a_state_folder(tmp_path: Path) -> None:
    """A timer that fires while the last round still runs: the second monitor stops at once."""
    endpoint = {"provider": "p", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    config = monitoring_file(tmp_path / "monitor.yaml", [endpoint])
    state = tmp_path / "state"
    database = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    with exclusive(state):  # as a running monitor holds it
        ran = run_cli("monitor", str(config), "--state", str(state), "--database", database,
                      "--once")  # fmt: skip
    assert_refused_in_one_line(ran, "another monitor is running on this state folder")
    assert not (state / "rounds").exists()
