"""Token budgets as the engines run them (chunk, wait, refuse), the starvation warning, the
budget sized as deployments size it, and the plan's budget knob.

The rules, from the engines' source:

- vLLM V1 (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``): running requests first
  (decode tokens, then a partial prompt's next chunk), then waiting ones, each taking
  min(its tokens, the budget left) with chunked prefill; without it a waiting prompt longer
  than what is left stops the waiting queue (``break``); vllm/config/scheduler.py
  (``verify_max_model_len``) refuses to start with max_num_batched_tokens < max_model_len and
  chunked prefill off, so a prompt + output longer than the budget is never served.
- SGLang (python/sglang/srt/managers/schedule_policy.py, ``PrefillAdder``): a prefill batch
  runs alone; with chunked prefill the last prompt is cut to the chunk left; without it the
  first prompt of a batch goes in whatever its length ("allow the first request even above
  the input cap") and a later one only while shorter than the tokens left.
- TensorRT-LLM PyTorch backend (tensorrt_llm/_torch/pyexecutor/scheduler.py,
  ``PyMicroBatchScheduler.schedule``): requests in arrival order, generation tokens and whole
  context requests within max_num_tokens, the first that does not fit stopping the rest;
  tensorrt_llm/llmapi/llm.py (``_check_arguments``) refuses a prompt longer than max_num_tokens
  when chunked prefill is off (its default).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment, parse_precision
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine
from idealized_runtime.cost_model.hardware.engines.step import (
    budget_refusal,
    sized_token_budget,
)
from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import mean_request, plan, point_servers
from idealized_runtime.cost_model.planning.space import Layout, token_budgets
from idealized_runtime.cost_model.serving.engines import engine_server
from idealized_runtime.cost_model.serving.simulator import (
    ServerConfig,
    check_budget,
    simulate,
    starvation_warning,
)
from idealized_runtime.cost_model.serving.steady_state import running_requests
from idealized_runtime.cost_model.serving.workload import RequestShape
from tests.servers import assert_refused_in_one_line, run_cli
from tests.step_recorder import StepRecorder

LLAMA_70B = get_architecture("llama-3.1-70b")
H200 = get_hardware("h200")
FP8 = parse_precision("fp8", None, None, default=LLAMA_70B.precision or parse_precision("bf16"))
DEPLOYMENT = Deployment(architecture=LLAMA_70B, hardware=H200, tp=8, precision=FP8)


def _server(engine: str, chunked: bool) -> ServerConfig:
    """The engine's rule at a budget of 8192, chunked or not."""
    scheduler = get_engine(engine).scheduler
    return ServerConfig(
        max_batch=64, token_budget=8192, chunked_prefill=chunked,
        prefill_first=scheduler.prefill_first, unchunked_limit=scheduler.unchunked_limit,
        budget_setting=scheduler.budget_setting,
    )  # fmt: skip


# --- the rules per engine, by hand ------------------------------------------------------------


def test_engines_state_their_rules_as_their_source_does() -> None:
    rules = {
        name: (s.chunked_prefill, s.prefill_first, s.unchunked_limit, s.sized_budget,
               s.budget_setting)
        for name in ("vllm", "sglang", "tensorrt-llm")
        for s in [get_engine(name).scheduler]
    }  # fmt: skip
    assert rules == {
        "vllm": (True, False, "sequence", False, "max_num_batched_tokens"),
        "sglang": (True, True, "none", False, "chunked_prefill_size"),
        "tensorrt-llm": (False, False, "prompt", True, "max_num_tokens"),
    }


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_chunked_prefill_cuts_a_prompt_to_what_is_left(engine: str) -> None:
    config = _server(engine, chunked=True)
    assert config.chunks(0, [8192]) == [8192]  # prompt = budget: one step
    assert config.chunks(0, [20000]) == [8192]  # prompt > budget: chunks
    assert config.chunks(0, [100, 20000, 5]) == [100, 8092]  # FCFS, one partial at the end
    decoding = 0 if config.prefill_first else 3  # SGLang's prompt steps hold no decode token
    assert sum(config.chunks(decoding, [20000])) + decoding == 8192
    check_budget([RequestShape(50000, 2000)], config)  # every prompt is served


@pytest.mark.parametrize("engine", ["vllm", "tensorrt-llm"])
def test_whole_prompts_wait_beside_running_decodes(engine: str) -> None:
    config = _server(engine, chunked=False)
    assert config.chunks(0, [8192]) == [8192]  # prompt = budget on an idle server: runs
    assert config.chunks(1, [8192]) == []  # beside one running decode: waits
    assert config.chunks(0, [100, 8092, 5]) == [100, 8092]  # exactly what is left: joins
    assert config.chunks(0, [100, 8093, 5]) == [100]  # FCFS: the 5 behind waits too
    assert config.chunks(92, [8100]) == [8100]
    assert config.chunks(93, [8100]) == []


def test_sglang_runs_a_longer_prompt_alone_and_later_ones_only_while_shorter() -> None:
    config = _server("sglang", chunked=False)
    assert config.chunks(0, [20000, 10]) == [20000]  # first of its batch, whatever its length
    assert config.chunks(0, [100, 8092]) == [100]  # a later one must be shorter than what is left
    assert config.chunks(0, [100, 8091]) == [100, 8091]
    check_budget([RequestShape(20000, 1000)], config)  # never refused
    assert starvation_warning(config, 8192, 64) is None  # prompts run in steps of their own
    # Without chunking its cap is max_prefill_tokens (16384), not chunked_prefill_size.
    _, unchunked = engine_server("sglang", DEPLOYMENT, settings={"chunked_prefill": False})
    assert unchunked.token_budget == 16384


def test_tensorrt_llm_refuses_a_prompt_longer_than_its_budget_in_one_line() -> None:
    config = _server("tensorrt-llm", chunked=False)
    check_budget([RequestShape(8192, 4000)], config)  # prompt = budget: served
    with pytest.raises(InputError) as refused:
        check_budget([RequestShape(100, 10), RequestShape(8193, 10)], config)
    message = str(refused.value)
    assert "\n" not in message and "8193" in message
    assert "--token-budget (max_num_tokens)" in message


def test_vllm_without_chunking_refuses_a_sequence_longer_than_its_budget() -> None:
    config = _server("vllm", chunked=False)
    check_budget([RequestShape(8000, 192)], config)  # prompt + output = budget
    with pytest.raises(InputError, match=r"prompt \+ output of 8193 tokens.*max_num_batched"):
        check_budget([RequestShape(8000, 193)], config)


def test_refusal_is_one_rule_for_simulate_and_estimate() -> None:
    assert budget_refusal("prompt", True, 10, 50, 0, "-b") is None  # chunked: never
    assert budget_refusal("none", False, 10, 50, 0, "-b") is None
    assert budget_refusal("prompt", False, 50, 50, 99, "-b") is None
    assert "raise -b to >= 51" in str(budget_refusal("prompt", False, 50, 51, 0, "-b"))
    assert "raise -b to >= 149" in str(budget_refusal("sequence", False, 50, 50, 99, "-b"))


def test_starvation_warning_names_the_setting_to_raise() -> None:
    config = _server("tensorrt-llm", chunked=False)
    assert starvation_warning(config, 8192, running=1) is None  # alone: fits
    warning = starvation_warning(config, 8192, running=32)
    assert warning is not None and "\n" not in warning
    assert "beside at most 0 of the 31 other running" in warning
    assert "raise --token-budget (max_num_tokens) to >= 8223" in warning
    assert starvation_warning(config, 8000, running=32) is None  # 192 tokens of room: fits
    chunked = ServerConfig(max_batch=10000, token_budget=8192)  # decode first, chunked
    assert starvation_warning(chunked, 8192, running=64) is None
    assert "prompt chunks" in str(starvation_warning(chunked, 10, running=9000))


def test_tensorrt_llm_budget_is_sized_as_deployments_size_it() -> None:
    # InferenceX's TensorRT-LLM scripts: max_num_tokens = ceil64(clients + prompt + 64) >= 8192.
    assert sized_token_budget(8192, 8192, 32) == 8320
    assert sized_token_budget(8192, 1024, 64) == 8192
    _, sized = engine_server(
        "tensorrt-llm", DEPLOYMENT, max_batch=32, longest_prompt=8192, running=32
    )
    assert sized.token_budget == 8320 and starvation_warning(sized, 8192, 32) is None
    _, given = engine_server(
        "tensorrt-llm", DEPLOYMENT, max_batch=32, token_budget=8192, longest_prompt=8192
    )
    assert given.token_budget == 8192  # a budget given is the engine's flag: kept
    _, setting = engine_server(
        "tensorrt-llm", DEPLOYMENT, settings={"token_budget": 9000}, longest_prompt=8192
    )
    assert setting.token_budget == 9000  # so is one given as an engine setting
    _, vllm = engine_server("vllm", DEPLOYMENT, longest_prompt=20000, running=32)
    assert vllm.token_budget == 8192  # vLLM chunks: its default


# --- the case, on the engine's kernels -----------------------------------------------


def test_prompts_as_long_as_the_budget_starve_and_the_sized_budget_serves_them() -> None:
    shapes = [RequestShape(8192, 128) for _ in range(24)]
    results = {}
    for budget in (8192, None):
        step_time, config = engine_server(
            "tensorrt-llm", DEPLOYMENT, max_batch=8, token_budget=budget,
            longest_prompt=8192, running=8,
        )  # fmt: skip
        rows = simulate(shapes, step_time, config, concurrency=8)
        assert all(r["ok"] and r["num_output_tokens"] == 128 for r in rows)
        results[budget] = (
            float(np.median([r["ttft_s"] for r in rows])),
            starvation_warning(config, 8192, 8),
        )
    (starved, warning), (served, none) = results[8192], results[None]
    assert warning is not None and none is None
    assert starved > 3 * served  # one request at a time: each waits for the others to end


def test_an_over_budget_prompt_is_refused_before_anything_is_simulated() -> None:
    step_time, config = engine_server("tensorrt-llm", DEPLOYMENT, token_budget=4096)
    with pytest.raises(InputError, match="raise --token-budget"):
        simulate([RequestShape(5000, 8)], step_time, config, concurrency=1)


def test_estimate_refuses_in_one_line_and_sizes_otherwise() -> None:
    estimate, _ = hardware_model_estimate(
        LLAMA_70B, H200, 9000, 16, tp=8, precision=FP8, engine="tensorrt-llm"
    )
    assert estimate.alpha_s > 0
    with pytest.raises(InputError, match=r"^a prompt of 9000 tokens exceeds the 8192"):
        hardware_model_estimate(
            LLAMA_70B, H200, 9000, 16, tp=8, precision=FP8, engine="tensorrt-llm",
            token_budget=8192,
        )  # fmt: skip


# --- the plan's budget knob -------------------------------------------------------------------


def _plan_request(**options: object) -> PlanRequest:
    settings = {
        "architecture": LLAMA_70B, "hardware": [H200], "stacks": ["tensorrt-llm"],
        "weights": ["fp8"], "modes": ["aggregated"], "max_gpus": 8, "verify": False,
        "concurrency": [1, 4, 32, 128],
        "workload": PlanWorkload(prompt_tokens=8192, output_tokens=1024),
    }  # fmt: skip
    return PlanRequest(**{**settings, **options})  # type: ignore[arg-type]


def test_plan_budgets_are_pruned_as_the_engines_would_refuse_or_starve() -> None:
    request = _plan_request()
    trt = token_budgets(request, "tensorrt-llm", Layout(8))
    assert trt.budgets == [8192, 16384]  # the smallest accepted, the smallest that never starves
    assert len(trt.refused) == 1 and "max_num_tokens 4096: refuses" in trt.refused[0]
    assert token_budgets(request, "vllm", Layout(8)).budgets == [4096, 8192, 16384]
    short = _plan_request(workload=PlanWorkload(prompt_tokens=100, output_tokens=10),
                          concurrency=[1, 8])  # fmt: skip
    # 8 clients' prompts and decode tokens fit 4096 in one step: larger budgets are the same.
    assert token_budgets(short, "vllm", Layout(8)).budgets == [4096]
    assert token_budgets(short, "tensorrt-llm", Layout(8)).budgets == [4096]


def test_plan_picks_the_larger_budget_where_the_engine_default_starves() -> None:
    result = plan(_plan_request())
    assert result.best is not None and result.best.token_budget == 16384
    starved = [p for p in result.frontiers[0].points if p.token_budget == 8192]
    assert all(p.concurrency == 1 for p in starved)  # 8192 serves one client only
    reasons = " ".join(r.reason for r in result.refused)
    assert "max_num_tokens 8192: prompts of 8192 tokens wait for running decodes" in reasons
    at_8192 = plan(_plan_request(token_budgets=[8192]))
    assert at_8192.best is not None and at_8192.best.concurrency == 1
    assert result.best.output_tokens_per_s_per_gpu > 5 * at_8192.best.output_tokens_per_s_per_gpu


def test_plan_refuses_in_one_line_when_every_budget_is_refused() -> None:
    with pytest.raises(InputError, match=r"max_num_tokens 4096: refuses requests of 8192"):
        plan(_plan_request(token_budgets=[4096]))
    result = run_cli(
        "plan", "--arch", "llama-3.1-70b", "--hardware", "h200", "--stack", "tensorrt-llm",
        "--weights", "fp8", "--prompt-tokens", "8192", "--output-tokens", "64", "--mode",
        "aggregated", "--max-gpus", "8", "--no-verify", "--token-budget", "2048,4096",
    )  # fmt: skip
    assert_refused_in_one_line(result, "refuses requests of 8192 tokens")


@settings(max_examples=6, deadline=None)
@given(prompt=st.integers(512, 20000), top=st.sampled_from([8, 64, 512, 2048]))
def test_plan_never_picks_a_point_whose_prompts_would_starve(prompt: int, top: int) -> None:
    request = _plan_request(
        workload=PlanWorkload(prompt_tokens=prompt, output_tokens=64), concurrency=[1, top],
        max_gpus=4,
    )  # fmt: skip
    result = plan(request)
    for point in (p for frontier in result.frontiers for p in frontier.points):
        assert point.token_budget is not None and point.token_budget >= prompt  # never refused
        _, server, _ = point_servers(request, point)
        # The sequences that run at once: the clients, as many as the batch and the KV hold.
        (running,) = running_requests(server, mean_request(request), [point.concurrency])
        assert starvation_warning(server.config, prompt, int(running)) is None


# --- invariants -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    clients=st.integers(1, 10),
    prompts=st.lists(st.integers(1, 400), min_size=1, max_size=12),
    output=st.integers(1, 12),
    budget=st.integers(16, 300),
    engine=st.sampled_from(["vllm", "sglang", "tensorrt-llm"]),
    chunked=st.booleans(),
)
def test_every_prompt_is_served_whole_within_the_budget_or_refused(
    clients: int, prompts: list[int], output: int, budget: int, engine: str, chunked: bool
) -> None:
    scheduler = get_engine(engine).scheduler
    config = ServerConfig(
        max_batch=6, token_budget=budget, chunked_prefill=chunked,
        prefill_first=scheduler.prefill_first, unchunked_limit=scheduler.unchunked_limit,
    )  # fmt: skip
    shapes = [RequestShape(p, output) for p in prompts]
    refused = budget_refusal(
        config.unchunked_limit, chunked, budget, max(prompts), output, config.budget_flag
    )
    if config.unchunked_limit == "sequence" and not chunked:
        refused = refused or budget_refusal(
            "sequence", False, budget, max(p for p in prompts), output, config.budget_flag
        )
    recorder = StepRecorder()
    try:
        rows = simulate(shapes, recorder, config, concurrency=clients)
    except InputError as error:
        assert refused is not None and str(error) == refused
        return
    assert refused is None
    # Every request served whole: its prompt read once, all its output tokens.
    assert len(rows) == len(shapes) and all(r["ok"] for r in rows)
    assert all(r["num_output_tokens"] == output for r in rows)
    read = sum(float(w.split()[2][0]) for w in recorder.steps)
    assert read == sum(prompts)
    for work in recorder.steps:
        decode, _, _, _, chunks = work.split()
        if engine == "sglang" and not chunked and chunks[0] == 1 and decode[0] == 0:
            continue  # SGLang runs a longer prompt alone
        assert work.tokens[0] <= budget  # never more tokens than the budget in a step


# --- CLI ---------------------------------------------------------------------------------------

SIMULATE = (
    "simulate", "--stack", "tensorrt-llm", "--arch", "llama-3.1-70b", "--hardware", "h200",
    "--tp", "8", "--weights", "fp8", "--concurrency", "4", "--max-batch", "4",
    "--prompt-tokens", "8192", "--output-tokens", "16", "--requests", "8",
)  # fmt: skip


def test_simulate_refuses_in_one_line_and_writes_nothing(tmp_path) -> None:
    out = tmp_path / "rows.jsonl"
    result = run_cli(*SIMULATE, "--token-budget", "8000", "-o", str(out))
    assert_refused_in_one_line(result, "raise --token-budget (max_num_tokens) to >= 8192")
    assert result.stdout == "" and not out.exists()


def test_simulate_warns_of_starvation_in_text_and_json(tmp_path) -> None:
    out = tmp_path / "rows.jsonl"
    text = run_cli(*SIMULATE, "--token-budget", "8192", "-o", str(out))
    assert text.returncode == 0, text.stderr
    warning = "warning (concurrency=4): prompts of 8192 tokens fit the 8192-token step budget"
    assert warning in text.stdout and "to >= 8195" in text.stdout
    printed = json.loads(
        run_cli(*SIMULATE, "--token-budget", "8192", "--json", "-o", str(out)).stdout
    )
    assert "raise --token-budget (max_num_tokens)" in printed[0]["warning"]
    sized = json.loads(run_cli(*SIMULATE, "--json", "-o", str(out)).stdout)
    assert "warning" not in sized[0]  # the default budget is sized for the prompts


def test_estimate_refuses_an_over_budget_prompt_in_one_line() -> None:
    result = run_cli(
        "estimate", "--arch", "llama-3.1-70b", "--hardware", "h200", "--tp", "8", "--weights",
        "fp8", "--stack", "tensorrt-llm", "-p", "9000", "-o", "10", "--token-budget", "8192",
    )  # fmt: skip
    assert_refused_in_one_line(result, "a prompt of 9000 tokens exceeds the 8192-token")
    assert result.stdout == ""
    result = run_cli("estimate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "-p", "9",
                     "-o", "9", "--token-budget", "64")  # fmt: skip
    assert_refused_in_one_line(result, "--token-budget applies to an engine stack")


def test_stacks_lists_the_engine_stacks_too() -> None:
    text = run_cli("stacks")
    assert text.returncode == 0, text.stderr
    assert "engine stack" in text.stdout
    for name in ("vllm", "sglang", "tensorrt-llm"):
        assert f"\n{name} " in text.stdout
    assert "8192 (max_num_tokens), sized for the prompts" in text.stdout
    listed = json.loads(run_cli("stacks", "--json").stdout)
    engines = {s["name"]: s for s in listed if s["kind"] == "engine"}
    assert set(engines) == {"vllm", "sglang", "tensorrt-llm"}
    assert engines["vllm"]["scheduler"]["budget_setting"] == "max_num_batched_tokens"
    assert "h200" in engines["sglang"]["hardware"] and engines["sglang"]["kernels"]["h200"]
    assert any(s["kind"] == "reference" and s["default"] for s in listed)
