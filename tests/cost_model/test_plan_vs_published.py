"""The plan-against-published benchmark's comparison logic (``benchmarks/plan_vs_published.py``)
on small hand-made data: which published figures make points, how a model's frontier is drawn
from every source's points, how the plan's frontier is read at a published tokens/s per user,
and that predictions run on engine stacks without what is fitted on serving figures."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.published import PublishedRow
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine

BENCHMARK: dict[str, Any] = runpy.run_path(
    str(Path(__file__).parents[2] / "benchmarks" / "plan_vs_published.py")
)
Published, Layout = BENCHMARK["Published"], BENCHMARK["Layout"]
at_per_user, published_frontier = BENCHMARK["at_per_user"], BENCHMARK["published_frontier"]
at_load_points, shortest_share = BENCHMARK["at_load_points"], BENCHMARK["shortest_share"]
held_out_stack, held_out_stacks = BENCHMARK["held_out_stack"], BENCHMARK["held_out_stacks"]
at_load, slope = BENCHMARK["at_load"], BENCHMARK["slope"]
at_throughput, layout_curve = BENCHMARK["at_throughput"], BENCHMARK["layout_curve"]
sweeps, Sweep = BENCHMARK["sweeps"], BENCHMARK["Sweep"]


def _point(source: str, tpot_s: float, tput: float, **changes: Any) -> Any:
    fields = {
        "source_id": source, "engine": "sglang", "stack": "sglang", "gpu": "b200",
        "model": "deepseek-r1", "weights": "fp8", "speculative": "", "prompt_tokens": 1024,
        "output_tokens": 1024, "shortest": 0.8, "concurrency": 16,
        "decode": Layout(1, 8, 1, False), "prefill": None, "tpot_s": tpot_s,
        "tput_per_gpu": tput,
    } | changes  # fmt: skip
    return Published(**fields)


def _row(metric: str, value: float, **changes: Any) -> PublishedRow:
    fields = {
        "row_id": f"r-{metric}".replace("_", "-"),
        "source_id": "inferencex-run-1", "engine": "sglang", "gpu": "b200", "gpu_count": 8,
        "model": "deepseek-r1", "weights": "fp8", "tensor_parallel_size": 8,
        "prompt_tokens": 1024, "output_tokens": 1024, "metric": metric, "value": value,
        "concurrency": 4,
    } | changes  # fmt: skip
    return PublishedRow(**fields)


class TestAtPerUser:
    FRONTIER: ClassVar[list[tuple[float, float]]] = [(10.0, 900.0), (20.0, 500.0), (40.0, 100.0)]

    def test_linear_between_points(self) -> None:
        assert at_per_user(self.FRONTIER, 15.0) == pytest.approx(700.0)
        assert at_per_user(self.FRONTIER, 30.0) == pytest.approx(300.0)
        assert at_per_user(self.FRONTIER, 20.0) == pytest.approx(500.0)

    def test_top_throughput_below_the_slowest_point(self) -> None:
        assert at_per_user(self.FRONTIER, 2.0) == pytest.approx(900.0)

    def test_none_beyond_the_fastest_point(self) -> None:
        assert at_per_user(self.FRONTIER, 40.5) is None
        assert at_per_user([], 5.0) is None

    @settings(max_examples=50, deadline=None)
    @given(st.floats(min_value=0.1, max_value=40.0))
    def test_between_the_frontier_s_extremes(self, per_user: float) -> None:
        value = at_per_user(self.FRONTIER, per_user)
        assert value is not None and 100.0 <= value <= 900.0


class TestAtLoad:
    # Loads per GPU (tokens/s per GPU / per user): 90, 25, 2.5.
    FRONTIER: ClassVar[list[tuple[float, float]]] = [(10.0, 900.0), (20.0, 500.0), (40.0, 100.0)]

    def test_on_a_frontier_point(self) -> None:
        assert at_load(self.FRONTIER, 5.0, 125.0) == pytest.approx(500.0)  # load 25

    def test_both_axes_scale_alike_along_the_ray(self) -> None:
        # A published point at half the frontier point's figures on both axes: same load.
        assert at_load(self.FRONTIER, 10.0, 250.0) / 250.0 == pytest.approx(2.0)

    def test_a_near_vertical_frontier_reads_the_tokens_per_user_error(self) -> None:
        # Throughput 16x from 100 to 80 tokens/s per user: a point 10% slower per user than
        # the frontier at one client is 1.1x off at its load, though 10x off at its speed.
        steep = [(80.0, 160.0), (100.0, 10.0)]
        published = (100.0 / 1.1, 10.0 / 1.1)
        assert at_load(steep, *published) / published[1] == pytest.approx(1.1)
        assert at_per_user(steep, published[0]) / published[1] > 5

    def test_beyond_the_ends_as_at_per_user_reads_them(self) -> None:
        # Heavier than the heaviest point (load 100 > 90): its top throughput.
        assert at_load(self.FRONTIER, 1.0, 100.0) == pytest.approx(900.0)
        # Lighter than the lightest (load 1 < 2.5): its fastest tokens/s per user over the
        # point's, as a factor on the point's throughput.
        assert at_load(self.FRONTIER, 100.0, 100.0) / 100.0 == pytest.approx(0.4)
        assert at_load([], 1.0, 1.0) is None

    @settings(max_examples=50, deadline=None)
    @given(st.floats(min_value=2.5, max_value=90.0))
    def test_between_the_frontier_s_extremes(self, load: float) -> None:
        value = at_load(self.FRONTIER, 10.0, 10.0 * load)
        assert value is not None and 100.0 * (1 - 1e-9) <= value <= 900.0 * (1 + 1e-9)


def test_at_throughput_reads_the_other_axis() -> None:
    frontier = [(10.0, 900.0), (20.0, 500.0), (40.0, 100.0)]
    assert at_throughput(frontier, 700.0) == pytest.approx(15.0)
    assert at_throughput(frontier, 50.0) == pytest.approx(40.0)  # its fastest below
    assert at_throughput(frontier, 901.0) is None
    assert at_throughput([], 1.0) is None


def test_slope_on_log_axes() -> None:
    frontier = [(10.0, 900.0), (20.0, 450.0)]  # throughput halves as tokens/s per user doubles
    assert slope(frontier, 15.0) == pytest.approx(-1.0)
    assert slope(frontier, 25.0) is None
    assert slope(frontier[:1], 10.0) is None


class TestPublishedFrontier:
    def test_drawn_from_every_source_of_the_workload(self) -> None:
        old = _point("inferencex-run-1", 0.020, 400.0)  # beaten by the newer run's point
        new = _point("inferencex-run-2", 0.020, 600.0)
        fast = _point("inferencex-run-1", 0.010, 100.0)  # fastest per user: kept
        assert set(published_frontier([old, new, fast])) == {new, fast}

    def test_per_source_keeps_each_source_s_own(self) -> None:
        old = _point("inferencex-run-1", 0.020, 400.0)
        new = _point("inferencex-run-2", 0.020, 600.0)
        assert set(published_frontier([old, new], per_source=True)) == {old, new}

    @pytest.mark.parametrize(
        "changes",
        [{"model": "qwen3-235b-a22b"}, {"gpu": "h200"}, {"engine": "tensorrt-llm",
         "stack": "tensorrt-llm"}, {"speculative": "mtp"}, {"prompt_tokens": 8192},
         {"shortest": 0.0}, {"prefill": Layout(1, 4, 1, False)}],
    )  # fmt: skip
    def test_other_workloads_never_beat_a_point(self, changes: dict[str, Any]) -> None:
        mine = _point("inferencex-run-1", 0.020, 400.0)
        other = _point("inferencex-run-2", 0.010, 900.0, **changes)
        assert set(published_frontier([mine, other])) == {mine, other}


class TestAtLoadPoints:
    def test_median_tpot_and_throughput_per_gpu(self) -> None:
        rows = [
            _row("time_per_output_token_s", 0.02, statistic="median"),
            _row("output_throughput_tokens_per_s_per_gpu", 300.0),
            _row("ttft_s", 0.5, statistic="median"),
        ]
        (point,) = at_load_points(rows)
        assert (point.tpot_s, point.tput_per_gpu, point.statistic) == (0.02, 300.0, "median")
        assert (point.shortest, point.family, point.stack) == (0.8, "inferencex", "sglang")

    def test_system_throughput_is_divided_among_the_gpus(self) -> None:
        source = {"source_id": "sglang-cookbook-deepseek-r1"}
        rows = [
            _row("time_per_output_token_s", 0.02, statistic="median", **source),
            _row("output_throughput_tokens_per_s", 800.0, **source),
        ]
        (point,) = at_load_points(rows)
        assert point.tput_per_gpu == pytest.approx(100.0)
        assert (point.shortest, point.family) == (0.0, "sglang-cookbook")

    def test_a_mean_tpot_where_no_median_is_published(self) -> None:
        source = {"source_id": "nim-guide", "engine": "nim", "model": "llama-3.3-70b"}
        rows = [
            _row("time_per_output_token_s", 0.02, statistic="mean", **source),
            _row("output_throughput_tokens_per_s", 800.0, **source),
        ]
        points = at_load_points(rows)
        # The page does not name NIM's engine: one point per engine stack it could be.
        assert sorted(p.stack for p in points) == ["tensorrt-llm", "vllm"]
        assert {(p.statistic, p.engine_label.split()[0], p.shortest) for p in points} == {
            ("mean", "nim", 1.0)
        }
        assert points[0].workload != points[1].workload

    def test_rows_without_load_or_known_client_are_left_out(self) -> None:
        rows = [
            _row("time_per_output_token_s", 0.02, statistic="median", concurrency=None),
            _row("output_throughput_tokens_per_s_per_gpu", 300.0, concurrency=None),
            _row("time_per_output_token_s", 0.02, statistic="median", source_id="vendor-x"),
            _row("output_throughput_tokens_per_s_per_gpu", 300.0, source_id="vendor-x"),
            _row("time_per_output_token_s", 0.02, statistic="p99", concurrency=8),
            _row("output_throughput_tokens_per_s_per_gpu", 300.0, concurrency=8),
        ]
        assert at_load_points(rows) == []


class TestSweeps:
    """The plan searches what the workload's sources searched: their GPUs and clients."""

    def test_the_most_gpus_and_the_range_of_clients_of_each_workload(self) -> None:
        points = [
            _point("a", 0.02, 100.0, concurrency=4, decode=Layout(1, 2, 1, False)),
            _point("b", 0.03, 300.0, concurrency=128, decode=Layout(1, 8, 8, True)),
            _point("c", 0.02, 100.0, concurrency=8, model="gpt-oss-120b"),
        ]
        found = sweeps(points)
        assert found[points[0].workload] == Sweep(8, 4, 128, attention_dp=True)
        assert found[points[2].workload] == Sweep(8, 8, 8, attention_dp=False)

    def test_attention_dp_is_searched_where_a_point_of_the_workload_ran_it(self) -> None:
        tp = _point("a", 0.02, 100.0, decode=Layout(1, 8, 8, False))
        dpa = _point("b", 0.03, 300.0, concurrency=256, decode=Layout(1, 8, 8, True))
        assert not sweeps([tp])[tp.workload].attention_dp
        assert sweeps([tp, dpa])[tp.workload].attention_dp
        xpyd = _point("c", 0.02, 100.0, decode=Layout(1, 8, 8, False),
                      prefill=Layout(1, 8, 8, True))  # fmt: skip
        assert sweeps([xpyd])[xpyd.workload].attention_dp

    def test_a_disaggregated_point_counts_every_gpu_of_both_pools(self) -> None:
        xpyd = _point("a", 0.02, 100.0, concurrency=512, decode=Layout(2, 8, 8, True),
                      prefill=Layout(3, 4, 1, False))  # fmt: skip
        assert sweeps([xpyd])[xpyd.workload].max_gpus == 2 * 8 + 3 * 4

    def test_levels_are_the_ends_and_the_powers_of_two_between(self) -> None:
        assert Sweep(8, 4, 100).levels == [4, 8, 16, 32, 64, 100]
        assert Sweep(2, 1, 1).levels == [1]


def test_the_plan_is_asked_for_the_kv_cache_the_source_ran() -> None:
    """InferenceX's scripts: fp8 under TensorRT-LLM everywhere, under SGLang and vLLM on
    Blackwell; a source that states none (the cookbook, NIM) leaves the engine's default."""
    ran = {(engine, gpu, source): _point(source, 0.02, 100.0, engine=engine, stack=engine,
                                         gpu=gpu).kv_cache
           for engine in ("sglang", "tensorrt-llm", "vllm") for gpu in ("b200", "h200")
           for source in ("inferencex-run-1", "sglang-cookbook-x")}  # fmt: skip
    assert {k for k, kv in ran.items() if kv == "fp8"} == {
        ("sglang", "b200", "inferencex-run-1"), ("vllm", "b200", "inferencex-run-1"),
        ("tensorrt-llm", "b200", "inferencex-run-1"), ("tensorrt-llm", "h200", "inferencex-run-1"),
    }  # fmt: skip
    assert set(ran.values()) == {"fp8", None}
    blackwell, hopper = (
        _point("inferencex-run-1", 0.02, 100.0),
        _point("inferencex-run-1", 0.02, 100.0, gpu="h200"),
    )
    assert blackwell.kv_cache in blackwell.workload and hopper.workload[4] is None


def test_the_plan_is_asked_for_the_activations_the_source_set() -> None:
    """InferenceX's vLLM gpt-oss runs on Blackwell set MXFP8 activations into the MXFP4
    experts (a vLLM knob; TensorRT-LLM's and SGLang's default there); nowhere else."""
    gpt_oss = {"model": "gpt-oss-120b", "weights": "mxfp4"}
    set_by = {
        (engine, gpu): _point("inferencex-run-1", 0.02, 100.0, engine=engine, stack=engine,
                              gpu=gpu, **gpt_oss).activations
        for engine in ("vllm", "tensorrt-llm") for gpu in ("b200", "h200")
    }  # fmt: skip
    assert set_by == {("vllm", "b200"): "fp8", ("vllm", "h200"): None,
                      ("tensorrt-llm", "b200"): None, ("tensorrt-llm", "h200"): None}  # fmt: skip
    cookbook = _point("sglang-cookbook-x", 0.02, 100.0, engine="vllm", stack="vllm", **gpt_oss)
    assert cookbook.activations is None


def test_the_plan_and_the_same_deployment_run_the_moe_runner_the_source_ran() -> None:
    """The cookbook's SGLang 0.5.6 served bf16 experts on Blackwell with Triton's fused MoE
    (the stack's default is FlashInfer's TensorRT-LLM kernels, as 0.5.14 runs them); its fp8
    DeepSeek-R1 and every InferenceX run keep the default."""
    qwen = {"model": "qwen3-235b-a22b", "weights": "bf16"}
    cookbook = _point("sglang-cookbook-qwen3-235b-a22b", 0.0161, 104.0, **qwen)
    assert cookbook.moe_runner == "triton" and "triton" in cookbook.workload
    hopper = _point("sglang-cookbook-qwen3-235b-a22b", 0.0161, 104.0, gpu="h200", **qwen)
    assert hopper.moe_runner == ""
    assert _point("sglang-cookbook-deepseek-r1", 0.02, 100.0).moe_runner == ""
    assert _point("inferencex-run-1", 0.02, 100.0, **qwen).moe_runner == ""
    # The same layout on Triton's kernels: fewer tokens/s per GPU than on the default's (a
    # source that states nothing, so the same cache).
    own = layout_curve(cookbook, [1, 16])[0]
    plain = layout_curve(_point("another-source", 0.0161, 104.0, **qwen), [1, 16])[0]
    assert own[1] < 0.95 * plain[1]


def test_shortest_share_of_a_draw_from_one_token() -> None:
    assert shortest_share(0.8, 1024) == 0.8
    assert shortest_share(0.0, 8000) == pytest.approx(1 / 8000)


class TestHeldOutStacks:
    def test_only_the_residual_fitted_on_serving_figures_is_left_out(self) -> None:
        shipped = get_engine("sglang")
        held = held_out_stack(shipped)
        assert held.scheduler.residual_overhead_s(61) == 0.0
        changed = {
            name
            for name in shipped.scheduler.__dataclass_fields__
            if getattr(held.scheduler, name) != getattr(shipped.scheduler, name)
        }
        assert changed <= {"request_overhead_s", "request_overhead_s_per_layer"}
        assert held.gpus is shipped.gpus and held.name == shipped.name

    def test_inside_only(self) -> None:
        shipped = get_engine("sglang")
        with held_out_stacks():
            assert get_engine("sglang").scheduler.residual_overhead_s(61) == 0.0
            assert get_engine("sglang").scheduler.token_budget == shipped.scheduler.token_budget
        assert get_engine("sglang") is shipped


def test_the_same_deployment_runs_the_drafts_the_source_ran() -> None:
    """InferenceX's scripts: SGLang 2 draft tokens, TensorRT-LLM 1 with attention DP and 3
    without (a disaggregated point by its decode pool); 3 where a source states none; each
    accepted at the published rate, as the plan takes it; none without MTP."""
    from idealized_runtime.cost_model.serving.engines import published_acceptance

    def drafts(source: str, engine: str, decode: Any = None, **changes: Any) -> Any:
        point = _point(source, 0.02, 100.0, engine=engine, stack=engine, speculative="mtp",
                       decode=decode or Layout(1, 8, 8, False), **changes)  # fmt: skip
        return point.drafts

    dpa = Layout(1, 8, 8, True)
    assert drafts("inferencex-run-1", "sglang").draft_tokens == 2
    assert drafts("inferencex-run-1", "tensorrt-llm").draft_tokens == 3
    assert drafts("inferencex-run-1", "tensorrt-llm", dpa).draft_tokens == 1
    xpyd = drafts("inferencex-run-1", "tensorrt-llm", dpa, prefill=Layout(1, 4, 1, False))
    assert xpyd.draft_tokens == 1
    cookbook = drafts("sglang-cookbook-x", "sglang")
    assert cookbook.draft_tokens == 3
    assert cookbook.acceptance_rate == pytest.approx(published_acceptance("deepseek-r1", 3))
    assert _point("inferencex-run-1", 0.02, 100.0).drafts is None
