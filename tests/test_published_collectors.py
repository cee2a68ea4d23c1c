"""The scripts that collect published serving figures (benchmarks/collect_inferencex.py,
benchmarks/collect_serving_tables.py) map their sources to rows that the published table
accepts: the right model, checkpoint, weights, layout, lengths and units, one source per run."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from idealized_runtime.core.published import PublishedRow, PublishedSource

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
INFERENCEX = runpy.run_path(str(BENCHMARKS / "collect_inferencex.py"), run_name="collector")
TABLES = runpy.run_path(str(BENCHMARKS / "collect_serving_tables.py"), run_name="collector")
DISAGGREGATED = runpy.run_path(
    str(BENCHMARKS / "collect_inferencex_disaggregated.py"), run_name="collector"
)
COLUMNS = [*PublishedRow.model_fields]
FIXTURES = "packages/app/cypress/fixtures/api"


def _point(**changes: object) -> dict:
    point = {
        "hardware": "b200", "framework": "sglang", "model": "dsr1", "precision": "fp8",
        "spec_method": "none", "disagg": False, "is_multinode": False, "decode_tp": 8,
        "decode_ep": 1, "decode_dp_attention": False, "isl": 1024, "osl": 1024, "conc": 64,
        "image": "lmsysorg/sglang:v0.5.9-cu130", "date": "2026-02-27",
        "run_url": "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/123/attempts/1",
        "metrics": {"median_ttft": 0.25, "median_tpot": 0.02, "output_tput_per_gpu": 400.0,
                    "tput_per_gpu": 800.0},
    }  # fmt: skip
    point.update(changes)
    return point


def _collect(fixtures: list[tuple[str, list[dict]]]) -> tuple[list[dict], list[dict]]:
    return INFERENCEX["rows_of"](
        fixtures, COLUMNS, repository="o/app", commit="a" * 40, retrieved="2026-11-27"
    )


def test_inferencex_points_become_validated_rows_with_one_source_per_run() -> None:
    latest = [_point()]
    history = [
        _point(image=None),  # the same run and configuration: taken once, from the first
        _point(image=None, conc=4),  # the run's image from the other fixture
        _point(image=None, conc=8, run_url=_point()["run_url"].replace("123", "99")),
    ]
    rows, sources = _collect([(f"{FIXTURES}/benchmarks.json", latest),
                              (f"{FIXTURES}/benchmarks-history.json", history)])  # fmt: skip
    assert len(rows) == 3 * 4
    parsed = [PublishedRow(**{k: v for k, v in r.items() if v != ""}) for r in rows]
    assert {(r.concurrency, r.engine_version) for r in parsed} == {
        (64, "v0.5.9-cu130"), (4, "v0.5.9-cu130"), (8, None)
    }  # fmt: skip
    assert {s["source_id"]: s["path"] for s in sources} == {
        "inferencex-run-123": f"{FIXTURES}/benchmarks.json",
        "inferencex-run-99": f"{FIXTURES}/benchmarks-history.json",
    }
    for source in sources:
        PublishedSource(**{k: v for k, v in source.items() if v != ""})
    ttft = next(r for r in parsed if r.concurrency == 64 and r.metric == "ttft_s")
    assert (ttft.value, ttft.statistic, ttft.weights, ttft.model) == (
        0.25, "median", "fp8-block", "deepseek-r1"
    )  # fmt: skip
    assert (ttft.gpu, ttft.gpu_count, ttft.num_requests, ttft.attention_dp) == (
        "b200", 8, 640, False
    )  # fmt: skip
    assert "engine image not stated" in next(r.notes for r in parsed if r.concurrency == 8)


@pytest.mark.parametrize(
    ("changes", "model", "weights", "checkpoint"),
    [
        ({"model": "gptoss", "precision": "fp4", "framework": "vllm", "decode_tp": 1},
         "gpt-oss-120b", "mxfp4", "openai/gpt-oss-120b"),
        ({"model": "llama70b", "precision": "fp8", "framework": "trt", "decode_tp": 2},
         "llama-3.3-70b", "fp8", "nvidia/Llama-3.3-70B-Instruct-FP8"),
        ({"model": "dsr1", "precision": "fp4", "decode_ep": 8, "decode_dp_attention": True},
         "deepseek-r1", "nvfp4", "nvidia/DeepSeek-R1-0528-FP4"),
    ],
)  # fmt: skip
def test_each_inferencex_model_maps_to_its_catalog_name_and_checkpoint(
    changes: dict, model: str, weights: str, checkpoint: str
) -> None:
    rows, _ = _collect([("benchmarks.json", [_point(**changes)])])
    row = PublishedRow(**{k: v for k, v in rows[0].items() if v != ""})
    assert (row.model, row.weights, row.model_hf_id) == (model, weights, checkpoint)
    assert row.tensor_parallel_size == row.gpu_count == changes.get("decode_tp", 8)
    assert row.expert_parallel_size == changes.get("decode_ep", 1)
    assert row.attention_dp is changes.get("decode_dp_attention", False)


@pytest.mark.parametrize(
    "changes",
    [{"disagg": True}, {"is_multinode": True}, {"hardware": "mi355x"}, {"model": "qwen3.5"},
     {"framework": "atom"}, {"model": "gptoss", "precision": "fp8"}],
)  # fmt: skip
def test_inferencex_points_outside_the_table_are_left_out(changes: dict) -> None:
    assert _collect([("benchmarks.json", [_point(**changes)])]) == ([], [])


def test_transcribed_tables_are_validated_rows_in_seconds() -> None:
    for table in TABLES["TABLES"]:
        rows = TABLES["rows_of"](table, COLUMNS)
        assert len(rows) == len(table.rows) * len(table.columns)
        parsed = [PublishedRow(**{k: v for k, v in r.items() if v != ""}) for r in rows]
        assert len({r.row_id for r in parsed}) == len(parsed)
        PublishedSource(**{k: v for k, v in table.source.items() if v != ""})
    nim = TABLES["rows_of"](TABLES["TABLES"][0], COLUMNS)
    first = {r["metric"]: float(r["value"]) for r in nim if r["concurrency"] == "1"}
    assert first == {"ttft_s": 0.40677, "time_per_output_token_s": 0.01858,
                     "output_throughput_tokens_per_s": 51.67}  # fmt: skip


COOKBOOK = runpy.run_path(str(BENCHMARKS / "collect_sglang_cookbook.py"), run_name="collector")
PAGE = """
- Hardware: NVIDIA B200 GPU (8x)

```shell
python -m sglang.launch_server \\
  --model Qwen/Qwen3-235B-A22B-Instruct-2507 \\
  --tp 8
```

```shell
python3 -m sglang.bench_serving \\
  --backend sglang \\
  --dataset-name random \\
  --random-input-len 1000 \\
  --random-output-len 8000 \\
  --num-prompts 320 \\
  --max-concurrency 64
```

```
============ Serving Benchmark Result ============
Max request concurrency:                 64
Successful requests:                     320
Total input tokens:                      158939
Total generated tokens:                  1300705
Output token throughput (tok/s):         2387.34
Total token throughput (tok/s):          2679.06
Median TTFT (ms):                        129.11
Median TPOT (ms):                        24.07
Median ITL (ms):                         23.07
==================================================
```

```shell
python3 -m sglang.bench_serving --backend sglang --num-prompt 100 --max-concurrency 1
```

```
============ Serving Benchmark Result ============
Max request concurrency:                 1
Successful requests:                     100
Median TTFT (ms):                        31.79
==================================================
```
"""


def test_cookbook_results_pair_with_their_commands_and_sharegpt_runs_are_left_out() -> None:
    page = COOKBOOK["PAGES"][0]
    rows = COOKBOOK["rows_of"](page, PAGE, COLUMNS)
    parsed = {r["metric"]: PublishedRow(**{k: v for k, v in r.items() if v != ""}) for r in rows}
    assert set(parsed) == {
        "ttft_s", "time_per_output_token_s", "inter_token_latency_s",
        "output_throughput_tokens_per_s", "total_throughput_tokens_per_s",
    }  # fmt: skip
    assert parsed["inter_token_latency_s"].value == pytest.approx(0.02307)
    ttft = parsed["ttft_s"]
    assert (ttft.value, ttft.statistic, ttft.concurrency, ttft.num_requests) == (
        0.12911, "median", 64, 320
    )  # fmt: skip
    assert (ttft.prompt_tokens, ttft.output_tokens, ttft.tensor_parallel_size) == (1000, 8000, 8)
    assert (ttft.model, ttft.weights, ttft.gpu, ttft.engine) == (
        "qwen3-235b-a22b", "bf16", "b200", "sglang"
    )  # fmt: skip
    assert "497 prompt and 4065 generated tokens per request" in ttft.notes
    source = COOKBOOK["source_of"](page, "b" * 40, "2026-11-27")
    PublishedSource(**{k: v for k, v in source.items() if v != ""})


def test_a_cookbook_result_that_does_not_follow_its_command_is_an_error() -> None:
    with pytest.raises(ValueError, match="does not follow"):
        COOKBOOK["rows_of"](
            COOKBOOK["PAGES"][0],
            PAGE.replace("concurrency:                 64", "concurrency:                 8"),
            COLUMNS,
        )


def test_a_collector_replaces_its_own_sources_rows_in_place() -> None:
    from idealized_runtime.core.published import replace_source_rows

    rows = [{"source_id": s} for s in ("a", "ix-1", "b", "ix-2", "c")]
    new = [{"source_id": "ix-3"}]
    ids = [r["source_id"] for r in replace_source_rows(rows, new, ["ix-"])]
    assert ids == ["a", "ix-3", "b", "c"]
    assert [r["source_id"] for r in replace_source_rows(rows[:1], new, ["ix-"])] == ["a", "ix-3"]


def test_an_inferencex_run_artifact_becomes_rows_of_its_run_and_date() -> None:
    """A run's agg_bmk.json: its records as the dashboard's points (the runner "b200-trt" is a
    B200, dp_attention a string), the run and its date given; disaggregated records left out."""
    record = {
        "hw": "b200-trt", "framework": "trt", "infmax_model_prefix": "gptoss",
        "precision": "fp4", "spec_decoding": "none", "disagg": False, "is_multinode": False,
        "tp": 2, "ep": 1, "dp_attention": "true", "isl": 1024, "osl": 8192, "conc": 64,
        "image": "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc2", "median_ttft": 0.1,
        "median_tpot": 0.005, "output_tput_per_gpu": 5000.0, "tput_per_gpu": 5600.0,
        "mean_ttft": 0.2,
    }  # fmt: skip
    disaggregated = {"hw": "gb200", "framework": "dynamo-trt", "disagg": True, "conc": 8}
    points = INFERENCEX["artifact_points"]([record, disaggregated], "777", "2026-01-06")
    assert len(points) == 1
    path = "raw/run_777/agg_bmk.json"
    rows, sources = _collect([(path, points)])
    parsed = [PublishedRow(**{k: v for k, v in r.items() if v != ""}) for r in rows]
    assert len(parsed) == 4
    ttft = next(r for r in parsed if r.metric == "ttft_s")
    assert (ttft.gpu, ttft.engine, ttft.model, ttft.weights) == (
        "b200", "tensorrt-llm", "gpt-oss-120b", "mxfp4"
    )  # fmt: skip
    assert (ttft.value, ttft.statistic, ttft.attention_dp, ttft.engine_version) == (
        0.1, "median", True, "1.2.0rc2"
    )  # fmt: skip
    (source,) = sources
    assert (source["source_id"], source["source_date"], source["path"]) == (
        "inferencex-run-777", "2026-01-06", path
    )  # fmt: skip
    assert source["url"].endswith("/actions/runs/777") and "agg_bmk.json" in source["notes"]
    PublishedSource(**{k: v for k, v in source.items() if v != ""})


def test_an_artifacts_xpyd_records_become_disaggregated_rows_with_both_pools() -> None:
    from idealized_runtime.core.published_disaggregated import DisaggregatedPoint

    record = {
        "hw": "gb200", "framework": "dynamo-trt", "infmax_model_prefix": "gptoss",
        "precision": "fp4", "spec_decoding": "none", "disagg": True, "is_multinode": True,
        "isl": 8192, "osl": 1024, "conc": 384, "prefill_tp": 1, "prefill_ep": 1,
        "prefill_dp_attention": "false", "prefill_num_workers": 2, "decode_tp": 2,
        "decode_ep": 2, "decode_dp_attention": "true", "decode_num_workers": 1,
        "num_prefill_gpu": 2, "num_decode_gpu": 2, "median_ttft": 1.087,
        "median_tpot": 0.0139, "output_tput_per_gpu": 11868.8, "tput_per_gpu": 53431.4,
        "image": "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.7.0.post2",
    }  # fmt: skip
    single_node = {**record, "disagg": False, "tp": 2, "ep": 1, "dp_attention": "false"}
    points = INFERENCEX["artifact_points"]([record, single_node], "5", "2026-01-06",
                                           disaggregated=True)  # fmt: skip
    assert len(points) == 1
    (row,) = DISAGGREGATED["rows_of"](points, "raw/run_5/agg_bmk.json", repository="o/r",
                                      commit="b" * 40, retrieved="2026-11-27")  # fmt: skip
    point = DisaggregatedPoint(**row)
    assert (point.model, point.weights, point.engine, point.gpu) == (
        "gpt-oss-120b", "mxfp4", "tensorrt-llm", "gb200"
    )  # fmt: skip
    assert (point.prefill_workers, point.prefill_gpus, point.decode_workers) == (2, 2, 1)
    assert (point.decode_ep, point.decode_attention_dp, point.prefill_attention_dp) == (
        2, True, False
    )  # fmt: skip
    assert (point.tpot_s_median, point.source_id) == (0.0139, "inferencex-run-5")
