"""Load levels in `measure` against a real (fake) OpenAI-compatible server on loopback: lists of
concurrencies and rates, sweeps (killed and resumed), trace replays, over-saturation stops, and
one-line errors for bad levels and trace files."""

from __future__ import annotations

import asyncio
import datetime
import json
import signal
import time
from pathlib import Path

import pytest

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.levels import levels_state_path, measure_levels, sweep_rates
from idealized_runtime.timing.load_patterns import (
    parse_start_time,
    read_workload,
    run_at_arrivals,
)
from idealized_runtime.timing.summary import summarize
from tests.timing_client.conftest import measure_args, read_rows, run_cli
from tests.timing_client.test_measure_fake_server import signal_after_rows, write_grid


def level_keys(rows: list[dict]) -> list[tuple]:
    return [
        (r["load"], r["requested_prompt_tokens"], r["requested_output_tokens"], r["repeat"])
        for r in rows
    ]


def test_concurrency_and_rate_lists_record_their_level(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.002")
    grid = write_grid(tmp_path / "grid.csv", [(4, 3), (8, 2)])
    out = tmp_path / "raw.jsonl"
    common = ("--grid", grid, "--repeats", "2", "--tokenizer", "bytes")
    result = run_cli(measure_args(url, out, *common, "--concurrency", "1,3,3"))
    assert result.returncode == 0, result.stderr
    assert "concurrency=1:" in result.stderr and "concurrency=3:" in result.stderr
    result = run_cli(measure_args(url, out, *common, "--rate", "50,200"))
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 16 and len(set(level_keys(rows))) == 16
    loads = [row["load"] for row in rows]
    assert sorted(set(loads)) == ["concurrency=1", "concurrency=3", "rate=200.0", "rate=50.0"]
    for row in rows:
        assert 0 <= row["started_at_s"] <= row["finished_at_s"] and row["run_id"]
    summaries = summarize(rows)
    assert [s.load for s in summaries] == [
        "concurrency=1", "concurrency=3", "rate=50.0", "rate=200.0",
    ]  # fmt: skip
    assert all(s.requests == 4 and s.requests_per_s > 0 for s in summaries)


def test_sweep_killed_and_resumed_has_every_level_once(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.005")
    grid = write_grid(tmp_path / "grid.csv", [(4, 4), (8, 4), (16, 4)])
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", grid, "--repeats", "4", "--tokenizer", "bytes",
                        "--sweep", "2")  # fmt: skip
    process = signal_after_rows(args, out, 5, signal.SIGKILL)
    process.communicate(timeout=20)
    killed = read_rows(out)
    assert 5 <= len(killed) < 48
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert rows[: len(killed)] == killed  # nothing rewritten
    assert len(level_keys(rows)) == len(set(level_keys(rows)))  # no duplicates
    loads = list(dict.fromkeys(row["load"] for row in rows))
    assert loads[:2] == ["sweep:synchronous", "sweep:throughput"]
    rates = [load for load in loads if load.startswith("sweep:rate=")]
    skipped = result.stderr.count(": skipped")
    assert len(rates) + skipped == 2
    for load in ("sweep:synchronous", "sweep:throughput", *rates):
        assert sum(row["load"] == load for row in rows) == 12 or load in rates
    # The killed level was resumed in a second run of it (its own clock).
    assert len({row["run_id"] for row in rows if row["load"] == killed[-1]["load"]}) == 2
    # The rates lie strictly between the two bounds' throughputs; a rerun finds the same levels.
    by_load = {s.load: s for s in summarize(rows)}
    low, high = (
        by_load["sweep:synchronous"].requests_per_s,
        by_load["sweep:throughput"].requests_per_s,
    )
    expected = [f"sweep:rate={rate}" for rate in sweep_rates(low, high, 2)]
    assert rates == expected[: len(rates)]
    again = run_cli(args)
    assert again.returncode == 0, again.stderr
    assert len(read_rows(out)) == len(rows)


def test_trace_replay_keeps_arrivals_and_resumes(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.001")
    trace = tmp_path / "trace.jsonl"
    requests = [(0.3, 8, 2), (0.0, 4, 3), (0.1, 4, 3), (0.2, 16, 1)]
    trace.write_text(
        "".join(
            json.dumps({"arrival_time": t + 100, "prompt_tokens": p, "output_tokens": o}) + "\n"
            for t, p, o in requests
        )
    )
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--workload", str(trace), "--tokenizer", "bytes")
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert {row["load"] for row in rows} == {"trace"}
    by_index = {row["repeat"]: row for row in rows}
    # Sorted by arrival, relative to the first: index i arrives at 0.1 * i.
    assert [(by_index[i]["requested_prompt_tokens"]) for i in range(4)] == [4, 4, 16, 8]
    for index, row in by_index.items():
        assert row["started_at_s"] >= 0.1 * index - 1e-6
    assert run_cli(args).returncode == 0
    assert len(read_rows(out)) == 4


def test_trace_replay_sends_at_arrival_times_while_earlier_requests_run(
    start_fake, tmp_path: Path
) -> None:
    """An open loop: each request of ~1 s starts at its arrival 0.05 s after the previous
    one, not when a connection frees up (one at a time they would start 1 s apart)."""
    url = start_fake("--token-delay", "0.2")
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,num_prompt_tokens,num_output_tokens\n" + "".join(
        f"{0.05 * i},4,5\n" for i in range(4)
    ))  # fmt: skip
    out = tmp_path / "raw.jsonl"
    result = run_cli(measure_args(url, out, "--workload", str(trace), "--tokenizer", "bytes"))
    assert result.returncode == 0, result.stderr
    rows = sorted(read_rows(out), key=lambda row: row["repeat"])
    assert all(row["ok"] for row in rows)
    for index, row in enumerate(rows):
        assert row["started_at_s"] >= 0.05 * index - 1e-6
        # ~1 s of its own after its arrival; queued behind the others it would end at
        # index + 1 s.
        assert row["finished_at_s"] < 0.05 * index + 1.6


def test_trace_replay_starts_at_the_given_wall_clock_time(start_fake, tmp_path: Path) -> None:
    """--start-at places the trace's time 0 on the wall clock: no request goes out before its
    place (clients in other processes can replay one schedule together)."""
    url = start_fake()
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,num_prompt_tokens,num_output_tokens\n0,4,2\n0.3,4,2\n")
    out = tmp_path / "raw.jsonl"
    start_at = time.time() + 2.0
    iso = datetime.datetime.fromtimestamp(start_at, datetime.timezone.utc).isoformat()
    args = ("--workload", str(trace), "--tokenizer", "bytes", "--start-at", iso)
    result = run_cli(measure_args(url, out, *args))
    assert result.returncode == 0, result.stderr
    rows = sorted(read_rows(out), key=lambda row: row["repeat"])
    assert [row["ok"] for row in rows] == [True, True]
    for row, arrival in zip(rows, (0.0, 0.3), strict=True):
        sent = datetime.datetime.fromisoformat(row["started_at"]).timestamp()
        assert sent >= start_at + arrival - 1e-3


def test_arrivals_already_past_the_wall_clock_start_go_out_at_once() -> None:
    """A start 10 s ago: the arrivals at 0 and 5 s are due and go out at once, the one at 12 s
    waits for its time (2 s from now)."""
    zero = time.time() - 10.0
    sent: dict[int, float] = {}

    async def run(job: int) -> None:
        sent[job] = time.time()

    asyncio.run(run_at_arrivals([0, 1, 2], [0.0, 5.0, 12.0], run, zero_at_wall_s=zero))
    assert sent[0] < zero + 11.5 and sent[1] < zero + 11.5
    assert sent[2] >= zero + 12.0 - 1e-3


def test_start_at_needs_a_trace_and_a_time_with_its_zone(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,num_prompt_tokens,num_output_tokens\n0,4,2\n")
    out = tmp_path / "raw.jsonl"
    cases = [
        (("--start-at", "1795480000"), "--start-at needs --workload"),
        (("--workload", str(trace), "--start-at", "soon"), "Unix seconds or an ISO 8601 time"),
        (("--workload", str(trace), "--start-at", "2026-11-24T00:30:00"), "give the time zone"),
        (("--workload", str(trace), "--start-at", "-5"), "a time after 1970"),
    ]
    for extra, message in cases:
        result = run_cli(measure_args("http://127.0.0.1:9/v1", out, *extra))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert not out.exists()
    assert parse_start_time("2026-11-24T00:30:00Z") == parse_start_time("2026-11-24T01:30+01:00")
    assert parse_start_time("1795480000.5") == 1795480000.5


def test_over_saturated_level_stops_and_is_not_offered_again(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.05")
    out = tmp_path / "raw.jsonl"
    config = MeasureConfig(
        base_url=url, model="fake", grid=[GridPoint(4, 8)], repeats=40, tokenizer="bytes",
        stop_in_flight=2,
    )  # fmt: skip

    first = asyncio.run(measure_levels(config, [{"rate": 500.0}, {"rate": 1000.0}], out))
    assert [level.load for level in first.levels] == ["rate=500.0", "rate=1000.0"]
    assert all(level.stopped and "in flight" in level.stopped for level in first.levels)
    assert all(level.written < 40 for level in first.levels)
    assert set(json.loads(levels_state_path(out).read_text())["stopped"]) == {
        "rate=500.0", "rate=1000.0",
    }  # fmt: skip
    again = asyncio.run(
        measure_levels(config, [{"rate": 500.0}, {"rate": 1000.0}], out, skip_after_stop=True)
    )
    assert again.levels == [] and again.skipped == ["rate=500.0", "rate=1000.0"]


def test_sweep_rates_lie_strictly_between_the_bounds() -> None:
    assert sweep_rates(1.0, 5.0, 3) == [2.0, 3.0, 4.0]
    assert sweep_rates(5.0, 1.0, 1) == [3.0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--rate", "0"), "--rate takes comma-separated positive numbers"),
        (("--rate", "2,fast"), "--rate takes comma-separated positive numbers"),
        (("--concurrency", "1,0"), "--concurrency takes comma-separated positive integers"),
        (("--concurrency", "2.5"), "--concurrency takes comma-separated positive integers"),
        (("--sweep", "0"), "--sweep needs at least 1"),
        (("--rate", "1", "--sweep", "2"), "choose one of"),
        (("--workload", "missing.csv"), "cannot read the workload"),
        (("--workload", "tests/timing_client/__init__.py"), "the workload has no requests"),
    ],
)
def test_bad_levels_are_one_line_exit_2(tmp_path: Path, extra: tuple, message: str) -> None:
    out = tmp_path / "raw.jsonl"
    result = run_cli(measure_args("http://127.0.0.1:9/v1", out, *extra))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ("arrival_s,num_prompt_tokens\n0,4\n", ".csv", "missing num_output_tokens"),
        ("arrival_s,prompt_tokens,output_tokens\n-1,4,2\n", ".csv", "non-negative"),
        ("arrival_s,prompt_tokens,output_tokens\nsoon,4,2\n", ".csv", "non-negative"),
        ("arrival_s,prompt_tokens,output_tokens\n0,4,0\n", ".csv", "from 1 to"),
        ("arrival_s,prompt_tokens,output_tokens\n", ".csv", "no requests"),
        ('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 2}\n[1]\n', ".jsonl", "row 2"),
    ],
)
def test_bad_trace_files_are_input_errors(
    tmp_path: Path, text: str, suffix: str, message: str
) -> None:
    trace = tmp_path / f"trace{suffix}"
    trace.write_text(text)
    with pytest.raises(InputError, match=message):
        read_workload(trace)


def test_read_workload_sorts_and_rebases_arrivals(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_length,output_length\n12.5,10,3\n10,20,4.0\n")
    assert read_workload(trace) == [(0.0, 20, 4), (2.5, 10, 3)]
