"""`idealized-runtime simulate`: rows `summarize` reads, one-line errors, no torch import."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import REPO_ROOT, cli_command


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(*args), capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rate_levels_write_rows_that_summarize_reads(tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl"
    result = _run(
        "simulate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "2,50",
        "--concurrency", "4", "--prompt-tokens", "256", "--output-tokens", "16",
        "--requests", "20", "--json", "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 2 and "exactly one of" in result.stderr  # rate + concurrency
    result = _run(
        "simulate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "2,50",
        "--prompt-tokens", "256", "--output-tokens", "16", "--requests", "20", "--json",
        "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = _rows(out)
    assert len(rows) == 40 and {r["load"] for r in rows} == {"rate=2.0", "rate=50.0"}
    assert all(r["ok"] and len(r["inter_token_latencies_s"]) == 15 for r in rows)
    printed = {s["load"]: s for s in json.loads(result.stdout)}
    summarized = _run("summarize", str(out), "--json")
    assert summarized.returncode == 0, summarized.stderr
    again = {s["load"]: s for s in json.loads(summarized.stdout)}
    assert printed == again
    assert again["rate=50.0"]["ttft_s"]["p50"] >= again["rate=2.0"]["ttft_s"]["p50"]


def test_workload_and_profiled_fit(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,num_prompt_tokens,num_output_tokens\n0,8,4\n0.01,16,4\n5,8,2\n")
    profile = tmp_path / "profile.csv"
    lines = ["model,num_prompt_tokens,num_output_tokens,batch_size,runtime_s,std_s,ttft_s,repeats"]
    for batch in (1, 2, 4):
        for p in (8, 32, 64):
            ttft = 0.01 + 1e-4 * batch * p
            lines.append(f"tiny,{p},9,{batch},{ttft + 8 * (0.01 + 2e-4 * batch)},0,{ttft},3")
    profile.write_text("\n".join(lines) + "\n")
    out, fit = tmp_path / "sim.jsonl", tmp_path / "step_fit.json"
    result = _run(
        "simulate", "--fit", str(profile), "--save-fit", str(fit), "--workload", str(trace),
        "--max-batch", "4", "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = _rows(out)
    assert [r["load"] for r in rows] == ["trace"] * 3 and rows[0]["model"] == "tiny"
    assert rows[2]["started_at_s"] == pytest.approx(5.0)
    assert json.loads(fit.read_text())["max_batch"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "fast"], "--rate takes comma-separated positive numbers"),
        (["--rate", "-2"], "positive numbers (e.g. --rate 0.5,2,8), got '-2'"),
        (["--rate", "2", "--arch", "no-such-model"], "no-such-model"),
        (["--workload", "missing.csv"], "cannot read workload"),
        (["--concurrency", "2.5"], "--concurrency takes comma-separated positive integers"),
        (["--concurrency", "2", "--think-time", "-0.5"], "--think-time must be >= 0 seconds"),
        (["--concurrency", "2", "--think-time", "nan"], "--think-time must be >= 0 seconds"),
        (["--rate", "2", "--think-time", "1"], "--think-time applies to closed-loop clients"),
        (["--rate", "2", "--engine-setting", "admission=forecast"], "needs an engine stack"),
        (["--rate", "2", "--stack", "vllm", "--engine-setting", "chunk"], "needs KEY=VALUE"),
        (
            ["--rate", "2", "--stack", "vllm", "--engine-setting", "x=1"],
            "unknown engine settings x",
        ),
        (
            ["--rate", "2", "--stack", "sglang", "--engine-setting", "admission=lifo"],
            "unknown admission rule 'lifo'",
        ),
        (
            ["--rate", "2", "--stack", "sglang", "--engine-setting", "memory_fraction=most"],
            "bad engine setting memory_fraction='most': memory_fraction takes a number",
        ),
        (
            ["--rate", "2", "--stack", "sglang", "--engine-setting", "fuse_shared_experts=maybe"],
            "fuse_shared_experts takes true or false",
        ),
        (
            ["--rate", "2", "--stack", "sglang", "--engine-setting", "recv_interval=2.5"],
            "recv_interval takes a whole number",
        ),
        (
            [
                "--rate",
                "2",
                "--arch",
                "mixtral-8x7b",
                "--stack",
                "tensorrt-llm",
                "--tp",
                "8",
                "--attention-dp",
                "4",
            ],
            "attention data-parallel size 4 on 8 GPUs is no split it runs",
        ),
        (
            ["--rate", "2", "--arch", "mixtral-8x7b", "--stack", "vllm", "--tp", "4", "--ep", "2"],
            "expert-parallel size 2 on 4 GPUs is no split it runs",
        ),
        (
            ["--concurrency", "1", "--prompt-tokens", "131000", "--output-tokens", "128"],
            "131000 prompt + 128 output tokens exceed the context length of llama-3.1-8b",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    base = ["--arch", "llama-3.1-8b", "--hardware", "h100-sxm"]
    if "--arch" in args:
        base = ["--hardware", "h100-sxm"]
    given = "--workload" in args or "--prompt-tokens" in args
    shape = [] if given else ["--prompt-tokens", "8", "--output-tokens", "2"]
    out = tmp_path / "sim.jsonl"
    result = _run("simulate", *base, *args, *shape, "-o", str(out))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not out.exists()


def test_requests_longer_than_the_context_are_refused_whole(tmp_path: Path) -> None:
    """A trace or a grid with requests over the model's context: one line naming how many and
    which, exit 2, nothing written; the same trace within the context simulates."""
    out = tmp_path / "sim.jsonl"
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "arrival_s,num_prompt_tokens,num_output_tokens\n0,100,10\n0.1,200000,10\n0.2,300,20\n"
    )
    base = ["simulate", "--hardware", "h100-sxm", "-o", str(out)]
    result = _run(*base, "--arch", "llama-3.1-8b", "--workload", str(trace))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert (
        "1 of 3 requests exceed the context length of llama-3.1-8b (131072 tokens), request 2 "
        "of the trace with 200000 prompt + 10 output tokens" in result.stderr
    )
    assert not out.exists()
    result = _run(*base, "--arch", "gpt2-124m", "--grid", "helm-synthetic", "--concurrency", "2")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "grid helm-synthetic:" in result.stderr and "context length of gpt2-124m (1024" in (
        result.stderr
    )
    assert not out.exists()
    trace.write_text("arrival_s,num_prompt_tokens,num_output_tokens\n0,100,10\n0.2,300,20\n")
    result = _run(*base, "--arch", "llama-3.1-8b", "--workload", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    assert len(_rows(out)) == 2


def test_think_time_spaces_a_closed_loop_clients_requests(tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl"
    result = _run(
        "simulate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "--concurrency", "1",
        "--think-time", "0.25", "--prompt-tokens", "64", "--output-tokens", "4",
        "--requests", "3", "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = _rows(out)
    for before, after in itertools.pairwise(rows):
        assert after["started_at_s"] == pytest.approx(before["finished_at_s"] + 0.25)


def test_bad_trace_row_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"arrival_s": 0, "num_prompt_tokens": 0, "num_output_tokens": 2}\n')
    result = _run(
        "simulate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", str(trace),
        "-o", str(tmp_path / "sim.jsonl"),
    )  # fmt: skip
    assert result.returncode == 2 and "request 1: num_prompt_tokens" in result.stderr


def test_simulate_does_not_import_torch(tmp_path: Path) -> None:
    code = (
        "import sys; from idealized_runtime.cli import main; sys.argv = ['x', 'simulate', "
        "'--arch', 'tiny-llama', '--hardware', 'a100-80gb', '--rate', '5', '--prompt-tokens', "
        f"'8', '--output-tokens', '2', '--requests', '3', '-o', {str(tmp_path / 's.jsonl')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_engine_settings_change_the_server(tmp_path: Path) -> None:
    base = ["simulate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "--stack", "sglang",
            "--rate", "50", "--prompt-tokens", "64", "--output-tokens", "32",
            "--requests", "16", "--json"]  # fmt: skip
    plain = _run(*base, "-o", str(tmp_path / "a.jsonl"))
    polled = _run(*base, "--engine-setting", "recv_interval=30", "-o", str(tmp_path / "b.jsonl"))
    assert plain.returncode == polled.returncode == 0, polled.stderr
    ttft = [json.loads(r.stdout)[0]["ttft_s"]["p50"] for r in (plain, polled)]
    assert ttft[1] > ttft[0]  # arrivals during decoding wait for the scheduler's next poll
