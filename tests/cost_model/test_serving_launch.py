"""The launch flags ``benchmarks/serving_vs_published.py`` gives InferenceX's runs: the
scripts' values per engine, GPU and era, and TensorRT-LLM's attention-DP balance."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

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


def test_dataset_runs_without_per_request_lengths_are_named_not_dropped() -> None:
    from idealized_runtime.core.published import load_published

    left = BENCHMARK["unsimulated"](load_published())
    assert left["mlperf-inference-v4.1 (h100-sxm): per-request prompt and output lengths not "
                "stated"] == 1  # fmt: skip
    assert sum(n for k, n in left.items() if k.startswith("sglang-vs-vllm060-readme")) == 20
    assert not any(k.startswith("inferencex-") for k in left)
