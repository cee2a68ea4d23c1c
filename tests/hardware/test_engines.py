"""Engine stacks for serving at load: kernels, step times, scheduler rules, layouts, refusals."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment, SpeculativeDecoding, parse_precision
from idealized_runtime.cost_model.hardware.engines.catalog import (
    EngineStack,
    engine_names,
    get_engine,
)
from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels
from idealized_runtime.cost_model.hardware.engines.step import (
    SchedulerDefaults,
    kernel_format,
    kv_capacity_tokens,
    weight_bytes_per_gpu,
)
from idealized_runtime.cost_model.serving.engines import default_precision, engine_server
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.workload import RequestShape
from tests.step_recorder import StepRecorder

ENGINES = ("vllm", "sglang", "tensorrt-llm")
H200, B200 = get_hardware("h200"), get_hardware("b200")


def test_the_three_engines_ship_with_their_versions_and_provenance() -> None:
    assert set(ENGINES) <= set(engine_names())
    for name in ENGINES:
        engine = get_engine(name)
        assert engine.provenance["package"] == "aiconfigurator-core"
        assert {"h100-sxm", "h200", "b200", "b300", "gb200"} <= set(engine.gpus)
        for kernels in engine.gpus.values():
            assert kernels.version and kernels.files


@pytest.mark.parametrize("name", ENGINES)
def test_each_stacks_kernels_predict_held_out_shapes(name: str) -> None:
    # Every fit was checked on every fifth measured shape, held out of that fit.
    for kernels in get_engine(name).gpus.values():
        errors = kernels.errors
        assert errors["gemm_bf16"]["median"] <= 0.15, (name, kernels.gpu)
        assert errors["gemm_bf16"]["n"] >= 100
        assert errors["context_attention"]["median"] <= 0.25
        assert errors["decode_attention"]["median"] <= 0.30
        assert errors["allreduce"]["median"] <= 0.08  # the measured curve, interpolated


@pytest.mark.parametrize("name", ENGINES)
def test_engine_json_round_trips(name: str) -> None:
    engine = get_engine(name)
    again = EngineStack.from_json(json.loads(json.dumps(engine.to_json())))
    assert again.to_json() == engine.to_json()


def test_a_step_costs_more_with_more_work_and_gemms_follow_their_kernels() -> None:
    deployment = Deployment(architecture=get_architecture("llama-3.1-8b"), hardware=H200)
    model = get_engine("vllm").step_model(deployment)
    small = model.seconds(8, 8 * 1000, 0, 0, 0)
    large = model.seconds(64, 64 * 1000, 0, 0, 0)
    mixed = model.seconds(8, 8 * 1000, 2048, 2048 * 2049 / 2, 1)
    assert small < large and small < mixed
    kernels = model.kernels
    assert kernels.gemm_time(H200, 4096, 4096, 4096, "bf16") > kernels.gemm_time(
        H200, 4096, 4096, 4096, "fp8"
    )


def test_speculative_tokens_per_step_by_hand() -> None:
    spec = SpeculativeDecoding(draft_tokens=3, acceptance_rate=0.5)
    assert spec.tokens_per_step == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert SpeculativeDecoding(draft_tokens=2, acceptance_rate=1.0).tokens_per_step == 3
    assert SpeculativeDecoding(draft_tokens=2, acceptance_rate=0.0).tokens_per_step == 1


def test_collectives_follow_the_measured_curve_and_the_line_elsewhere() -> None:
    from idealized_runtime.cost_model.hardware.engines.kernels import OpFit

    fit = OpFit(
        link=0.5,
        latency_by_gpus={2: 1e-5, 8: 2e-5},
        curve_by_gpus={8: ((1e3, 4e-6), (1e6, 2e-5), (1e8, 1e-3))},
    )
    link = 450e9
    # Measured sizes exactly; between them, log-log; below the smallest, its latency; beyond
    # the largest, at its bandwidth.
    assert fit.collective(np.array([1e6]), 8, 1.75, link)[0] == pytest.approx(2e-5)
    assert fit.collective(np.array([1e7]), 8, 1.75, link)[0] == pytest.approx((2e-5 * 1e-3) ** 0.5)
    assert fit.collective(np.array([10.0]), 8, 1.75, link)[0] == pytest.approx(4e-6)
    assert fit.collective(np.array([4e8]), 8, 1.75, link)[0] == pytest.approx(4e-3)
    # A GPU count without a curve: latency + message x ring / (link x efficiency).
    assert fit.collective(np.array([1e6]), 2, 1.0, link)[0] == pytest.approx(1e-5 + 1e6 / 225e9)
    again = OpFit.from_json(json.loads(json.dumps(fit.to_json())))
    assert again.curve_by_gpus == fit.curve_by_gpus
    # The shipped H200 all-reduce of SGLang at 8 GPUs is its measured curve: a 117 MB prompt
    # step's all-reduce (8192 tokens x 7168 x bf16) between the 64 and 128 MiB measurements.
    shipped = get_engine("sglang").gpus["h200"]
    sizes = [b for b, _ in shipped.allreduce.curve_by_gpus[8]]
    assert min(sizes) <= 2048 and max(sizes) >= 2**29
    step = float(shipped.allreduce_time(H200, 8192 * 7168 * 2.0, 8))
    assert 0.3e-3 < step < 0.8e-3


def test_mla_decode_reads_the_measured_grid_where_the_engine_measured_it() -> None:
    from idealized_runtime.cost_model.hardware.engines.kernels import MeasuredGrid

    grid = MeasuredGrid(
        batches=(1.0, 4.0), positions=(2.0, 8.0), seconds=((1e-5, 4e-5), (2e-5, 8e-5))
    )
    assert grid.at(np.array([4.0]), np.array([8.0]))[0] == pytest.approx(8e-5)
    # Log-log bilinear between cells; below the grid its edge; beyond it, linear.
    assert grid.at(np.array([2.0]), np.array([4.0]))[0] == pytest.approx((1e-5 * 8e-5) ** 0.5)
    assert grid.at(np.array([0.5]), np.array([1.0]))[0] == pytest.approx(1e-5)
    assert grid.at(np.array([8.0]), np.array([16.0]))[0] == pytest.approx(8e-5 * 2 * 2)
    assert MeasuredGrid.from_json(json.loads(json.dumps(grid.to_json()))) == grid
    # The shipped SGLang H200 kernels: DeepSeek at TP 8 (16 heads per GPU, bf16 cache) reads its
    # grid, held out within a few percent, where the one formula for every heads count was 31%.
    kernels = get_engine("sglang").gpus["h200"]
    assert "16/2" in kernels.mla_decode_grids and "128/1" in kernels.mla_decode_grids
    assert kernels.errors["mla_decode_grid"]["median"] <= 0.05
    assert kernels.errors["mla_decode_grid"]["median"] < kernels.errors["mla_decode"]["median"]
    measured = kernels.mla_decode_grids["16/2"]
    b, positions = 32, 4096.0  # a row and a column of the measured grid
    row, column = measured.batches.index(32.0), measured.positions.index(positions)
    kv = b * positions * 576 * 2.0
    time = kernels.decode_attention_time(
        H200, kv, 1.0, b, mla=True, grid=("16/2", b, b * positions)
    )
    assert float(time) == pytest.approx(measured.seconds[row][column])
    # Heads counts or formats not measured fall back to the formula.
    formula = kernels.decode_attention_time(H200, kv, 1.0, b, mla=True)
    assert float(
        kernels.decode_attention_time(H200, kv, 1.0, b, mla=True, grid=("3/2", b, b * positions))
    ) == (pytest.approx(float(formula)))


def test_decode_attention_reads_the_measured_grid_of_its_heads_layout() -> None:
    from idealized_runtime.cost_model.hardware.engines.kernels import decode_layout

    # The shipped TensorRT-LLM H200 kernels: Llama-3.1-8B's 32 heads over 8 KV heads of 128 at
    # TP 1 with an fp8 cache, held out within a few percent where the one formula for every
    # layout was 28% (median).
    kernels = get_engine("tensorrt-llm").gpus["h200"]
    layout = decode_layout(32, 1.0, 8, 128)
    assert layout == "32/8/128/1" and layout in kernels.decode_grids
    assert kernels.errors["decode_grid"]["median"] <= 0.05
    assert kernels.errors["decode_grid"]["median"] < kernels.errors["decode_attention"]["median"]
    measured = kernels.decode_grids[layout]
    b, positions = 64.0, 1024.0  # a row and a column of the measured grid
    row, column = measured.batches.index(b), measured.positions.index(positions)
    kv = b * positions * 2 * 8 * 128 * 1.0
    time = kernels.decode_attention_time(H200, kv, 1.0, b, grid=(layout, b, b * positions))
    assert float(time) == pytest.approx(measured.seconds[row][column])
    # A layout nobody measured reads the formula; so does a step without the layout given.
    formula = kernels.decode_attention_time(H200, kv, 1.0, b)
    other = kernels.decode_attention_time(H200, kv, 1.0, b, grid=("7/7/96/1", b, b * positions))
    assert float(other) == pytest.approx(float(formula))
    # The step model passes the deployment's layout: Llama-3.1-8B at TP 2 reads 16/4/128/2.
    llama = get_architecture("llama-3.1-8b")
    deployment = Deployment(architecture=llama, hardware=H200, tp=2)
    model = get_engine("tensorrt-llm").step_model(deployment)
    assert model._decode_layout == "16/4/128/2" and "16/4/128/2" in kernels.decode_grids


def test_each_draft_pass_pays_the_host_time_of_a_graph_replay() -> None:
    # SGLang's EAGLE / TensorRT-LLM's MTP run each draft pass as a graph replay of its own: a
    # decode step with 3 drafts pays the decode host time 3 more times, beside the passes'
    # kernels; the target pass itself, under TensorRT-LLM's overlap scheduler, only the gap
    # between two replays (its kernels outlast the host's planning of the next step).
    deepseek = get_architecture("deepseek-r1")
    plain = Deployment(architecture=deepseek, hardware=H200, tp=8, precision=deepseek.precision)
    mtp = plain.model_copy(
        update={"speculative": SpeculativeDecoding(draft_tokens=3, acceptance_rate=0.7)}
    )
    engine = get_engine("tensorrt-llm")
    host, gap = engine.scheduler.decode_overhead_s, engine.scheduler.overlap_gap_s
    assert host > gap > 0 and engine.scheduler.schedule_ahead_steps == 1
    lazy = replace(engine.scheduler, decode_overhead_s=0.0, step_overhead_s=0.0, overlap_gap_s=0.0)
    for deployment, drafts in ((plain, 0), (mtp, 3)):
        timed = engine.step_model(deployment)
        free = type(timed)(deployment, timed.kernels, lazy)
        step = float(np.sum(timed.seconds(16, 16 * 2048, 0, 0, 0)))
        assert step - float(np.sum(free.seconds(16, 16 * 2048, 0, 0, 0))) == pytest.approx(
            gap + drafts * host
        )
    # A step with no decoding sequence runs no draft.
    prompt_only = engine.step_model(mtp)
    without = type(prompt_only)(mtp, prompt_only.kernels, lazy)
    gap = np.sum(prompt_only.seconds(0, 0, 1024, 1024 * 512, 1)) - np.sum(
        without.seconds(0, 0, 1024, 1024 * 512, 1)
    )
    assert float(gap) == pytest.approx(engine.scheduler.step_overhead_s)


def test_an_overlap_scheduler_hides_the_host_time_of_decode_steps() -> None:
    # TensorRT-LLM's and SGLang's overlap schedulers and vLLM's async scheduling (all on by
    # default) plan step n + 1 while the GPU runs step n: a decode step costs its kernels + the
    # gap between two graph replays, or the host's time where that is longer; vLLM with
    # --no-async-scheduling plans after each step, so the host time adds. Steps with prompt
    # chunks keep their host time.
    llama = get_architecture("llama-3.1-70b")
    deployment = Deployment(architecture=llama, hardware=H200, tp=4)
    shipped = get_engine("vllm").step_model(deployment)

    def step_s(scheduler: SchedulerDefaults, *step: float) -> float:
        """The step's seconds on the same kernels under ``scheduler``."""
        return float(np.sum(type(shipped)(deployment, shipped.kernels, scheduler).seconds(*step)))

    def host_share(scheduler: SchedulerDefaults, *step: float) -> float:
        free = replace(scheduler, decode_overhead_s=0.0, step_overhead_s=0.0, overlap_gap_s=0.0)
        return step_s(scheduler, *step) - step_s(free, *step)

    decode, prompt = (32, 32 * 1024, 0, 0, 0), (0, 0, 2048, 2048 * 1024, 1)
    for name in ("tensorrt-llm", "sglang", "vllm"):
        scheduler = get_engine(name).scheduler
        assert scheduler.schedule_ahead_steps == 1
        assert 0 < scheduler.overlap_gap_s < scheduler.decode_overhead_s
        assert host_share(scheduler, *decode) == pytest.approx(scheduler.overlap_gap_s)
        assert host_share(scheduler, *prompt) == pytest.approx(scheduler.step_overhead_s)
    vllm = get_engine("vllm").scheduler
    synchronous = replace(vllm, schedule_ahead_steps=0)
    assert host_share(synchronous, *decode) == pytest.approx(vllm.decode_overhead_s)
    # A host slower than the kernels sets the pace: the step takes the host's time.
    assert step_s(replace(vllm, decode_overhead_s=1.0), *decode) == pytest.approx(1.0)


def test_the_last_tokens_of_a_long_prompt_cost_what_their_attention_does() -> None:
    # Llama-3.1-8B fp8 on an H100 under vLLM (its prompt attention measured for this layout):
    # a prompt of the whole 8192-token budget leaves its last tokens to the next step, where
    # they attend to 8k cached tokens. Their attention is read at the rate of a prompt as long
    # as what they attend to, not of a prompt of a few tokens (whose fixed kernel time per
    # FLOP priced them at 0.7-3 s): the step costs about a decode step and the host's time.
    llama = get_architecture("llama-3.1-8b")
    deployment = Deployment(
        architecture=llama, hardware=get_hardware("h100-sxm"), tp=1,
        precision=parse_precision("fp8"),
    )  # fmt: skip
    model = get_engine("vllm").step_model(deployment)
    assert model._prompt_layout in model.kernels.prompt_grids
    decode_only = float(np.sum(model.seconds(7, 7 * 8200, 0, 0, 0)))
    for new in (1, 7, 64):
        cached = 8192 - new
        attended = new * cached + new * (new + 1) / 2
        step = float(np.sum(model.seconds(7, 7 * 8200, new, attended, 1)))
        assert step < decode_only + get_engine("vllm").scheduler.step_overhead_s + 2e-3
    # More cache behind the same chunk never makes its step cheaper.
    times = [
        float(np.sum(model.seconds(0, 0, 512, 512 * c + 512 * 513 / 2, 1)))
        for c in (0, 1024, 4096, 16384)
    ]
    assert times == sorted(times)


def test_attention_dp_over_split_experts_gathers_tokens_as_an_all_reduce_moves_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # gpt-oss-120b on 2 B200 under TensorRT-LLM, attention DP 2: with its experts split over
    # both GPUs (EP 1: InferenceX's scripts turn the all-to-all off) each MoE layer gathers the
    # ranks' tokens and reduce-scatters the outputs, an all-reduce of the step's tokens; with
    # EP 2 the tokens go to their experts' rank and back (dispatch and combine, top-k copies).
    gptoss = get_architecture("gpt-oss-120b")
    seen: dict[str, list[float]] = {"allreduce": [], "alltoall": []}
    for name in seen:
        original = getattr(GpuKernels, f"{name}_time")

        def recording(self, hardware, message_bytes, gpus, _name=name, _original=original):  # type: ignore[no-untyped-def]
            seen[_name].append(float(np.max(message_bytes)))
            return _original(self, hardware, message_bytes, gpus)

        monkeypatch.setattr(GpuKernels, f"{name}_time", recording)
    for ep in (1, 2):
        for calls in seen.values():
            calls.clear()
        deployment = Deployment(
            architecture=gptoss, hardware=B200, tp=2, ep=ep, attention_dp=2,
            precision=gptoss.precision,
        )  # fmt: skip
        get_engine("tensorrt-llm").step_model(deployment).seconds(32, 32 * 1024, 0, 0, 0)
        if ep == 1:  # the step's 32 tokens, 2 bytes a value
            assert not seen["alltoall"]
            assert set(seen["allreduce"]) == {32 * gptoss.hidden_size * 2.0}
        else:
            assert not seen["allreduce"] and seen["alltoall"]


def test_expert_and_attention_parallel_layouts_by_hand() -> None:
    deepseek = get_architecture("deepseek-r1")
    plain = Deployment(architecture=deepseek, hardware=B200, tp=8, precision=deepseek.precision)
    spread = plain.model_copy(update={"ep": 8, "attention_dp": 8})
    assert (spread.attention_tp, spread.moe_tp) == (1, 1)
    # Attention data parallel: every GPU holds the whole attention, the rest stays split by 8.
    from idealized_runtime.cost_model.hardware.counts import layer_weights

    attention = sum(
        layer_weights(deepseek, i).attention_matrices for i in range(deepseek.num_layers)
    )  # fp8: one byte each
    grown = weight_bytes_per_gpu(spread) - weight_bytes_per_gpu(plain)
    assert grown == pytest.approx(attention * (1 - 1 / 8), rel=0.01)
    # Each attention group keeps its own MLA cache: 8 groups hold 8x the tokens per byte.
    engine = get_engine("sglang")
    one = kv_capacity_tokens(plain, engine.scheduler)
    eight = kv_capacity_tokens(spread, engine.scheduler)
    free_plain = B200.memory_gb * 1e9 * 0.88 - weight_bytes_per_gpu(plain)
    free_spread = B200.memory_gb * 1e9 * 0.88 - weight_bytes_per_gpu(spread)
    assert eight / one == pytest.approx(8 * free_spread / free_plain, rel=0.01)


def test_expert_parallel_moves_tokens_only_between_attention_dp_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tensor-parallel attention leaves every token on every GPU: expert parallelism then
    differs from tensor-parallel experts only in the experts' kernel (same all-reduce, no
    all-to-all); attention DP puts different tokens on the GPUs, which the all-to-all moves."""
    from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels

    moved: list[int] = []
    alltoall = GpuKernels.alltoall_time

    def counted(self: GpuKernels, hardware, message, gpus):  # type: ignore[no-untyped-def]
        moved.append(gpus)
        return alltoall(self, hardware, message, gpus)

    monkeypatch.setattr(GpuKernels, "alltoall_time", counted)
    deepseek = get_architecture("deepseek-r1")
    plain = Deployment(architecture=deepseek, hardware=B200, tp=8, precision=deepseek.precision)
    experts = plain.model_copy(update={"ep": 8})
    engine = get_engine("tensorrt-llm")
    tokens, attended = 32.0, 32.0 * 2000
    step_tp = engine.step_model(plain).seconds(tokens, attended, 0, 0, 0)
    step_ep = engine.step_model(experts).seconds(tokens, attended, 0, 0, 0)
    assert moved == []
    kernels = engine.step_model(plain).kernels
    shape = {
        "hidden": deepseek.hidden_size,
        "inter": deepseek.expert_ffn_hidden_size,
        "experts": deepseek.num_experts,
        "topk": deepseek.experts_per_token,
        "fmt": kernel_format(deepseek.precision, experts=True),
    }
    moe_layers = deepseek.num_layers - deepseek.first_k_dense_layers
    by_hand = moe_layers * (
        kernels.moe_time(B200, tokens, ep=8, moe_tp=1, **shape)
        - kernels.moe_time(B200, tokens, ep=1, moe_tp=8, **shape)
    )
    assert step_ep - step_tp == pytest.approx(by_hand, rel=1e-9, abs=1e-12)
    spread = experts.model_copy(update={"attention_dp": 8})
    engine.step_model(spread).seconds(tokens, attended, 0, 0, 0)
    assert moved and set(moved) == {8}


def test_refusals_are_one_line() -> None:
    llama = get_architecture("llama-3.1-8b")
    with pytest.raises(ValueError, match="dense"):
        Deployment(architecture=llama, hardware=H200, tp=2, ep=2)
    with pytest.raises(ValueError, match="must divide"):
        Deployment(architecture=llama, hardware=H200, tp=2, attention_dp=4)
    nvfp4 = Deployment(architecture=llama, hardware=H200, precision=parse_precision("nvfp4"))
    with pytest.raises(InputError, match="no fp4 tensor cores"):
        get_engine("vllm").step_model(nvfp4)
    with pytest.raises(InputError, match="no kernel measurements on a100-80gb"):
        get_engine("vllm").step_model(
            Deployment(architecture=llama, hardware=get_hardware("a100-80gb"))
        )
    deepseek = get_architecture("deepseek-r1")
    with pytest.raises(InputError) as error:
        kv_capacity_tokens(
            Deployment(architecture=deepseek, hardware=H200, tp=4, precision=deepseek.precision),
            get_engine("sglang").scheduler,
        )
    assert "\n" not in str(error.value) and "fp8" in str(error.value)


def test_nvfp4_checkpoints_serve_with_an_fp8_kv_cache_by_default() -> None:
    llama = get_architecture("llama-3.1-8b")
    assert default_precision(llama, weights="nvfp4").kv_cache == "fp8"
    assert default_precision(llama, weights="nvfp4").activations == "fp4"
    assert default_precision(llama).kv_cache == "bf16"
    # DeepSeek-R1 in fp8 fits 4 B200 (engines run it so).
    deepseek = get_architecture("deepseek-r1")
    four = Deployment(architecture=deepseek, hardware=B200, tp=4, precision=deepseek.precision)
    assert kv_capacity_tokens(four, get_engine("sglang").scheduler) > 0


def test_a_tensor_parallel_group_beyond_one_nvlink_domain_is_refused_in_one_line() -> None:
    # 16 H100s are two HGX nodes: their collectives cross the network, which no stack models.
    deepseek = get_architecture("deepseek-r1")
    h100 = get_hardware("h100-sxm")
    assert h100.scale_up_gpus == 8 and get_hardware("gb200").scale_up_gpus == 72
    sixteen = Deployment(architecture=deepseek, hardware=h100, tp=16, precision=deepseek.precision)
    for name in ENGINES:
        with pytest.raises(InputError) as error:
            get_engine(name).step_model(sixteen)
        message = str(error.value)
        assert "\n" not in message and "2 NVLink domains of 8 h100-sxm" in message
    # Within GB200 NVL72's one domain, 16 GPUs are one group.
    on_gb200 = sixteen.model_copy(update={"hardware": get_hardware("gb200")})
    assert get_engine("sglang").step_model(on_gb200) is not None


def test_engines_size_the_kv_cache_from_the_memory_the_driver_reports() -> None:
    # An H200 reports 143,771 MiB (150.8 GB), not its marketed 141 GB: SGLang's
    # --mem-fraction-static is a fraction of the former. By hand for DeepSeek-R1 in fp8 on 8:
    # cache = 0.82 x reported - weights per GPU, over 61 layers x 576 bf16 latent values.
    deepseek = get_architecture("deepseek-r1")
    eight = Deployment(architecture=deepseek, hardware=H200, tp=8, precision=deepseek.precision)
    scheduler = replace(get_engine("sglang").scheduler, memory_fraction=0.82)
    assert not scheduler.of_free
    assert H200.driver_memory_mib == 143771
    free = 0.82 * 143771 * 2**20 - weight_bytes_per_gpu(eight)
    assert kv_capacity_tokens(eight, scheduler) == int(free // (61 * 576 * 2))
    marketed = eight.model_copy(
        update={"hardware": H200.model_copy(update={"driver_memory_mib": None})}
    )
    by_marketed = int((0.82 * 141e9 - weight_bytes_per_gpu(eight)) // (61 * 576 * 2))
    assert kv_capacity_tokens(marketed, scheduler) == by_marketed
    assert kv_capacity_tokens(eight, scheduler) > 1.25 * by_marketed


@settings(max_examples=25, deadline=None)
@given(
    clients=st.integers(1, 12),
    prompt=st.integers(1, 300),
    output=st.integers(1, 20),
    budget=st.integers(16, 256),
    prefill_first=st.booleans(),
    chunked=st.booleans(),
)
def test_scheduler_rules_per_engine(
    clients: int, prompt: int, output: int, budget: int, prefill_first: bool, chunked: bool
) -> None:
    recorder = StepRecorder()
    config = ServerConfig(
        max_batch=8, token_budget=budget, prefill_first=prefill_first, chunked_prefill=chunked
    )
    shapes = [RequestShape(prompt, output) for _ in range(3 * clients)]
    rows = simulate(shapes, recorder, config, concurrency=clients)
    assert len(rows) == len(shapes) and all(r["ok"] for r in rows)
    assert all(r["num_output_tokens"] == output for r in rows)
    for work in recorder.steps:
        decode, _, prompt_tokens, _, chunks = work.split()
        alone = chunks[0] == 1 and decode[0] == 0  # a whole prompt larger than the budget
        assert work.tokens[0] <= budget or (not chunked and alone)
        if prefill_first:
            assert not (prompt_tokens[0] > 0 and decode[0] > 0)  # prompts run in steps alone
    if not prefill_first and chunked:
        # Decode first: no step leaves a decoding sequence out, so no gap between two tokens
        # is longer than one step (at most the budget's tokens).
        longest = 1e-3 + 1e-6 * budget
        for row in rows:
            assert max(row["inter_token_latencies_s"], default=0.0) <= longest + 1e-9


def test_speculative_decoding_yields_exact_token_counts_in_fewer_steps() -> None:
    deepseek = get_architecture("deepseek-r1")
    base = Deployment(architecture=deepseek, hardware=B200, tp=8, precision=deepseek.precision)
    spec = base.model_copy(
        update={"speculative": SpeculativeDecoding(draft_tokens=3, acceptance_rate=0.7)}
    )
    shapes = [RequestShape(256, 200) for _ in range(16)]
    results = {}
    for name, deployment in (("plain", base), ("mtp", spec)):
        step_time, config = engine_server("sglang", deployment)
        rows = simulate(shapes, step_time, config, concurrency=4)
        assert all(r["num_output_tokens"] == 200 for r in rows)
        assert all(len(r["inter_token_latencies_s"]) == 199 for r in rows)
        results[name] = np.median([r["runtime_s"] for r in rows])
    assert results["mtp"] < results["plain"]


def test_each_engine_admits_as_its_scheduler_does_and_flags_override() -> None:
    deepseek = get_architecture("deepseek-r1")
    deployment = Deployment(
        architecture=deepseek, hardware=B200, tp=8, precision=deepseek.precision
    )
    rules = {name: engine_server(name, deployment)[1].admission for name in ENGINES}
    assert rules == {"vllm": "allocated", "sglang": "ratio", "tensorrt-llm": "reserve"}
    flags = {"admission": "forecast", "recv_interval": 30, "memory_fraction": 0.82}
    _, config = engine_server("sglang", deployment, settings=flags)
    assert (config.admission, config.recv_interval) == ("forecast", 30)
    smaller = engine_server("sglang", deployment)[1].kv_capacity_tokens
    assert config.kv_capacity_tokens is not None and config.kv_capacity_tokens < smaller
    with pytest.raises(InputError, match=r"^unknown engine settings chunk_size; known: "):
        engine_server("sglang", deployment, settings={"chunk_size": 1})
    # A setting of the wrong kind is refused, not taken for a truthy switch or a fraction.
    for bad, kind in (
        ({"fuse_shared_experts": "no"}, "true or false"),
        ({"chunked_prefill": 1}, "true or false"),
        ({"max_running": 8.0}, "a whole number"),
        ({"memory_fraction": True}, "a number"),
    ):
        with pytest.raises(InputError, match=f"takes {kind}$"):
            engine_server("sglang", deployment, settings=bad)
    whole = engine_server("sglang", deployment, settings={"memory_fraction": 1})[1]
    assert whole.kv_capacity_tokens is not None and whole.kv_capacity_tokens > smaller


def test_published_mtp_acceptance_reproduces_its_figures() -> None:
    from idealized_runtime.cost_model.serving.engines import published_acceptance

    def tokens(k: int) -> float:
        rate = published_acceptance("deepseek-r1", k)
        assert rate is not None
        return SpeculativeDecoding(draft_tokens=k, acceptance_rate=rate).tokens_per_step

    # DeepSeek-V3's report: the first draft is accepted 85-90% of the time (0.875 stored);
    # the original MTP module reused for 7 drafts: 3.20 tokens per step.
    assert tokens(1) == pytest.approx(1.875)
    assert tokens(7) == pytest.approx(3.20)
    assert tokens(1) < tokens(2) < tokens(3) < tokens(7)
    assert published_acceptance("llama-3.1-8b", 3) is None


@pytest.mark.parametrize("name", ENGINES)
def test_an_engine_estimate_is_the_simulators_single_request(name: str) -> None:
    from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate

    llama = get_architecture("llama-3.1-8b")
    fp8 = parse_precision("fp8")
    estimate, stack = hardware_model_estimate(
        llama, get_hardware("h100-sxm"), 3000, 50, engine=name, tp=1, precision=fp8
    )
    assert stack == name
    deployment = Deployment(architecture=llama, hardware=get_hardware("h100-sxm"), precision=fp8)
    step_time, config = engine_server(name, deployment)
    (row,) = simulate([RequestShape(3000, 50, 0.0)], step_time, config)
    assert estimate.source == "engine" and estimate.num_gpus == 1
    assert estimate.alpha_s == pytest.approx(row["ttft_s"], rel=1e-9)
    assert estimate.runtime_s == pytest.approx(row["runtime_s"], rel=1e-9)
    assert estimate.beta_s == pytest.approx((row["runtime_s"] - row["ttft_s"]) / 49)


def test_estimate_cli_on_an_engine_stack_and_its_refusals() -> None:
    import subprocess
    import sys

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "idealized_runtime", "estimate", "--arch", "llama-3.1-8b",
             "-p", "500", "-o", "20", *extra], capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = run("--hardware", "h200", "--stack", "sglang")
    assert done.returncode == 0 and "engine stack sglang" in done.stdout
    for extra in (("--hardware", "a100-80gb", "--stack", "vllm"),
                  ("--hardware", "h200", "--stack", "vllm", "--ideal")):  # fmt: skip
        refused = run(*extra)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr


def test_collective_message_sizes_count_elements_of_their_dtype() -> None:
    """The kernel databases' ``message_size`` counts elements: a half all-reduce of N moves
    2N bytes, an int8 one N, and a table without a dtype is taken as bf16."""
    import pandas

    from idealized_runtime.cost_model.hardware.engines.kernel_fit import _message_bytes

    frame = pandas.DataFrame(
        {"nccl_dtype": ["half", "int8", "bfloat16"], "message_size": [1024, 1024, 8]}
    )
    assert _message_bytes(frame)["message_bytes"].tolist() == [2048.0, 1024.0, 16.0]
    plain = pandas.DataFrame({"message_size": [512]})
    assert _message_bytes(plain)["message_bytes"].tolist() == [1024.0]
    with pytest.raises(InputError, match="collective dtype"):
        _message_bytes(pandas.DataFrame({"allreduce_dtype": ["fp4"], "message_size": [1]}))


def test_the_moe_table_is_the_version_that_measured_the_most_formats(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A later version that remeasured a few formats only does not hide the block-scaled fp8
    an earlier one measured; among versions measuring as many, the newest."""
    import pandas

    from idealized_runtime.cost_model.hardware.engines.kernel_fit import _widest_moe_table

    def table(version: str, formats: list[str]) -> None:
        folder = tmp_path / "h200_sxm" / "moe" / "trtllm" / version
        folder.mkdir(parents=True)
        pandas.DataFrame({"moe_dtype": formats, "latency": [1.0] * len(formats)}).to_parquet(
            folder / "moe_perf.parquet"
        )

    table("1.3.0rc10", ["bfloat16", "fp8", "fp8_block"])
    table("1.3.0rc20", ["bfloat16", "fp8", "fp8_block"])
    table("1.3.0rc23", ["bfloat16", "fp8"])
    widest = _widest_moe_table(tmp_path, "h200_sxm", "trtllm")
    assert widest is not None
    path, frame = widest
    assert path.parent.name == "1.3.0rc20"
    assert "fp8_block" in set(frame["moe_dtype"])
    assert _widest_moe_table(tmp_path, "b200_sxm", "trtllm") is None


def test_sglang_fuses_deepseeks_shared_expert_into_the_routed_kernel_by_hand() -> None:
    """SGLang's shared-experts fusion: with tensor-parallel experts the shared expert is one more
    expert every token picks (no GEMMs or elementwise kernels of its own); with expert
    parallelism or FP4 experts it keeps its GEMMs, as on the engines without the fusion."""
    from dataclasses import replace

    deepseek = get_architecture("deepseek-r1")
    plain = Deployment(architecture=deepseek, hardware=B200, tp=8, precision=deepseek.precision)
    engine = get_engine("sglang")
    assert engine.scheduler.fuse_shared_experts
    unfused = replace(engine, scheduler=replace(engine.scheduler, fuse_shared_experts=False))
    tokens, attended = 16.0, 16.0 * 1500
    kernels = engine.step_model(plain).kernels
    width = deepseek.num_shared_experts * deepseek.expert_ffn_hidden_size / 8
    h = deepseek.hidden_size
    common = {"hidden": h, "inter": deepseek.expert_ffn_hidden_size, "ep": 1, "moe_tp": 8}
    experts_fmt, linear = (
        kernel_format(plain.precision, experts=True),
        kernel_format(plain.precision),
    )
    per_layer = (
        kernels.moe_time(B200, tokens, experts=257, topk=9, fmt=experts_fmt, **common)
        - kernels.moe_time(B200, tokens, experts=256, topk=8, fmt=experts_fmt, **common)
        - kernels.gemm_time(B200, tokens, 2 * width, h, linear)
        - kernels.gemm_time(B200, tokens, h, width, linear)
        # the shared experts' activation and their sum with the routed output
        - kernels.elementwise_time(B200, tokens, h, 2)
    )
    moe_layers = deepseek.num_layers - deepseek.first_k_dense_layers
    fused_s = engine.step_model(plain).seconds(tokens, attended, 0, 0, 0)
    unfused_s = unfused.step_model(plain).seconds(tokens, attended, 0, 0, 0)
    assert fused_s - unfused_s == pytest.approx(moe_layers * per_layer, rel=1e-9, abs=1e-12)
    for layout in (
        plain.model_copy(update={"ep": 8}),
        plain.model_copy(update={"precision": parse_precision("nvfp4")}),
    ):
        assert engine.step_model(layout).seconds(tokens, attended, 0, 0, 0) == pytest.approx(
            unfused.step_model(layout).seconds(tokens, attended, 0, 0, 0), rel=1e-12
        )


def test_sglang_on_hopper_times_prompt_mla_on_the_mha_path_it_serves_with() -> None:
    """SGLang's Hopper context-MLA tables time the absorbed 576/512 path (about 180 TFLOPS as
    MHA); it serves prompts on the MHA path, which TensorRT-LLM's Hopper table times. Blackwell
    keeps SGLang's own table (TensorRT-LLM's MLA kernel, which SGLang runs there)."""
    from idealized_runtime.cost_model.hardware.engines.kernel_fit import MLA_CONTEXT_OWNERS

    sglang, trtllm = get_engine("sglang"), get_engine("tensorrt-llm")
    tokens, heads = 8192, 16  # one DeepSeek prompt at TP 8
    flops = 2.0 * heads * (192 + 128) * tokens * (tokens + 1) / 2
    for gpu, folder in (("h100-sxm", "h100_sxm"), ("h200", "h200_sxm")):
        assert MLA_CONTEXT_OWNERS[("sglang", folder)] == "trtllm"
        kernels = sglang.gpus[gpu]
        assert f"{folder}/mla/trtllm/1.3.0rc20/context_mla_perf.parquet" in kernels.files
        assert not any(f.startswith(f"{folder}/mla/sglang/") and "context" in f
                       for f in kernels.files)  # fmt: skip
        assert kernels.mla_context == trtllm.gpus[gpu].mla_context
        seconds = float(kernels.context_attention_time(get_hardware(gpu), flops, tokens, mla=True))
        assert flops / seconds > 400e12  # the MHA path's throughput, not 180 TFLOPS
    assert "b200_sxm/mla/sglang/0.5.14/context_mla_perf.parquet" in sglang.gpus["b200"].files
    assert sglang.gpus["b200"].mla_context != trtllm.gpus["b200"].mla_context


def test_moe_steps_read_the_measured_curve_of_their_layout_at_every_size() -> None:
    from idealized_runtime.cost_model.hardware.engines.kernels import MeasuredCurve, moe_layout

    curve = MeasuredCurve(sizes=(512.0, 2048.0, 8192.0), seconds=(1e-4, 4e-4, 2e-3))
    assert float(curve.at(2048.0)) == pytest.approx(4e-4)
    assert float(curve.at(1024.0)) == pytest.approx((1e-4 * 4e-4) ** 0.5)  # log-log
    assert float(curve.at(16384.0)) == pytest.approx(4e-3)  # beyond: linear in tokens
    assert float(curve.at(8.0)) == pytest.approx(1e-4)
    assert MeasuredCurve.from_json(json.loads(json.dumps(curve.to_json()))) == curve
    with pytest.raises(ValueError, match="two or more"):
        MeasuredCurve.from_json({"sizes": [1.0], "seconds": [1.0]})
    # The shipped SGLang H200 kernels: DeepSeek's experts at TP 8 in block-scaled fp8 were
    # measured from 1 token up; decode and prompt steps read the curve.
    kernels = get_engine("sglang").gpus["h200"]
    assert kernels.errors["moe_curve"]["median"] <= 0.05
    key = moe_layout("fp8_block", 7168, 2048, 256, 8, 8, 1)
    measured = kernels.moe_curves[key]
    assert measured.sizes[0] == 1.0
    shape = dict(hidden=7168, inter=2048, experts=256, topk=8, ep=1, moe_tp=8, fmt="fp8_block")
    tokens = np.array([1.0, 64.0, 1024.0, 8192.0])
    times = kernels.moe_time(H200, tokens, **shape)
    formula = replace(kernels, moe_curves={}).moe_time(H200, tokens, **shape)
    assert list(times) == pytest.approx(list(measured.at(tokens)))
    assert 8192.0 in measured.sizes and times[3] < formula[3] / 1.4  # the formula: 1.7x slow
    # A layout nobody measured (SGLang's shared expert fused in: 257 experts, top-9) keeps it.
    fused = dict(shape, experts=257, topk=9)
    assert kernels.moe_time(H200, 8192.0, **fused) == pytest.approx(
        replace(kernels, moe_curves={}).moe_time(H200, 8192.0, **fused)
    )


def test_tensorrt_llm_states_its_batch_and_token_limits_per_attention_dp_rank() -> None:
    arch = get_architecture("deepseek-r1")
    precision = parse_precision("nvfp4", "fp8")
    dp8 = Deployment(architecture=arch, hardware=B200, tp=8, ep=8, attention_dp=8,
                     precision=precision)  # fmt: skip
    _, config = engine_server("tensorrt-llm", dp8)
    assert (config.dp_ranks, config.rank_slots, config.rank_budget) == (8, 2048, 8192)
    _, config = engine_server("tensorrt-llm", dp8, max_batch=4, token_budget=1152)
    assert (config.max_batch, config.token_budget) == (32, 9216)
    _, config = engine_server("vllm", dp8)  # each data-parallel engine core takes the flags
    assert (config.rank_slots, config.rank_budget) == (1024, 8192)
    # SGLang's flags hold for the instance, shared among its ranks.
    _, config = engine_server("sglang", dp8, max_batch=64)
    assert (config.max_batch, config.rank_slots) == (64, 8)
    plain = dp8.model_copy(update={"ep": 1, "attention_dp": 1})
    _, config = engine_server("tensorrt-llm", plain)
    assert (config.dp_ranks, config.max_batch, config.token_budget) == (1, 2048, 8192)


def test_an_engine_launched_with_another_moe_runner_reads_that_runners_kernels() -> None:
    """SGLang on B200 has Triton's fused MoE measured beside its default for bf16 experts
    (FlashInfer's TensorRT-LLM kernels): ``moe_runner`` picks it, by the measured curve where
    the layout was measured (vLLM's Triton fused MoE on Qwen3's experts at MoE TP 8: 0.091 ms
    at 16 tokens); a stack or GPU without the runner refuses it in one line."""
    sglang = get_engine("sglang")
    kernels = sglang.gpus["b200"]
    assert "triton" in kernels.moe_runners and sglang.gpus["h200"].moe_runners == ()
    shape = dict(hidden=4096, inter=1536, experts=128, topk=8, ep=1, moe_tp=8, fmt="bf16")
    default = float(kernels.moe_time(B200, 16, **shape))
    triton = float(kernels.moe_time(B200, 16, runner="triton", **shape))
    assert triton == pytest.approx(0.091e-3, rel=0.02) and triton > 1.1 * default
    # A runner not measured for a format leaves that format's default kernels.
    assert float(kernels.moe_time(B200, 16, **{**shape, "fmt": "fp8_block"}, runner="triton")) == (
        float(kernels.moe_time(B200, 16, **{**shape, "fmt": "fp8_block"}))
    )
    qwen = get_architecture("qwen3-235b-a22b")
    deployment = Deployment(
        architecture=qwen, hardware=B200, tp=8, precision=parse_precision("bf16")
    )
    step = {
        runner: engine_server("sglang", deployment, settings=flags)[0].model.seconds(
            16, 16 * 1500, 0, 0, 0
        )
        for runner, flags in (("default", None), ("triton", {"moe_runner": "triton"}))
    }
    assert float(step["triton"]) > 1.1 * float(step["default"])
    with pytest.raises(
        InputError,
        match=r"^moe_runner 'marlin': sglang on b200 has measured MoE runners 'triton' beside "
        r"its default$",
    ):
        engine_server("sglang", deployment, settings={"moe_runner": "marlin"})
    # Where the runner was not measured for the experts' format, or there are no experts.
    fp8 = deployment.model_copy(update={"precision": parse_precision("fp8")})
    with pytest.raises(InputError, match=r"has it measured for bf16 experts, not fp8$"):
        engine_server("sglang", fp8, settings={"moe_runner": "triton"})
    dense = Deployment(architecture=get_architecture("llama-3.1-8b"), hardware=B200, tp=1,
                       precision=parse_precision("bf16"))  # fmt: skip
    with pytest.raises(InputError, match=r"^moe_runner 'triton': llama-3.1-8b has no experts$"):
        engine_server("sglang", dense, settings={"moe_runner": "triton"})
    hopper = deployment.model_copy(update={"hardware": H200})
    with pytest.raises(InputError, match=r"sglang on h200 has measured MoE runners none beside"):
        engine_server("sglang", hopper, settings={"moe_runner": "triton"})


def test_sglang_sizes_its_budget_and_cuda_graphs_by_the_gpu_and_flags_override() -> None:
    """SGLang's ServerArgs: chunked prefill of 16384 tokens and graphs up to 512 on GPUs
    reporting 160 GiB or more (B200, B300, GB200); 8192 tokens on H100 and H200, graphs up to
    256 below tensor-parallel size 4, else 512. A flag given wins over either."""
    qwen = get_architecture("qwen3-32b")

    def defaults(gpu: str, tp: int) -> tuple[int, int]:
        deployment = Deployment(architecture=qwen, hardware=get_hardware(gpu), tp=tp,
                                precision=parse_precision("bf16"))  # fmt: skip
        model = engine_server("sglang", deployment)[0].model
        assert model.scheduler == get_engine("sglang").step_model(deployment).scheduler
        return model.scheduler.token_budget, model.scheduler.cuda_graph_max_batch

    assert defaults("b200", 1) == defaults("gb200", 8) == (16384, 512)
    assert (defaults("h200", 2), defaults("h200", 4), defaults("h100-sxm", 8)) == (
        (8192, 256), (8192, 512), (8192, 512)
    )  # fmt: skip
    b200 = Deployment(architecture=qwen, hardware=B200, tp=1, precision=parse_precision("bf16"))
    flags = {"token_budget": 8192, "cuda_graph_max_batch": 128}
    server, config = engine_server("sglang", b200, settings=flags)
    assert (server.model.scheduler.cuda_graph_max_batch, config.token_budget) == (128, 8192)
    # The other engines size nothing by the GPU.
    for name in ("vllm", "tensorrt-llm"):
        assert get_engine(name).gpu_defaults == {}
        assert get_engine(name).defaults_for(b200) == get_engine(name).scheduler


@pytest.mark.parametrize(
    ("name", "model", "layout"),
    [("sglang", "gpt-oss-120b", {"tp": 4, "ep": 2, "attention_dp": 4}),
     ("tensorrt-llm", "deepseek-v3", {"tp": 8, "ep": 8}),
     ("vllm", "llama-3.1-8b", {"tp": 2})],
)  # fmt: skip
def test_the_step_times_a_simulation_prices_a_few_at_a_time_are_those_of_one_call(
    name: str, model: str, layout: dict
) -> None:
    """The layers' time per token count that the step model remembers for short stretches
    (``TOKEN_MEMO_STEPS``) is the one it computes for a long array: the same seconds bit for
    bit, asked one by one, in pairs, in any order, and again."""
    from idealized_runtime.cost_model.hardware.engines.step import TOKEN_MEMO_STEPS

    arch = get_architecture(model)
    deployment = Deployment(architecture=arch, hardware=B200, **layout,
                            precision=default_precision(arch))  # fmt: skip
    rng = np.random.default_rng(3)
    steps = 4 * TOKEN_MEMO_STEPS
    decoders = rng.integers(1, 600, steps).astype(float)
    decoders[::5] = 0
    context = decoders * rng.integers(100, 5000, steps)
    prompt = np.where(rng.random(steps) < 0.4, rng.integers(1, 8192, steps), 0).astype(float)
    prompt[decoders == 0] = np.maximum(prompt[decoders == 0], 1)
    attended = prompt * (prompt + 1) / 2
    chunks = (prompt > 0).astype(float)
    whole = (
        get_engine(name).step_model(deployment).seconds(decoders, context, prompt, attended, chunks)
    )
    fresh = get_engine(name).step_model(deployment)
    order = rng.permutation(steps)
    for i in order:
        one = fresh.seconds(decoders[i : i + 1], context[i : i + 1], prompt[i : i + 1],
                            attended[i : i + 1], chunks[i : i + 1])  # fmt: skip
        assert one.tobytes() == whole[i : i + 1].tobytes()
    pairs = fresh.seconds(decoders[:2], context[:2], prompt[:2], attended[:2], chunks[:2])
    assert pairs.tobytes() == whole[:2].tobytes()
