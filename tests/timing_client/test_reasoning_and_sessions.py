"""The workloads people run now, end to end against a loopback server that streams reasoning
deltas and counts cached prefix tokens (tests/timing_client/fake_openai.py): every figure of
`measure`'s rows is checked against the server's own count of the same request (its request
log, matched by response id), then `summarize` per turn and with a price table, and resume."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from idealized_runtime.cost_model.fitting.measurements_io import read_measurements
from idealized_runtime.timing.summary import summarize
from tests.servers import cli_command
from tests.timing_client.conftest import measure_args, read_rows, run_cli
from tests.timing_client.test_measure_fake_server import write_grid


def server_log(path: Path) -> dict[str, dict[str, Any]]:
    """The server's own counts per request, by response id."""
    return {record["id"]: record for record in map(json.loads, path.read_text().splitlines())}


def write_conversations(path: Path, sessions: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(session) + "\n" for session in sessions))
    return str(path)


THREE_SESSIONS = [
    {"session_id": "s1", "turns": [
        {"input_length": 24, "output_length": 6},
        {"input_length": 10, "output_length": 5, "delay": 30},
        {"input_length": 7, "output_length": 4, "delay": 10},
    ]},
    {"session_id": "s2", "arrival_s": 0.02, "turns": [
        {"prompt_tokens": 40, "output_tokens": 3},
        {"prompt_tokens": 5, "output_tokens": 8, "think_time_s": 0.02},
        {"prompt_tokens": 12, "output_tokens": 2},
    ]},
    {"session_id": "s3", "arrival_s": 0.01, "turns": [
        {"input_length": 16, "output_length": 4},
        {"input_length": 16, "output_length": 4},
        {"input_length": 16, "output_length": 4},
    ]},
]  # fmt: skip


@pytest.mark.parametrize(
    ("endpoint", "field"),
    [("chat", "reasoning_content"), ("chat", "reasoning"), ("completions", "reasoning_content")],
)
def test_reasoning_rows_match_the_servers_counts(
    start_fake, tmp_path: Path, endpoint: str, field: str
) -> None:
    log = tmp_path / "server.jsonl"
    url = start_fake("--reasoning", "6", "--reasoning-field", field, "--request-log", str(log))
    grid = write_grid(tmp_path / "grid.csv", [(12, 10), (20, 16)])
    out = tmp_path / "raw.jsonl"
    args = ("--grid", grid, "--repeats", "2", "--tokenizer", "bytes", "--endpoint", endpoint)
    result = run_cli(measure_args(url, out, *args))
    assert result.returncode == 0, result.stderr
    counts, rows = server_log(log), read_rows(out)
    assert len(rows) == 4
    for row in rows:
        server = counts[row["response_id"]]
        assert row["ok"] and not row["usage_mismatch"]
        assert row["reasoning_tokens"] == server["reasoning_tokens"] == 6
        assert (
            row["num_output_tokens"]
            == server["completion_tokens"]
            == row["requested_output_tokens"]
        )
        assert row["num_prompt_tokens"] == server["prompt_tokens"]
        # One chunk a token, reasoning and answer alike: the gaps span the whole decode.
        assert len(row["inter_token_latencies_s"]) == server["completion_tokens"] - 1
        assert 0 < row["ttft_s"] < row["ttft_answer_s"] <= row["runtime_s"]
    (level,) = summarize(rows)
    assert level.reasoning_tokens_mean == 6
    assert level.ttft_answer_s.p50 > level.ttft_s.p50
    table = run_cli(cli_command("summarize", str(out)))
    assert "answer TTFT p50" in table.stdout and "reasoning tok" in table.stdout


def test_a_model_that_stops_early_is_fitted_on_the_tokens_it_produced(
    start_fake, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    url = start_fake("--reasoning", "4", "--answer-tokens", "3", "--request-log", str(log))
    grid = write_grid(tmp_path / "grid.csv", [(8, 16), (8, 32), (24, 16), (24, 32)])
    out = tmp_path / "raw.jsonl"
    result = run_cli(
        measure_args(url, out, "--grid", grid, "--repeats", "1", "--tokenizer", "bytes",
                     "--endpoint", "chat", "--no-stream")
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    counts, rows = server_log(log), read_rows(out)
    for row in rows:
        server = counts[row["response_id"]]
        assert row["num_output_tokens"] == server["completion_tokens"] == 7
        assert row["reasoning_tokens"] == 4 and row["usage_mismatch"]
        assert row["finish_reason"] == "stop" and row["ttft_answer_s"] is None
    # What `fit --method denoised` reads: the tokens produced, not the tokens asked for.
    assert {m.num_output_tokens for m in read_measurements(out)} == {7}


def test_conversations_resend_their_history_which_the_server_caches(
    start_fake, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    url = start_fake("--prefix-cache", "--request-log", str(log), "--token-delay", "0.001")
    workload = write_conversations(tmp_path / "conversations.jsonl", THREE_SESSIONS)
    out = tmp_path / "raw.jsonl"
    result = run_cli(measure_args(url, out, "--workload", workload, "--tokenizer", "bytes"))
    assert result.returncode == 0, result.stderr
    assert "sessions: 9 rows written (9 ok" in result.stderr
    counts, rows = server_log(log), read_rows(out)
    by_turn = {(row["session"], row["turn"]): row for row in rows}
    assert sorted(by_turn) == [(s, t) for s in ("s1", "s2", "s3") for t in range(3)]
    for session in THREE_SESSIONS:
        name, history = session["session_id"], 0
        for turn, spec in enumerate(session["turns"]):
            row = by_turn[(name, turn)]
            server = counts[row["response_id"]]
            new = spec.get("input_length") or spec["prompt_tokens"]
            # On completions a byte-level server counts exactly the history + the new prompt.
            assert row["num_prompt_tokens"] == row["requested_prompt_tokens"] == history + new
            assert row["num_prompt_tokens"] == server["prompt_tokens"]
            assert row["cached_prompt_tokens"] == server["cached_tokens"]
            if turn:  # the whole history is a prefix the server has seen
                assert row["cached_prompt_tokens"] >= history
            history += new + row["num_output_tokens"]
            assert row["load"] == "sessions" and row["repeat"] == [
                "s1", "s3", "s2"
            ].index(name)  # fmt: skip
    # Each turn goes out after the previous one ended and its think time passed.
    s1 = [by_turn[("s1", turn)] for turn in range(3)]
    assert [row["think_time_s"] for row in s1] == [0.0, 0.03, 0.01]
    for before, after in itertools.pairwise(s1):
        assert after["started_at_s"] >= before["finished_at_s"] + after["think_time_s"] - 1e-3

    (level,) = summarize(rows)
    assert [t.turn for t in level.turns] == [0, 1, 2]
    assert all(t.requests == 3 for t in level.turns)
    assert level.turns[2].prompt_tokens_mean > level.turns[1].prompt_tokens_mean
    assert level.turns[2].cached_prompt_tokens_mean > level.turns[0].cached_prompt_tokens_mean
    table = run_cli(cli_command("summarize", str(out)))
    assert "per turn" in table.stdout

    # Resume: a run that lost the last turn of two sessions sends just those, with the history
    # rebuilt (the earlier answers as filler of their lengths: the server counts the same).
    kept = [row for row in rows if row["turn"] < 2 or row["session"] == "s2"]
    out.write_text("".join(json.dumps(row) + "\n" for row in kept))
    before = httpx.get(url.replace("/v1", "/stats")).json()["requests"]
    again = run_cli(measure_args(url, out, "--workload", workload, "--tokenizer", "bytes"))
    assert again.returncode == 0, again.stderr
    assert "2 rows written" in again.stderr and "7 already" in again.stderr
    assert httpx.get(url.replace("/v1", "/stats")).json()["requests"] == before + 2
    resumed = read_rows(out)[len(kept) :]
    assert sorted((row["session"], row["turn"]) for row in resumed) == [("s1", 2), ("s3", 2)]
    for row in resumed:
        assert row["num_prompt_tokens"] == row["requested_prompt_tokens"]
        assert row["think_time_s"] == 0.0  # a resumed session sends its missing turn at once


def test_chat_conversations_with_reasoning_cache_up_to_the_previous_prompt(
    start_fake, tmp_path: Path
) -> None:
    """Clients leave the reasoning out of the history, so the server's cached prefix (which
    holds it) ends where the previous prompt did."""
    log = tmp_path / "server.jsonl"
    url = start_fake("--prefix-cache", "--reasoning", "3", "--request-log", str(log))
    sessions = [{"session_id": "a", "turns": [
        {"input_length": 30, "output_length": 6}, {"input_length": 9, "output_length": 6},
        {"input_length": 9, "output_length": 6},
    ]}]  # fmt: skip
    workload = write_conversations(tmp_path / "chat.jsonl", sessions)
    out = tmp_path / "raw.jsonl"
    result = run_cli(
        measure_args(url, out, "--workload", workload, "--tokenizer", "bytes", "--endpoint",
                     "chat", "--concurrency", "1")
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    counts = server_log(log)
    rows = sorted(read_rows(out), key=lambda row: row["turn"])
    assert {row["load"] for row in rows} == {"sessions:concurrency=1"}
    for previous, row in itertools.pairwise(rows):
        server = counts[row["response_id"]]
        assert row["cached_prompt_tokens"] == server["cached_tokens"]
        assert row["num_prompt_tokens"] == server["prompt_tokens"]
        assert row["reasoning_tokens"] == server["reasoning_tokens"] == 3
        assert row["cached_prompt_tokens"] == previous["num_prompt_tokens"]


def test_rows_of_an_older_contract_still_resume(start_fake, tmp_path: Path) -> None:
    url = start_fake()
    grid = write_grid(tmp_path / "grid.csv", [(6, 2), (9, 3)])
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", grid, "--repeats", "2", "--tokenizer", "bytes")
    assert run_cli(args).returncode == 0
    newer = ("reasoning_tokens", "ttft_answer_s", "cached_prompt_tokens", "session", "turn",
             "think_time_s")  # fmt: skip
    old = [{k: v for k, v in row.items() if k not in newer} for row in read_rows(out)]
    old[-1]["load"] = {"pattern": "concurrency", "concurrency": 1}  # the oldest form of a level
    out.write_text("".join(json.dumps(row) + "\n" for row in old))
    before = httpx.get(url.replace("/v1", "/stats")).json()["requests"]
    again = run_cli(args)
    assert again.returncode == 0, again.stderr
    assert "0 rows written" in again.stderr and "4 already" in again.stderr
    assert httpx.get(url.replace("/v1", "/stats")).json()["requests"] == before
    (level,) = summarize(read_rows(out))
    assert level.ttft_answer_s == level.ttft_s and level.turns == ()


def test_conversation_load_options(tmp_path: Path) -> None:
    workload = write_conversations(tmp_path / "c.jsonl", THREE_SESSIONS[:1])
    out = tmp_path / "raw.jsonl"
    for extra, message in (
        (("--rate", "2"), "choose one of"),
        (("--start-at", "1795480000"), "--start-at needs --workload with a trace"),
    ):
        result = run_cli(measure_args("http://127.0.0.1:9/v1", out, "--workload", workload, *extra))
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and not out.exists()
