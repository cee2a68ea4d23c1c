"""The serving simulator: hand-computed schedules, memory limits, closed loops, and properties
(latency non-decreasing in load, throughput capped by the hardware model, every request once,
deterministic for a seed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.hardware.estimate import decode_throughput
from idealized_runtime.cost_model.serving.simulator import (
    ServerConfig,
    kv_capacity_tokens,
    simulate,
)
from idealized_runtime.cost_model.serving.step_time import (
    FittedStepTime,
    HardwareStepTime,
    StepWork,
    fit_step_time,
    fit_step_timings,
    read_step_fit,
)
from idealized_runtime.cost_model.serving.workload import (
    RequestShape,
    poisson_arrivals,
    read_workload,
)
from tests.deployments import deploy

ONE_SECOND_STEPS = FittedStepTime("m", intercept_s=1.0, per_token_s=0.0, per_attended_s=0.0)
ARCH, HARDWARE = get_architecture("llama-3.1-8b"), get_hardware("a100-80gb")
ROOFLINE = HardwareStepTime(deploy(ARCH, HARDWARE))


def test_chunked_prefill_then_one_token_per_step_by_hand() -> None:
    # Budget 2: the 3-token prompt takes two steps (2 + 1 tokens), the second yields the first
    # token, then one token per step.
    rows = simulate([RequestShape(3, 4, 0.0)], ONE_SECOND_STEPS, ServerConfig(token_budget=2))
    (row,) = rows
    assert row["ok"] and row["ttft_s"] == 2.0 and row["runtime_s"] == 5.0
    assert row["inter_token_latencies_s"] == [1.0, 1.0, 1.0]
    assert row["num_output_tokens"] == 4 and row["started_at_s"] == 0.0


def test_decode_tokens_share_a_step_with_a_prompt_chunk() -> None:
    # The second request arrives at 1.5 s and joins at the step starting at 2 s: with a budget
    # of 2, each step holds the first request's decode token and one token of the second's
    # prompt, so its first token comes at 4 s and its second at 5 s.
    shapes = [RequestShape(1, 5, 0.0), RequestShape(2, 2, 1.5)]
    first, second = simulate(shapes, ONE_SECOND_STEPS, ServerConfig(max_batch=2, token_budget=2))
    assert first["runtime_s"] == 5.0
    assert second["ttft_s"] == 4.0 - 1.5 and second["runtime_s"] == 5.0 - 1.5


def test_max_batch_one_queues_fcfs() -> None:
    rows = simulate([RequestShape(1, 2, 0.0)] * 2, ONE_SECOND_STEPS, ServerConfig(max_batch=1))
    assert [r["runtime_s"] for r in rows] == [2.0, 4.0]
    assert [r["ttft_s"] for r in rows] == [1.0, 3.0]


def test_kv_capacity_limits_admission_and_rejects_what_never_fits() -> None:
    config = ServerConfig(max_batch=8, kv_capacity_tokens=10)
    shapes = [RequestShape(3, 3, 0.0), RequestShape(3, 3, 0.0), RequestShape(20, 1, 0.0)]
    first, second, too_big = simulate(shapes, ONE_SECOND_STEPS, config)
    assert second["ttft_s"] > first["runtime_s"]  # 6 + 6 > 10: it waits for the first
    assert not too_big["ok"] and "KV cache" in too_big["error"]


def test_closed_loop_sends_the_next_request_when_one_ends() -> None:
    rows = simulate([RequestShape(1, 2)] * 4, ONE_SECOND_STEPS, concurrency=2)
    assert [r["started_at_s"] for r in rows] == [0.0, 0.0, 2.0, 2.0]
    assert all(r["runtime_s"] == 2.0 for r in rows)


def test_kv_capacity_from_the_memory_planner() -> None:
    capacity = kv_capacity_tokens(deploy(ARCH, HARDWARE))
    # 8B in bf16 is 16 GB of weights; a token of KV is 2 * 32 layers * 8 heads * 128 * 2 B.
    assert capacity == pytest.approx((80e9 * 0.9 - 16.06e9) / 131072, rel=0.01)
    with pytest.raises(InputError, match="weights"):
        kv_capacity_tokens(deploy(get_architecture("llama-3.1-405b"), HARDWARE))


def test_roofline_step_of_decodes_equals_the_decode_step_time() -> None:
    table = decode_throughput(
        deploy(ARCH, HARDWARE, tp=1),
        context_tokens=300,
        batch_sizes=[1, 16],
    )
    for point in table:
        work = StepWork.of([300] * point.batch_size, [])
        assert ROOFLINE.seconds(work)[0] == pytest.approx(point.step_s, rel=1e-9)


def _sweep(rate: float, shapes: list[tuple[int, int]], seed: int) -> list[dict]:
    arrivals = poisson_arrivals(rate, len(shapes), seed)
    requests = [RequestShape(p, o, a) for (p, o), a in zip(shapes, arrivals, strict=True)]
    return simulate(requests, ROOFLINE, ServerConfig(max_batch=8, token_budget=128))


def _assert_mean_latency_not_lower(heavier: list[dict], lighter: list[dict]) -> None:
    """Mean runtime and TTFT under the heavier load are at least those under the lighter one.
    Steps are discrete: a request arriving during a step waits for its end, so one sample path
    under more load can align better with the steps (e.g. 5 one-token requests at 42 vs 66
    req/s, seed 1). The mean cannot fall by more than the longest possible step."""
    longest_step = ROOFLINE.seconds(StepWork.of([640] * 8, [(128, 640)]))[0]
    for key in ("runtime_s", "ttft_s"):
        heavy_mean, light_mean = (np.mean([r[key] for r in rows]) for rows in (heavier, lighter))
        assert heavy_mean >= light_mean - longest_step


request_shapes = st.tuples(st.integers(1, 600), st.integers(1, 40))  # (prompt, output) tokens
shape_lists = st.lists(request_shapes, min_size=1, max_size=24)


@settings(max_examples=25, deadline=None)
@given(
    shape=request_shapes,
    count=st.integers(1, 24),
    seed=st.integers(0, 1000),
    rates=st.lists(st.floats(0.5, 2000), min_size=2, max_size=2),
)
def test_latency_non_decreasing_in_rate(
    shape: tuple[int, int], count: int, seed: int, rates: list[float]
) -> None:
    low, high = sorted(rates)
    slow, fast = _sweep(low, [shape] * count, seed), _sweep(high, [shape] * count, seed)
    _assert_mean_latency_not_lower(fast, slow)


@settings(max_examples=25, deadline=None)
@given(shapes=shape_lists, seed=st.integers(0, 1000), rate=st.floats(0.5, 5000))
def test_every_request_once_and_throughput_capped(
    shapes: list[tuple[int, int]], seed: int, rate: float
) -> None:
    rows = _sweep(rate, shapes, seed)
    assert sorted(r["request_index"] for r in rows) == list(range(len(shapes)))
    for row, (p, o) in zip(rows, shapes, strict=True):
        assert row["ok"] and row["num_prompt_tokens"] == p and row["num_output_tokens"] == o
        assert len(row["inter_token_latencies_s"]) == o - 1
        assert 0 < row["ttft_s"] <= row["runtime_s"]
    span = max(r["finished_at_s"] for r in rows) - min(r["started_at_s"] for r in rows)
    tokens_per_s = sum(o for _, o in shapes) / span
    cap = decode_throughput(
        deploy(ARCH, HARDWARE, tp=1),
        context_tokens=min(p for p, _ in shapes),
        batch_sizes=[8],
    )[0].tokens_per_s
    assert tokens_per_s <= cap * (1 + 1e-9)


@settings(max_examples=10, deadline=None)
@given(shapes=shape_lists, seed=st.integers(0, 1000), rate=st.floats(0.5, 500))
def test_deterministic_for_a_seed(shapes: list[tuple[int, int]], seed: int, rate: float) -> None:
    assert _sweep(rate, shapes, seed) == _sweep(rate, shapes, seed)


def test_closed_loop_think_time_by_hand() -> None:
    # Two clients, one-second steps, each request 1 prompt + 2 output tokens. The first two
    # end at 2 s; their clients think 0.5 s and 1.0 s (the measured gaps, in order): the third
    # request comes at 2.5 s and is prefilled at once (2.5 -> 3.5 s), the fourth comes at 3 s,
    # during that step, and waits for its end: first token at 4.5 s, second at 5.5 s. The
    # gaps cycle: the fifth request comes 0.5 s after the third's end (4.5 s), during the
    # fourth's last step, so it too waits half a step; the sixth comes 1.0 s after the
    # fourth's end (5.5 s), at 6.5 s, as a step begins, and joins it.
    rows = simulate(
        [RequestShape(1, 2)] * 6, ONE_SECOND_STEPS, concurrency=2, think_time_s=[0.5, 1.0]
    )
    assert [r["started_at_s"] for r in rows] == [0.0, 0.0, 2.5, 3.0, 5.0, 6.5]
    assert [r["ttft_s"] for r in rows] == [1.0, 1.0, 1.0, 1.5, 1.5, 1.0]
    assert [r["runtime_s"] for r in rows] == [2.0, 2.0, 2.0, 2.5, 2.5, 2.0]
    # One value: every client waits that long; 0 is the client that sends at once.
    same = simulate([RequestShape(1, 2)] * 4, ONE_SECOND_STEPS, concurrency=2, think_time_s=0.5)
    assert [r["started_at_s"] for r in same] == [0.0, 0.0, 2.5, 2.5]
    assert simulate([RequestShape(1, 2)] * 4, ONE_SECOND_STEPS, concurrency=2) == simulate(
        [RequestShape(1, 2)] * 4, ONE_SECOND_STEPS, concurrency=2, think_time_s=0.0
    )


def test_think_time_comes_before_the_request_overhead() -> None:
    config = ServerConfig(request_overhead_s=0.25)
    (first, second) = simulate(
        [RequestShape(1, 2)] * 2, ONE_SECOND_STEPS, config, concurrency=1, think_time_s=0.5
    )
    # The client sends at the end + 0.5 s; the server sees it 0.25 s later: TTFT 1.25 s.
    assert second["started_at_s"] == first["finished_at_s"] + 0.5
    assert second["ttft_s"] == first["ttft_s"] == 1.25


@pytest.mark.parametrize(
    ("think", "message"),
    [
        (-0.1, "--think-time must be >= 0 seconds, got -0.1"),
        (float("nan"), "--think-time must be >= 0 seconds"),
        (float("inf"), "--think-time must be >= 0 seconds"),
        ([0.1, -1.0], "got -1.0"),
        ([], "at least one value"),
    ],
)
def test_bad_think_time_is_an_input_error(think: float | list[float], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        simulate([RequestShape(1, 2)] * 2, ONE_SECOND_STEPS, concurrency=1, think_time_s=think)


def test_think_time_is_for_closed_loops_only() -> None:
    with pytest.raises(InputError, match="closed-loop"):
        simulate([RequestShape(1, 2, 0.0)], ONE_SECOND_STEPS, think_time_s=1.0)


@settings(max_examples=25, deadline=None)
@given(
    shapes=shape_lists,
    concurrency=st.integers(1, 6),
    thinks=st.lists(st.floats(0, 2), min_size=1, max_size=5),
)
def test_closed_loop_with_think_time_properties(
    shapes: list[tuple[int, int]], concurrency: int, thinks: list[float]
) -> None:
    requests = [RequestShape(p, o) for p, o in shapes]
    config = ServerConfig(max_batch=8, token_budget=128)
    rows = simulate(requests, ROOFLINE, config, concurrency=concurrency, think_time_s=thinks)
    # Every request once, with its exact tokens.
    assert sorted(r["request_index"] for r in rows) == list(range(len(shapes)))
    for row, (p, o) in zip(rows, shapes, strict=True):
        assert row["ok"] and row["num_prompt_tokens"] == p and row["num_output_tokens"] == o
        assert 0 < row["ttft_s"] <= row["runtime_s"]
    # The k-th request sent after an end leaves the k-th think time after the k-th end.
    ends = sorted(r["finished_at_s"] for r in rows)
    for k, row in enumerate(rows[concurrency:]):
        assert row["started_at_s"] == pytest.approx(ends[k] + thinks[k % len(thinks)])
    # Throughput stays capped by the hardware model's batch throughput.
    span = max(r["finished_at_s"] for r in rows) - min(r["started_at_s"] for r in rows)
    cap = decode_throughput(
        deploy(ARCH, HARDWARE, tp=1),
        context_tokens=min(p for p, _ in shapes),
        batch_sizes=[8],
    )[0].tokens_per_s
    assert sum(o for _, o in shapes) / span <= cap * (1 + 1e-9)
    # One client: the server idles while it thinks, so each request's latency is the one it
    # has without think time, and the run is longer by exactly the think times.
    if concurrency == 1:
        alone = simulate(requests, ROOFLINE, config, concurrency=1)
        for row, base in zip(rows, alone, strict=True):
            assert row["runtime_s"] == pytest.approx(base["runtime_s"])
            assert row["ttft_s"] == pytest.approx(base["ttft_s"])
        waited = sum(thinks[k % len(thinks)] for k in range(len(shapes) - 1))
        assert rows[-1]["finished_at_s"] == pytest.approx(alone[-1]["finished_at_s"] + waited)


@settings(max_examples=20, deadline=None)
@given(
    shape=request_shapes,
    count=st.integers(2, 16),
    think=st.floats(0, 1),
    clients=st.lists(st.integers(1, 8), min_size=2, max_size=2),
)
def test_latency_non_decreasing_in_concurrency_with_think_time(
    shape: tuple[int, int], count: int, think: float, clients: list[int]
) -> None:
    few, many = sorted(clients)
    requests = [RequestShape(*shape)] * count
    config = ServerConfig(max_batch=8, token_budget=128)
    light, heavy = (
        simulate(requests, ROOFLINE, config, concurrency=c, think_time_s=think) for c in (few, many)
    )
    _assert_mean_latency_not_lower(heavy, light)


def test_fit_step_time_recovers_known_coefficients(tmp_path: Path) -> None:
    truth = FittedStepTime("m", 0.01, 2e-4, 1e-7, 5e-4)
    rows = []
    for batch in (1, 2, 4):
        for p in (8, 32, 128):
            o = 9
            ttft = float(truth.seconds(StepWork.of([], [(p, 0)] * batch))[0])
            step = float(truth.seconds(StepWork.of([p + 4] * batch, []))[0])
            rows.append({"model": "m", "batch_size": batch, "num_prompt_tokens": p,
                         "num_output_tokens": o, "ttft_s": ttft,
                         "runtime_s": ttft + 8 * step})  # fmt: skip
    fitted = fit_step_time(rows)
    for name in ("intercept_s", "per_token_s", "per_attended_s", "per_sequence_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6, abs=1e-12)
    assert fitted.max_batch == 4
    saved = tmp_path / "step_fit.json"
    saved.write_text(json.dumps(fitted.to_dict()))
    assert read_step_fit(saved) == fitted


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no requests"),
        ('{"arrival_s": 0, "num_prompt_tokens": 5}\n', "num_output_tokens"),
        ('{"arrival_s": "x", "num_prompt_tokens": 5, "num_output_tokens": 2}\n', "not a number"),
        ('{"num_prompt_tokens": 5, "num_output_tokens": 2}\n', "arrival_s"),
        ("[1, 2\n", "not JSON"),
    ],
)
def test_bad_workloads_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_workload(path)


def test_workload_csv_with_aliases_is_relative_and_sorted(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,input_length,output_length\n12.5,10,3\n10,4,2\n")
    shapes = read_workload(path)
    assert shapes == [RequestShape(4, 2, 0.0), RequestShape(10, 3, 2.5)]


def test_bad_rate_is_an_input_error() -> None:
    for rate in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="--rate"):
            poisson_arrivals(rate, 3, 0)


@settings(max_examples=40, deadline=None)
@given(
    coefficients=st.tuples(
        st.floats(1e-4, 1e-1), st.floats(0, 1e-3), st.floats(0, 1e-6), st.floats(0, 1e-3)
    )
)
def test_fit_step_timings_recovers_the_step_times_it_was_given(
    coefficients: tuple[float, float, float, float],
) -> None:
    truth = FittedStepTime("m", *coefficients)
    shapes = [
        ([], [(16, 0)]),
        ([], [(64, 0), (64, 0)]),
        ([20], []),
        ([80, 80, 80], []),
        ([40, 12], [(30, 0)]),
        ([], [(32, 32)]),
    ]
    timings = [
        {"decode_contexts": d, "chunks": c, "seconds": float(truth.seconds(StepWork.of(d, c))[0])}
        for d, c in shapes
    ]
    fit = fit_step_timings(timings, model="m")
    for decode, chunks in shapes:
        work = StepWork.of(decode, chunks)
        assert fit.seconds(work)[0] == pytest.approx(truth.seconds(work)[0], rel=1e-6)
    assert fit.max_batch == 3  # sequences in the largest step


def test_fit_step_timings_learns_the_small_decode_steps_a_linear_model_misses(
    tmp_path: Path,
) -> None:
    """On a CPU a decode step of 2 or 3 tokens can cost what 4 do (the matmul kernels leave
    their matrix-vector regime): a correction per small token count, timed often enough."""
    linear = FittedStepTime("m", 0.004, 6e-4, 1e-7, 2e-4)
    kernel_extra = {2: 0.003, 3: 0.005}  # seconds beyond the linear model
    shapes = [([], [(n, 0)] * b) for n in (16, 64) for b in (1, 2, 4)]
    shapes += [([], [(32, 32)]), ([70], [(64, 0)]), ([70, 70], [(16, 0)])]
    shapes += [([64 + i] * b, []) for b in (1, 2, 3, 4) for i in range(4)]

    def seconds(decode: list[int], chunks: list[tuple[int, int]]) -> float:
        extra = kernel_extra.get(len(decode), 0.0) if not chunks else 0.0
        return float(linear.seconds(StepWork.of(decode, chunks))[0]) + extra

    steps = [{"decode_contexts": d, "chunks": c, "seconds": seconds(d, c)} for d, c in shapes]
    fit = fit_step_timings(steps, model="m")
    assert sorted(fit.small_steps_s) == [1, 2, 3, 4]
    for decode, chunks in shapes:
        assert fit.seconds(StepWork.of(decode, chunks))[0] == pytest.approx(
            seconds(decode, chunks), rel=1e-6
        )
    for name in ("intercept_s", "per_token_s", "per_attended_s", "per_sequence_s"):
        assert getattr(fit, name) == pytest.approx(getattr(linear, name), rel=1e-6, abs=1e-12)
    saved = tmp_path / "step_fit.json"
    saved.write_text(json.dumps(fit.to_dict()))
    assert read_step_fit(saved) == fit
    # The plain linear fit (no correction) is off by the kernels' extra time.
    mid = StepWork.of([66] * 2, [])
    assert fit.seconds(mid)[0] - linear.seconds(mid)[0] == pytest.approx(0.003, rel=1e-6)


def test_small_step_corrections_interpolate_between_counts_and_stop_outside() -> None:
    fit = FittedStepTime("m", 0.01, 0.0, 0.0, small_steps_s={2: 0.002, 4: 0.006})
    tokens = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 64.0])
    work = StepWork(tokens, tokens, tokens, tokens)
    assert fit.seconds(work).tolist() == pytest.approx([0.01, 0.012, 0.014, 0.016, 0.01, 0.01])


@settings(max_examples=40, deadline=None)
@given(
    small=st.dictionaries(st.integers(1, 64), st.floats(-1.0, 1.0, allow_nan=False), max_size=6),
    coefficients=st.tuples(*(st.floats(0, 1.0, allow_nan=False) for _ in range(4))),
)
def test_step_fit_json_round_trip_is_exact(
    small: dict[int, float], coefficients: tuple[float, float, float, float]
) -> None:
    fit = FittedStepTime("m", *coefficients, max_batch=4, small_steps_s=small)
    assert FittedStepTime.from_dict(json.loads(json.dumps(fit.to_dict()))) == fit


def test_fit_step_timings_rejects_too_few_or_broken_steps() -> None:
    step = {"decode_contexts": [3], "chunks": [], "seconds": 0.01}
    with pytest.raises(InputError, match="4 different"):
        fit_step_timings([step] * 10)
    with pytest.raises(InputError, match="positive duration"):
        fit_step_timings([{**step, "seconds": 0.0}])
    with pytest.raises(InputError, match="not a timed step"):
        fit_step_timings([{"chunks": []}])


@settings(max_examples=30, deadline=None)
@given(overhead=st.floats(0, 5), concurrency=st.integers(1, 3))
def test_request_overhead_delays_every_request_by_exactly_that(
    overhead: float, concurrency: int
) -> None:
    shapes = [RequestShape(3, 4)] * 5
    base = simulate(shapes, ONE_SECOND_STEPS, ServerConfig(max_batch=1), concurrency=concurrency)
    late = simulate(
        shapes,
        ONE_SECOND_STEPS,
        ServerConfig(max_batch=1, request_overhead_s=overhead),
        concurrency=concurrency,
    )
    # One request at a time: the server is idle during each overhead (closed loop, one client)
    # or it overlaps another request's steps; either way TTFT grows by at most the overhead.
    for before, after in zip(base, late, strict=True):
        assert after["inter_token_latencies_s"] == pytest.approx(before["inter_token_latencies_s"])
        assert after["ttft_s"] >= before["ttft_s"] - 1e-9
    if concurrency == 1:
        assert [r["ttft_s"] for r in late] == pytest.approx([r["ttft_s"] + overhead for r in base])
    with pytest.raises(InputError, match="overhead"):
        ServerConfig(request_overhead_s=-1.0)


def test_a_step_log_that_is_not_json_lines_is_one_readable_error(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    log.write_text('{"decode_contexts": [1], "chunks": [], "seconds": 0.1}\n{"decode_con\n')
    with pytest.raises(InputError, match="not JSON lines"):
        read_step_fit(log)


def test_an_engine_profile_json_is_fitted_on_reading(tmp_path: Path) -> None:
    """serve-model's POST /v1/engine/profile answer, saved, is a --fit input."""
    truth = FittedStepTime("served", 2e-3, 1e-4, 1e-7, 5e-4)
    shapes = [([], [(16, 0)]), ([], [(64, 0)] * 2), ([20], []), ([80] * 3, []), ([40], [(30, 0)])]
    steps = [
        {"decode_contexts": d, "chunks": c, "seconds": float(truth.seconds(StepWork.of(d, c))[0])}
        for d, c in shapes
    ]
    profile = tmp_path / "engine-profile.json"
    profile.write_text(json.dumps({"object": "engine.profile", "model": "served", "steps": steps}))
    fit = read_step_fit(profile)
    assert fit.model == "served"
    assert fit.seconds(StepWork.of([50, 60], []))[0] == pytest.approx(
        truth.seconds(StepWork.of([50, 60], []))[0], rel=1e-6
    )
    profile.write_text(json.dumps({"object": "engine.profile", "model": "served"}))
    with pytest.raises(InputError, match="without a list of steps"):
        read_step_fit(profile)
