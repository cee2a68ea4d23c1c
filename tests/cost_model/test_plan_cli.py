"""`idealized-runtime plan`: the same answer as the library, a report folder, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.servers import REPO_ROOT, cli_command

SMALL = (
    "plan", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "--stack", "vllm",
    "--prompt-tokens", "1024", "--output-tokens", "128", "--concurrency", "1,8,64",
    "--max-gpus", "2", "--slo", "ttft=0.5,tpot=0.02", "--rate", "20",
)  # fmt: skip


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(*args), capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip


def test_plan_json_and_report(tmp_path: Path) -> None:
    report = tmp_path / "report"
    result = _run(*SMALL, "--no-verify", "--json", "--report", str(report))
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    best = body["best"]
    assert best["stack"] == "vllm" and best["meets_slo"]
    assert body["gpus_for_rate"] == body["replicas"] * best["gpus"]
    assert {f["stack"] for f in body["frontiers"]} == {"vllm"}
    assert json.loads((report / "plan.json").read_text())["best"] == best
    assert 'id="plan-h100-sxm"' in (report / "plan.html").read_text()


def test_plan_keeps_every_point_within_the_clients_a_replica_may_have() -> None:
    result = _run(*SMALL, "--max-concurrency", "6", "--no-verify", "--json")
    assert result.returncode == 0, result.stderr
    frontiers = json.loads(result.stdout)["frontiers"]
    clients = [p["concurrency"] for f in frontiers for p in f["points"]]
    assert clients and max(clients) == 6


def test_plan_searches_no_attention_data_parallelism_when_told() -> None:
    moe = ("plan", "--arch", "mixtral-8x7b", "--hardware", "h100-sxm", "--stack", "sglang",
           "--prompt-tokens", "1024", "--output-tokens", "128", "--concurrency", "8,64",
           "--max-gpus", "4", "--mode", "aggregated", "--no-verify", "--json")  # fmt: skip
    splits = {}
    for flag in ("--attention-dp", "--no-attention-dp"):
        result = _run(*moe, flag)
        assert result.returncode == 0, result.stderr
        frontiers = json.loads(result.stdout)["frontiers"]
        splits[flag] = {p["attention_dp"] for f in frontiers for p in f["points"]}
    assert splits["--no-attention-dp"] == {1} and splits["--attention-dp"] - {1}


def test_plan_tries_the_kv_cache_formats_asked() -> None:
    caches = {}
    for asked in ("bf16,fp8", "fp8", ""):
        result = _run(*SMALL, *(("--kv-cache", asked) if asked else ()), "--no-verify", "--json")
        assert result.returncode == 0, result.stderr
        frontiers = json.loads(result.stdout)["frontiers"]
        caches[asked] = {p["kv_cache"] for f in frontiers for p in f["points"]}
    assert caches["fp8"] == {"fp8"}
    # Both asked, or neither (the default on an H100: bf16 and fp8), search the same ones.
    assert caches["bf16,fp8"] and caches["bf16,fp8"] <= {"bf16", "fp8"}
    assert caches[""] == caches["bf16,fp8"]


def test_plan_refuses_a_moe_runner_no_engine_measured_there_in_one_line() -> None:
    result = _run("plan", "--arch", "mixtral-8x7b", "--hardware", "h100-sxm", "--stack",
                  "sglang", "--prompt-tokens", "1024", "--output-tokens", "128", "--max-gpus",
                  "2", "--no-verify", "--moe-runner", "triton")  # fmt: skip
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "moe_runner 'triton': sglang on h100-sxm has measured MoE runners none" in result.stderr


def test_plan_leads_with_the_answer_and_prints_frontiers_on_request() -> None:
    result = _run(*SMALL)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("best under the SLO: h100-sxm, vllm")
    assert "for 20 requests/s:" in result.stdout and "per million output tokens" in result.stdout
    # The check says what the SLO is judged on, and the p90 apart.
    (check,) = [line for line in lines if "simulated request by request" in line]
    assert "on the medians after the start-up burst (TTFT p50 " in check and "; p90 TTFT " in check
    assert "frontier h100-sxm vllm (" not in result.stdout and "--frontiers" in lines[-1]
    assert len(lines) <= 8, result.stdout

    full = _run(*SMALL, "--no-verify", "--frontiers", "--frontier-points", "3")
    assert full.returncode == 0, full.stderr
    assert full.stdout.startswith("best under the SLO: h100-sxm, vllm")
    assert "best per GPU under the SLO:" in full.stdout
    assert "frontier h100-sxm vllm (3 of " in full.stdout


# Options (split on spaces) and what the one-line error names.
BAD_INPUT = {
    "--hardware tpu-v9": "tpu-v9",
    "--stack nope": "unknown stack 'nope'",
    "--slo ttft=fast": "--slo",
    "--weights fp3": "fp3",
    "--mode sideways": "modes",
    "--min-length 1.5": "min_length_fraction",
    "--concurrency 0": "--concurrency",
    "--max-concurrency 0": "max_concurrency",
    "--activations fp8": "bf16 weights compute in bf16",  # --weights fp8 is the W8A8 one
    "--activations fp6": "unknown activation format 'fp6'",
    "--kv-cache fp9": "unknown KV-cache format 'fp9'",
    # 131,072 tokens of context: no engine serves a longer request (the last option wins)
    "--prompt-tokens 131000": "131000 prompt + 128 output tokens exceed the context length of",
    "--shared-prefix 2048": "a shared prefix of 2048 tokens is longer than the prompts (1024",
    # one output token has no TPOT to trade (the search divided by its zero decode steps)
    "--output-tokens 1": "a plan needs at least 2 output tokens, not 1",
    # settings that leave nothing to search say which one to change
    "--mode disaggregated --max-gpus 1": "disaggregated serving needs 2 GPUs per replica",
}


@pytest.mark.parametrize(("options", "fragment"), BAD_INPUT.items())
def test_bad_input_is_one_line_and_exit_2(options: str, fragment: str, tmp_path: Path) -> None:
    report = tmp_path / "report"
    result = _run(*SMALL, *options.split(), "--no-verify", "--report", str(report))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0]
    assert not report.exists()  # nothing written


def test_a_model_that_fits_nowhere_is_refused_in_one_line() -> None:
    result = _run(
        "plan", "--arch", "llama-3.1-405b", "--hardware", "h100-sxm", "--max-gpus", "2",
        "--prompt-tokens", "128", "--output-tokens", "16", "--stack", "vllm", "--no-verify",
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no deployment of llama-3.1-405b" in lines[0]
