"""`measure` end to end against a real (fake, misbehaving) OpenAI-compatible server on loopback:
retries, rejected fields, API keys, resume after SIGKILL, clean stop on SIGINT, load patterns."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.timing_client.conftest import ENV, keys, measure_args, read_rows, run_cli

FAST_RETRIES = ("--backoff-base", "0.01", "--backoff-max", "0.05")


def write_grid(path: Path, points: list[tuple[int, int]]) -> str:
    path.write_text(
        "num_prompt_tokens,num_output_tokens\n" + "".join(f"{p},{o}\n" for p, o in points)
    )
    return str(path)


def test_retries_on_429_dropped_connections_and_500(start_fake, tmp_path: Path) -> None:
    url = start_fake("--faults", "429,drop,500", "--retry-after", "0.2")
    grid = write_grid(tmp_path / "grid.csv", [(4, 3), (9, 5)])
    out = tmp_path / "raw.jsonl"
    for stream in ("--stream", "--no-stream"):
        result = run_cli(
            measure_args(url, out, "--grid", grid, "--repeats", "1", "--tokenizer", "bytes",
                         stream, "--endpoint", "chat" if stream == "--stream" else "completions",
                         *FAST_RETRIES)
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 4
    for row in rows:
        assert row["ok"] and row["status"] == 200 and row["error"] is None
        # 429 (waits Retry-After: 0.2 s), dropped connection, 500, then the answer.
        assert row["attempts"] == 4
        assert row["retry_waits_s"][0] == 0.2
        assert all(0 <= wait <= 0.05 for wait in row["retry_waits_s"][1:])
        assert row["runtime_s"] > 0
        assert not row["usage_mismatch"]
        assert row["num_prompt_tokens"] == row["requested_prompt_tokens"]
        assert row["num_output_tokens"] == row["requested_output_tokens"]
    stats = httpx.get(url.replace("/v1", "/stats")).json()
    assert stats["fault_429"] == stats["fault_drop"] == stats["fault_500"] >= 4


def test_broken_streams_are_retried_and_exhausted_retries_recorded(
    start_fake, tmp_path: Path
) -> None:
    url = start_fake("--faults", "midstream,500,500,500")
    grid = write_grid(tmp_path / "grid.csv", [(3, 8)])
    out = tmp_path / "raw.jsonl"
    result = run_cli(
        measure_args(url, out, "--grid", grid, "--repeats", "1", "--tokenizer", "bytes",
                     "--max-retries", "2", *FAST_RETRIES)
    )  # fmt: skip
    # The probe (max_tokens=1, not streamed) got through after its 500s; the request did not.
    rows = read_rows(out)
    assert len(rows) == 1
    (row,) = rows
    assert not row["ok"] and row["runtime_s"] is None and row["ttft_s"] is None
    assert row["attempts"] == 3 and row["status"] == 500 and "internal error" in row["error"]
    assert result.returncode == 1 and "every request failed" in result.stderr


def test_rejected_fields_are_dropped_once_per_run(start_fake, tmp_path: Path) -> None:
    url = start_fake("--reject-fields", "ignore_eos,min_tokens")
    out = tmp_path / "raw.jsonl"
    result = run_cli(measure_args(url, out, "--grid", "quick", "--repeats", "2"))
    assert result.returncode == 0, result.stderr
    assert "rejected ignore_eos, min_tokens" in result.stderr
    rows = read_rows(out)
    assert len(rows) == 18 and all(row["ok"] for row in rows)
    assert rows[-1]["dropped_fields"] == ["ignore_eos", "min_tokens"]
    # Calibration probes carry no fixed-length fields; the first measured request was rejected
    # once, and nothing after it.
    assert httpx.get(url.replace("/v1", "/stats")).json()["rejected_fields"] == 1
    assert {row["prompt_source"] for row in rows} == {"calibrated"}


def test_api_key_is_read_from_env_and_never_written(start_fake, tmp_path: Path) -> None:
    secret = "sk-test-0123456789abcdefSECRET"
    url = start_fake("--api-key", secret)
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", "quick", "--repeats", "1", "--api-key-env", "MY_KEY")
    result = run_cli(args, env={"MY_KEY": secret})
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 9 and all(row["ok"] for row in rows)
    for path in tmp_path.iterdir():
        assert secret not in path.read_text(errors="replace"), path
    assert secret not in result.stdout + result.stderr

    # A wrong key: 401 is not retried, the row says why, and the key is not echoed anywhere.
    wrong = "sk-wrong-key-9876543210"
    other = tmp_path / "wrong.jsonl"
    args = measure_args(url, other, "--grid", "quick", "--api-key-env", "MY_KEY")
    result = run_cli(args, env={"MY_KEY": wrong})
    assert result.returncode == 2 and "probe request" in result.stderr
    assert wrong not in result.stderr + result.stdout
    assert not other.exists() or wrong not in other.read_text()

    missing = run_cli(measure_args(url, other, "--api-key-env", "NOT_SET_ANYWHERE"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith("error: environment variable")


def _wait_for_rows(path: Path, count: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    raise TimeoutError(f"{path} did not reach {count} rows")


def _popen(args: list[str]) -> subprocess.Popen:
    import os

    from tests.servers import REPO_ROOT

    return subprocess.Popen(
        args,
        cwd=REPO_ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def signal_after_rows(
    args: list[str], out: Path, rows: int, signal_number: signal.Signals
) -> subprocess.Popen:
    """Start ``measure`` with ``args``, send it ``signal_number`` once ``out`` holds ``rows``
    rows (a run interrupted mid-way); the process, to wait for."""
    process = _popen(args)
    _wait_for_rows(out, rows, process)
    process.send_signal(signal_number)
    return process


def test_sigkill_then_resume_gives_every_key_exactly_once(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.02")
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", "quick", "--repeats", "3", "--concurrency", "2")
    process = signal_after_rows(args, out, 5, signal.SIGKILL)
    process.wait(timeout=10)
    written = read_rows(out)
    assert 5 <= len(written) < 27
    # As if the kill had hit mid-line: the resumed run must cut this off, not choke on it.
    with out.open("a") as handle:
        handle.write('{"model": "fake", "endpoint": "compl')

    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 27 and all(row["ok"] for row in rows)
    assert len(set(keys(rows))) == 27
    assert rows[: len(written)] == written  # nothing rewritten
    assert f"{len(written)} already in" in result.stderr.replace("\n", " ")

    again = run_cli(args)  # complete: nothing left to do, no probes either
    assert again.returncode == 0 and "0 rows written" in again.stderr
    assert len(read_rows(out)) == 27


def test_sigint_stops_cleanly_with_exit_130(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.02")
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", "quick", "--repeats", "3", "--concurrency", "3")
    process = signal_after_rows(args, out, 3, signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "again to resume" in stderr
    assert "Traceback" not in stderr
    text = out.read_text()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]  # every line complete
    assert 3 <= len(rows) < 27
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 27 and len(set(keys(rows))) == 27


def test_poisson_arrivals_and_usage_mismatch_flags(start_fake, tmp_path: Path) -> None:
    # The server adds a BOS token: the client learns it (prompts are one byte shorter), and the
    # 1-token prompt, which cannot be shorter than the BOS, is flagged.
    url = start_fake("--bos", "1")
    grid_json = tmp_path / "grid.json"
    grid_json.write_text(json.dumps([[1, 2], {"num_prompt_tokens": 32, "num_output_tokens": 2}]))
    grid = str(grid_json)
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", grid, "--repeats", "5", "--rate", "100",
                        "--tokenizer", "bytes", "--no-stream")  # fmt: skip
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 10
    assert {row["load"] for row in rows} == {"rate=100.0"}
    short = [row for row in rows if row["requested_prompt_tokens"] == 1]
    long = [row for row in rows if row["requested_prompt_tokens"] == 32]
    assert all(row["usage_mismatch"] and row["num_prompt_tokens"] == 2 for row in short)
    assert all(not row["usage_mismatch"] and row["num_prompt_tokens"] == 32 for row in long)
    assert all(row["ttft_s"] is None and row["inter_token_latencies_s"] == [] for row in rows)


def test_chat_stream_times_first_text_not_role_chunk(start_fake, tmp_path: Path) -> None:
    url = start_fake("--token-delay", "0.02")
    grid = write_grid(tmp_path / "grid.csv", [(8, 4)])
    out = tmp_path / "raw.jsonl"
    args = measure_args(url, out, "--grid", grid, "--repeats", "2", "--endpoint", "chat")
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    for row in read_rows(out):
        assert row["ok"] and row["endpoint"] == "chat"
        assert row["ttft_s"] >= 0.018  # the role-only chunk comes at once; text after a delay
        assert len(row["inter_token_latencies_s"]) == 3
        # The last text chunk leaves the server after 4 delays (single gaps may shrink when a
        # loaded machine delays one chunk and not the next).
        assert row["ttft_s"] + sum(row["inter_token_latencies_s"]) >= 4 * 0.02 - 0.002
        assert row["num_prompt_tokens"] == 8  # the chat template's 3 tokens were calibrated out


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "raw.jsonl"
    bad = tmp_path / "grid.csv"
    bad.write_text("num_prompt_tokens,num_output_tokens\n5,0\n")
    for extra, message in (
        (("--grid", str(bad)), "row 1"),
        (("--grid", "nope"), "grid must be"),
        (("--endpoint", "embeddings"), "--endpoint"),
    ):
        result = run_cli(measure_args("http://127.0.0.1:9/v1", out, *extra))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
