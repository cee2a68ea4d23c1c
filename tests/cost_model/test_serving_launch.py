"""The launch flags ``benchmarks/serving_vs_published.py`` gives InferenceX's runs: the
scripts' values per engine, GPU and era, and TensorRT-LLM's attention-DP balance."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

BENCHMARK: dict[str, Any] = runpy.run_path(
    str(Path(__file__).parents[2] / "benchmarks" / "serving_vs_published.py")
)
Point = BENCHMARK["Point"]


def _point(engine: str, gpu: str, weights: str, **kw: Any) -> Any:
    fields = dict(
        engine=engine, gpu=gpu, model="deepseek-r1", weights=weights, tp=8, ep=1,
        attention_dp=False, speculative="", prompt_tokens=1024, output_tokens=1024,
        concurrency=64, source_id="inferencex-run-1",
    )  # fmt: skip
    return Point(**(fields | kw))


def test_sglang_mtp_on_blackwell_runs_512_requests_in_16k_chunks() -> None:
    launch = BENCHMARK["launch_settings"]
    for weights in ("fp8-block", "nvfp4"):
        settings = launch(_point("sglang", "b200", weights, speculative="mtp")).settings
        assert settings["max_running"] == settings["cuda_graph_max_batch"] == 512
        assert (settings["token_budget"], settings["memory_fraction"]) == (16384, 0.82)
    # Without MTP the scripts keep their own figures; H200's MTP script its 256/512.
    assert launch(_point("sglang", "b200", "fp8-block")).settings["max_running"] == 128
    h200 = _point("sglang", "h200", "fp8-block", speculative="mtp", prompt_tokens=8192)
    assert launch(h200).settings["max_running"] == 256


def test_sglang_fp8_tp4_polls_every_ten_steps() -> None:
    launch = BENCHMARK["launch_settings"]
    tp4 = _point("sglang", "b200", "fp8-block", tp=4, prompt_tokens=8192, concurrency=32)
    assert launch(tp4).settings["recv_interval"] == 10
    assert launch(_point("sglang", "b200", "fp8-block")).settings["recv_interval"] == 30


def test_tensorrt_llm_attention_dp_balances_its_ranks_with_a_60_step_timeout() -> None:
    launch = BENCHMARK["launch_settings"]
    point = _point("tensorrt-llm", "b200", "nvfp4", ep=8, attention_dp=True, concurrency=128)
    assert launch(point).settings["balance_timeout_steps"] == 60
    # The scripts' max_batch_size (CONC / TP) and max_num_tokens hold per rank, as the engine
    # counts them: (1 draft + 1) x 32 sequences + the 1024-token prompt + 64, in 64s.
    mtp = _point("tensorrt-llm", "b200", "nvfp4", ep=8, attention_dp=True, concurrency=256,
                 speculative="mtp")  # fmt: skip
    settings = launch(mtp).settings
    assert (settings["max_running"], settings["token_budget"]) == (32, 1152)
    plain = launch(_point("tensorrt-llm", "b200", "nvfp4")).settings
    assert "balance_timeout_steps" not in plain


def test_tensorrt_llm_runs_take_the_settings_of_their_date() -> None:
    launch = BENCHMARK["launch_settings"]
    # Runs of 2025-12-10 and 2026-05-18.
    december, may = "inferencex-run-20082986826", "inferencex-run-26016874169"

    def settings(weights: str, source_id: str, **kw: Any) -> dict:
        return launch(_point("tensorrt-llm", "b200", weights, source_id=source_id, **kw)).settings

    # max_num_tokens: the concurrency, the prompt and 64 (in 64s), floored at 8192 from 2026-01-21.
    assert settings("fp8-block", december)["token_budget"] == 1024 + 64 + 64
    assert settings("fp8-block", may)["token_budget"] == 8192
    # fp8: 256 graph batches and 0.8 of the memory, later one per client (an eighth at 1k/8k
    # from 256 clients, with 0.7); fp4: 512, later one per client (a quarter with attention DP).
    early = settings("fp8-block", december)
    assert (early["cuda_graph_max_batch"], early["memory_fraction"]) == (256, 0.8)
    assert settings("fp8-block", may)["cuda_graph_max_batch"] == 64
    long_output = settings("fp8-block", may, output_tokens=8192, concurrency=256)
    assert (long_output["cuda_graph_max_batch"], long_output["memory_fraction"]) == (32, 0.7)
    assert settings("nvfp4", december)["cuda_graph_max_batch"] == 512
    assert settings("nvfp4", may, ep=8, attention_dp=True)["cuda_graph_max_batch"] == 16
    # H200's script kept its figures; a run not in the table takes the latest scripts.
    h200 = launch(_point("tensorrt-llm", "h200", "fp8-block", source_id=december)).settings
    assert (h200["cuda_graph_max_batch"], h200["memory_fraction"]) == (128, 0.75)
    assert settings("fp8-block", "inferencex-run-1")["token_budget"] == 8192


def test_dataset_runs_without_per_request_lengths_are_named_not_dropped() -> None:
    from idealized_runtime.core.published import load_published

    left = BENCHMARK["unsimulated"](load_published())
    assert left["mlperf-inference-v4.1 (h100-sxm): per-request prompt and output lengths not "
                "stated"] == 1  # fmt: skip
    assert sum(n for k, n in left.items() if k.startswith("sglang-vs-vllm060-readme")) == 20
    assert not any(k.startswith("inferencex-") for k in left)


def _offline(**kw: Any) -> Any:
    fields = dict(
        engine="tensorrt-llm", gpu="h200", model="llama-3.1-8b", weights="fp8", tp=1, ep=1,
        attention_dp=False, speculative="", prompt_tokens=20000, output_tokens=2000,
        concurrency=BENCHMARK["OFFLINE"], source_id="trtllm-perf-overview-v1.0", requests=1000,
    )  # fmt: skip
    return Point(**(fields | kw))


def test_trtllm_bench_sizes_its_engine_from_the_kv_cache_and_the_lengths() -> None:
    """trtllm-bench's own rule, by hand for Llama-3.1-8B fp8 on one H200 (143,771 MiB =
    140.40 GiB; 8.03 G weights of 1 byte = 7.48 GiB; 0.95 of the rest = 126.3 GiB of fp8 KV at
    64 KiB per token = 2.07 M tokens)."""
    long = BENCHMARK["launch_settings"](_offline())
    # 2.07 M / 22,000 = 94 requests -> batch 96 (multiples of 32); 94 x (1 + 10) = 1034
    # tokens -> the 2048 floor; prompts chunked, the KV cache in fp8.
    assert (long.settings["max_running"], long.settings["token_budget"]) == (96, 2048)
    assert long.settings["chunked_prefill"] and long.kv_cache == "fp8"
    short = BENCHMARK["launch_settings"](_offline(prompt_tokens=128, output_tokens=128))
    # 2.07 M / 256 = 8083 requests, capped at 4096; 4096 x 2 = 8192 tokens.
    assert (short.settings["max_running"], short.settings["token_budget"]) == (4096, 8192)


def test_vllm_bench_throughput_runs_bf16_at_the_offline_defaults_and_refuses_torchao() -> None:
    import pytest

    from idealized_runtime.core.errors import InputError

    vllm = dict(engine="vllm", gpu="b200", source_id="torchao-quant-readme-2026-01",
                prompt_tokens=4096, output_tokens=32, requests=32)  # fmt: skip
    launch = BENCHMARK["launch_settings"](_offline(weights="bf16", **vllm))
    assert launch.settings == {"token_budget": 16384} and launch.kv_cache == "bf16"
    with pytest.raises(InputError, match="torchao's own kernels"):
        BENCHMARK["launch_settings"](_offline(weights="nvfp4", **vllm))


def test_total_throughput_rows_compare_as_output_tokens_per_gpu() -> None:
    from idealized_runtime.core.published import load_published

    points = BENCHMARK["points_of"](load_published())
    found = [
        figures for p, figures in points.items()
        if p.source_id == "torchao-quant-readme-2026-01" and p.gpu == "b200"
        and p.weights == "bf16" and p.prompt_tokens == 4096
    ]  # fmt: skip
    # 59,099.9 total tokens/s of 32 x (4096 + 32) tokens: 32 of every 4128 are output.
    assert len(found) == 1
    assert abs(found[0]["output_throughput_tokens_per_s_per_gpu"] - 59099.9 * 32 / 4128) < 1e-9


def test_an_offline_run_is_timed_whole_from_the_start_to_the_last_end() -> None:
    from idealized_runtime.cost_model.serving.engines import engine_server
    from idealized_runtime.cost_model.serving.step_time import StepWork

    point = _offline(engine="vllm", gpu="b200", weights="bf16", prompt_tokens=32,
                     output_tokens=2048, requests=128,
                     source_id="torchao-quant-readme-2026-01")  # fmt: skip
    launch = BENCHMARK["launch_settings"](point)
    step_time, config = engine_server(
        "vllm", BENCHMARK["deployment_of"](point, launch), settings=launch.settings
    )
    throughput = BENCHMARK["offline_throughput"](point, step_time, config)
    # 128 sequences decode together: the run takes 2047 decode steps at least as long as
    # the first one's (the shortest contexts) and at most as long as the last one's, plus the
    # prompt step.
    first = float(step_time.seconds(StepWork.of([33] * 128, []))[0])
    last = float(step_time.seconds(StepWork.of([2079] * 128, []))[0])
    prompts = float(step_time.seconds(StepWork.of([], [(32, 0)] * 128))[0])
    assert 128 * 2048 / (2047 * last + prompts) <= throughput <= 128 * 2048 / (2047 * first)


def test_sglang_cookbook_runs_take_its_clients_lengths_and_request_counts() -> None:
    launch = BENCHMARK["launch_settings"]
    source = "sglang-cookbook-qwen3-235b-a22b"
    one = launch(_point("sglang", "b200", "bf16", model="qwen3-235b-a22b", concurrency=1,
                        source_id=source))  # fmt: skip
    many = launch(_point("sglang", "b200", "bf16", model="qwen3-235b-a22b", source_id=source))
    assert (one.length_range, one.requests, many.requests) == (0.0, 10, 320)
    # The engine's defaults, but SGLang 0.5.6's MoE runner for bf16 experts on Blackwell
    # (Triton; the stack's default is the FlashInfer TensorRT-LLM kernels 0.5.14 runs).
    assert one.settings == {"moe_runner": "triton"}
    deepseek = _point("sglang", "b200", "fp8-block", source_id="sglang-cookbook-deepseek-r1")
    hopper = _point("sglang", "h200", "bf16", model="qwen3-235b-a22b", source_id=source)
    assert launch(deepseek).settings == launch(hopper).settings == {}
    inferencex = launch(_point("sglang", "b200", "fp8-block"))
    assert (inferencex.length_range, inferencex.requests) == (0.8, 0)  # 80-100%, ten per client


def test_inferencex_runs_without_mapped_launch_flags_are_refused_in_one_line() -> None:
    from idealized_runtime.core.errors import InputError

    for engine, model in (("vllm", "deepseek-r1"), ("sglang", "gpt-oss-120b")):
        with pytest.raises(InputError, match=f"launch flags for {model} not mapped"):
            BENCHMARK["launch_settings"](_point(engine, "b200", "mxfp4", model=model))


def test_inferencex_gpt_oss_runs_take_their_scripts_flags() -> None:
    """gptoss_fp4_*.sh: vLLM with async scheduling, 8192 batched tokens, --max-num-seqs 512
    and MXFP8 activations into the experts with an fp8 cache on B200, one sequence per client
    and the bf16 cache on Hopper; TensorRT-LLM with 512 sequences and 20000 tokens per rank,
    graphs up to the clients, an fp8 cache in 0.85 of the free memory."""
    launch = BENCHMARK["launch_settings"]
    deployment = BENCHMARK["deployment_of"]
    b200 = _point("vllm", "b200", "mxfp4", model="gpt-oss-120b", tp=1, concurrency=32)
    chosen = launch(b200)
    assert chosen.settings["max_running"] == 512 and chosen.settings["schedule_ahead_steps"] == 1
    precision = deployment(b200, chosen).precision
    assert (precision.kv_cache, precision.activations, precision.scope) == ("fp8", "fp8", "experts")
    h200 = _point("vllm", "h200", "mxfp4", model="gpt-oss-120b", tp=2, concurrency=16)
    chosen = launch(h200)
    assert chosen.settings["max_running"] == 16 and chosen.settings["token_budget"] == 8192
    precision = deployment(h200, chosen).precision
    assert (precision.kv_cache, precision.activations) == ("bf16", "bf16")
    trt = launch(_point("tensorrt-llm", "b200", "mxfp4", model="gpt-oss-120b", tp=2,
                        attention_dp=True, concurrency=64))  # fmt: skip
    assert (trt.settings["max_running"], trt.settings["token_budget"]) == (512, 20000)
    assert trt.settings["cuda_graph_max_batch"] == 64 and trt.kv_cache == "fp8"
    assert trt.settings["balance_timeout_steps"] == 50
