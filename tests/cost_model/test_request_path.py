"""The request path outside the forward passes (``RequestPath``): the front end and tokenization
before the scheduler, the wait for a step boundary (one step more for an engine that schedules
a step ahead), each token's delivery; in ``simulate``, the steady state and the batch-1 TTFT."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.hardware.engines.catalog import EngineStack, get_engine
from idealized_runtime.cost_model.hardware.engines.request import request_times
from idealized_runtime.cost_model.hardware.engines.request_path import (
    RequestPath,
    held_out_median,
)
from idealized_runtime.cost_model.serving.disaggregated import Server
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.steady_state import (
    MeanRequest,
    aggregated_steady_state,
)
from idealized_runtime.cost_model.serving.step_time import FittedStepTime
from idealized_runtime.cost_model.serving.workload import RequestShape
from tests.deployments import deploy

ONE_SECOND_STEPS = FittedStepTime("m", intercept_s=1.0, per_token_s=0.0, per_attended_s=0.0)


def _config(**path: float) -> ServerConfig:
    return ServerConfig(max_batch=4, token_budget=4096, request_path=RequestPath(**path))


def test_a_request_arriving_mid_step_waits_for_the_step_boundary() -> None:
    # Request 0 decodes in 1 s steps from t = 1; request 1 arrives at 1.5, mid-step: the
    # scheduler takes it in at 2.0, its prompt step ends at 3.0 (TTFT 1.5 s).
    shapes = [RequestShape(1, 10, 0.0), RequestShape(1, 2, 1.5)]
    _, late = simulate(shapes, ONE_SECOND_STEPS, _config())
    assert late["ttft_s"] == pytest.approx(1.5)
    # A scheduler a step ahead planned the step from 2.0 while step 1-2 ran: the request runs
    # its prompt in the step after, 3.0-4.0 (TTFT 2.5 s).
    _, ahead = simulate(shapes, ONE_SECOND_STEPS, _config(schedule_ahead_steps=1))
    assert ahead["ttft_s"] == pytest.approx(2.5)
    assert ahead["inter_token_latencies_s"] == late["inter_token_latencies_s"] == [1.0]


def test_an_idle_engine_takes_a_request_in_as_it_arrives() -> None:
    for ahead in (0, 1):
        (row,) = simulate(
            [RequestShape(5, 3, 0.5)], ONE_SECOND_STEPS, _config(schedule_ahead_steps=ahead)
        )
        assert row["ttft_s"] == pytest.approx(1.0) and row["runtime_s"] == pytest.approx(3.0)


@settings(max_examples=25, deadline=None)
@given(prompt=st.integers(1, 4000), per_token=st.floats(0.0, 1e-3))
def test_tokenization_time_scales_with_the_prompt_tokens(prompt: int, per_token: float) -> None:
    path = RequestPath(http_s=0.002, tokenize_s_per_token=per_token)
    assert float(path.to_scheduler_s(prompt)) == pytest.approx(0.002 + per_token * prompt)
    # One request on an idle engine: TTFT = front end + tokenization + its prompt step.
    (row,) = simulate(
        [RequestShape(prompt, 2, 0.0)],
        ONE_SECOND_STEPS,
        _config(http_s=0.002, tokenize_s_per_token=per_token),
    )
    assert row["ttft_s"] == pytest.approx(0.002 + per_token * prompt + 1.0)


def test_each_token_reaches_the_client_after_its_delivery_and_the_client_resends_then() -> None:
    shapes = [RequestShape(1, 3)] * 2
    bare = simulate(shapes, ONE_SECOND_STEPS, _config(), concurrency=1)
    streamed = simulate(
        shapes, ONE_SECOND_STEPS, _config(detokenize_s_per_token=0.05, stream_s=0.2),
        concurrency=1,
    )  # fmt: skip
    for before, after in zip(bare, streamed, strict=True):
        assert after["ttft_s"] == pytest.approx(before["ttft_s"] + 0.25)
        assert after["runtime_s"] == pytest.approx(before["runtime_s"] + 0.25)
        assert after["inter_token_latencies_s"] == pytest.approx(before["inter_token_latencies_s"])
    # The client sends its next request when it has read the last token.
    assert streamed[1]["started_at_s"] == pytest.approx(streamed[0]["finished_at_s"])
    assert streamed[1]["started_at_s"] == pytest.approx(bare[1]["started_at_s"] + 0.25)


def test_a_zero_path_is_the_ideal_server() -> None:
    shapes = [RequestShape(7, 5)] * 6
    assert simulate(shapes, ONE_SECOND_STEPS, ServerConfig(), concurrency=3) == simulate(
        shapes, ONE_SECOND_STEPS, ServerConfig(request_path=RequestPath()), concurrency=3
    )


def test_rows_without_latencies_keep_every_other_figure() -> None:
    shapes = [RequestShape(3, 6)] * 5
    full = simulate(shapes, ONE_SECOND_STEPS, _config(stream_s=0.1), concurrency=2)
    light = simulate(
        shapes, ONE_SECOND_STEPS, _config(stream_s=0.1), concurrency=2, latencies=False
    )
    for a, b in zip(full, light, strict=True):
        assert b["inter_token_latencies_s"] == []
        assert {**a, "inter_token_latencies_s": []} == b


def test_the_steady_state_counts_the_path_and_the_busy_engines_wait() -> None:
    request = MeanRequest(100.0, 20.0)
    bare = Server(ONE_SECOND_STEPS, _config())
    path = RequestPath(http_s=0.3, tokenize_s_per_token=1e-3, stream_s=0.1,
                       schedule_ahead_steps=1)  # fmt: skip
    served = Server(ONE_SECOND_STEPS, replace(bare.config, request_path=path))
    alone = (
        aggregated_steady_state(served, request, [1]).ttft_s
        - aggregated_steady_state(bare, request, [1]).ttft_s
    )
    # One client: the engine is idle when its request comes; front end, tokenization, delivery.
    assert float(alone[0]) == pytest.approx(0.3 + 0.1 + 0.1, rel=1e-3)
    # Several: the others keep the engine busy, so the request also waits for the scheduler
    # (half a step to the boundary, one step more ahead): up to 1.5 steps of 1 s.
    busy = (
        aggregated_steady_state(served, request, [3]).ttft_s
        - aggregated_steady_state(bare, request, [3]).ttft_s
    )
    assert 0.5 + 0.5 < float(busy[0]) <= 0.5 + 1.5 + 1e-6


def test_the_batch_one_ttft_adds_the_engines_request_path() -> None:
    stack = get_engine("vllm")
    model = stack.step_model(deploy(get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")))
    silent = dict(request_http_s=0.0, tokenize_s_per_token=0.0, detokenize_s_per_token=0.0,
                  stream_s=0.0)  # fmt: skip
    bare = replace(model, scheduler=replace(model.scheduler, **silent))
    path = model.scheduler.request_path
    first, last = request_times(model, 2048, 64)
    first0, last0 = request_times(bare, 2048, 64)
    extra = float(path.to_scheduler_s(2048)) + path.delivery_s
    assert first - first0 == pytest.approx(extra) and last - last0 == pytest.approx(extra)


def test_bad_request_paths_are_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="finite and >= 0"):
        RequestPath(http_s=-1.0)
    with pytest.raises(InputError, match="0 or 1 steps ahead"):
        RequestPath(schedule_ahead_steps=2)
    scheduler = get_engine("sglang").scheduler
    with pytest.raises(InputError, match="finite and >= 0"):
        replace(scheduler, tokenize_s_per_token=float("nan"))


def test_the_shipped_engines_schedule_ahead_as_their_overlap_schedulers_do() -> None:
    ahead = {name: get_engine(name).scheduler.schedule_ahead_steps for name in
             ("vllm", "sglang", "tensorrt-llm")}  # fmt: skip
    assert ahead == {"vllm": 1, "sglang": 1, "tensorrt-llm": 1}  # vLLM: async scheduling
    for name in ("vllm", "sglang", "tensorrt-llm"):
        assert get_engine(name).scheduler.request_overhead_s == 0.0  # fitted across models only
    # Per layer where two models have figures at load (SGLang), none where one has.
    per_layer = {name: get_engine(name).scheduler.request_overhead_s_per_layer
                 for name in ("vllm", "sglang", "tensorrt-llm")}  # fmt: skip
    assert per_layer["vllm"] == per_layer["tensorrt-llm"] == 0.0
    assert 0.5e-3 < per_layer["sglang"] < 1.0e-3


@settings(max_examples=40, deadline=None)
@given(
    own=st.floats(-10, 10, allow_nan=False),
    others=st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=6),
)
def test_a_held_out_median_never_sees_the_held_out_models_own_residual(
    own: float, others: list[float]
) -> None:
    residuals = [("held", "s0", own), ("held", "s1", own * 2)]
    residuals += [(f"m{i}", f"t{i}", value) for i, value in enumerate(others)]
    assert held_out_median(residuals, "held", "s9") == pytest.approx(float(np.median(others)))
    # Nor another model's figures from the point's own source.
    residuals.append(("other", "s0", 1e6))
    assert held_out_median(residuals, "held", "s0") == pytest.approx(float(np.median(others)))
    # One model only: nothing to fit on.
    assert held_out_median(residuals[:2], "held", "s9") is None


def test_an_engine_file_of_the_previous_release_still_loads_without_a_request_path() -> None:
    shipped = get_engine("vllm").to_json()
    old = {k: v for k, v in shipped["scheduler"].items() if k in OLD_SCHEDULER_FIELDS}
    stack = EngineStack.from_json({**shipped, "scheduler": old})
    assert stack.scheduler.request_path == RequestPath()  # the ideal server's path


OLD_SCHEDULER_FIELDS = (
    "token_budget", "max_running", "chunked_prefill", "prefill_first", "memory_fraction",
    "of_free", "cuda_graph_max_batch", "cuda_graph_step", "decode_overhead_s",
    "step_overhead_s", "admission", "recv_interval", "balance_timeout_steps",
    "limits_per_rank", "request_overhead_s", "fuse_shared_experts",
)  # fmt: skip
