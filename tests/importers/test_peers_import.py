"""Other load generators' result files (guidellm, aiperf, genai-perf, vllm bench serve, llmperf)
imported into our request rows, checked value by value against the fixtures (see
fixtures/README.md for where each came from), and the rows read by fit, convert and summarize."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.fitting.measurements_io import read_measurements
from idealized_runtime.timing.importers.peer_rows import COLUMNS
from idealized_runtime.timing.importers.peers import detect_format, import_results, read_result_file
from tests.servers import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
GUIDELLM_LEVELS = FIXTURES / "guidellm_two_levels.json"
GUIDELLM_ERROR = FIXTURES / "guidellm_with_error.json"
AIPERF = FIXTURES / "aiperf" / "profile_export.jsonl"
AIPERF_ERRORS = FIXTURES / "aiperf_errors" / "profile_export.jsonl"
VLLM = FIXTURES / "vllm_bench_serve_detailed.json"
LLMPERF = FIXTURES / "mistralai-Mistral-7B-Instruct-v0-2_550_32_individual_responses.json"
GENAI_PERF = FIXTURES / "genai_perf_profile_export.json"


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- each format, value by value ---------------------------------------------------------------


def test_guidellm_rows_match_its_per_request_records() -> None:
    report = json.loads(GUIDELLM_LEVELS.read_text())
    frame = import_results([GUIDELLM_LEVELS])
    assert list(frame.columns) == list(COLUMNS)
    expected = [
        (benchmark["config"]["strategy"]["streams"], request)
        for benchmark in report["benchmarks"]
        for request in benchmark["requests"]["successful"]
    ]
    assert len(frame) == len(expected) == 4
    for (_, row), (streams, request) in zip(frame.iterrows(), expected, strict=True):
        assert row["model"] == "tiny-llama"  # from the request body guidellm sent
        assert row["source"] == "guidellm" and row["ok"] and row["error"] is None
        assert row["load"] == f"concurrency={streams}"
        assert row["num_prompt_tokens"] == request["prompt_tokens"]
        assert row["num_output_tokens"] == request["output_tokens"]
        assert row["runtime_s"] == request["request_latency"]
        assert row["ttft_s"] == pytest.approx(request["time_to_first_token_ms"] / 1000)
        assert row["itl_s"] == pytest.approx(request["inter_token_latency_ms"] / 1000)
        o = request["output_tokens"]
        assert row["tpot_s"] == pytest.approx((row["runtime_s"] - row["ttft_s"]) / (o - 1))
        assert row["request_id"] == request["request_id"]
    # Each level is its own run; times count from the file's first request.
    assert frame["run_id"].nunique() == 2
    assert frame["started_at_s"].min() == 0.0
    assert (frame["finished_at_s"] > frame["started_at_s"]).all()


def test_guidellm_errored_request_is_kept_and_marked() -> None:
    frame = import_results([GUIDELLM_ERROR])
    assert len(frame) == 3
    failed = frame[~frame["ok"]]
    assert len(failed) == 1
    row = failed.iloc[0]
    # guidellm echoes no request body for a failed request: the file's model is used.
    assert row["model"] == "tiny-llama"
    assert row["num_prompt_tokens"] == 2100 and row["num_output_tokens"] == 0
    assert math.isnan(row["runtime_s"]) and math.isnan(row["tpot_s"])
    assert "400 Bad Request" in row["error"] and "\n" not in row["error"]
    assert frame["ok"].sum() == 2
    assert len(import_results([GUIDELLM_ERROR], skip_errors=True)) == 2


def test_aiperf_rows_match_its_profile_export() -> None:
    records = [json.loads(line) for line in AIPERF.read_text().splitlines() if line.strip()]
    frame = import_results([AIPERF])
    assert len(frame) == len(records) == 3
    assert import_results([AIPERF.parent]).equals(frame)  # the artifact folder will do
    for (_, row), record in zip(frame.iterrows(), records, strict=True):
        metrics = record["metrics"]
        # Model and load level from profile_export_aiperf.json beside it.
        assert row["model"] == "tiny-llama" and row["load"] == "concurrency=2"
        assert row["source"] == "aiperf" and row["ok"]
        assert row["num_prompt_tokens"] == metrics["input_sequence_length"]["value"]
        assert row["num_output_tokens"] == metrics["output_sequence_length"]["value"]
        assert row["runtime_s"] == pytest.approx(metrics["request_latency"]["value"] / 1000)
        assert row["ttft_s"] == pytest.approx(metrics["time_to_first_token"]["value"] / 1000)
        assert row["itl_s"] == pytest.approx(metrics["inter_token_latency"]["value"] / 1000)
        gaps = [g / 1000 for g in metrics["inter_chunk_latency"]["value"]]
        assert row["inter_token_latencies_s"] == pytest.approx(gaps)
        start = record["metadata"]["request_start_ns"]
        assert row["request_id"] == record["metadata"]["x_request_id"]
        assert row["finished_at_s"] - row["started_at_s"] == pytest.approx(
            (record["metadata"]["request_end_ns"] - start) / 1e9, abs=1e-6
        )


def test_aiperf_failed_requests_keep_their_error() -> None:
    frame = import_results([AIPERF_ERRORS])
    failed = frame[~frame["ok"]]
    assert len(failed) >= 1 and frame["ok"].any()
    assert failed["error"].str.startswith("400: Bad Request: ").all()
    assert "exceed the context of 2048 tokens" in failed["error"].iloc[0]
    assert (failed["num_output_tokens"] == 0).all()
    assert failed["runtime_s"].isna().all() and failed["ttft_s"].isna().all()
    assert frame["model"].unique().tolist() == ["tiny-llama"]


def test_vllm_detailed_result_rows() -> None:
    frame = import_results([VLLM])
    assert frame["model"].tolist() == ["meta-llama/Llama-3.1-8B-Instruct"] * 3
    assert frame["load"].tolist() == ["concurrency=2"] * 3  # request_rate inf, capped at 2
    assert frame["num_prompt_tokens"].tolist() == [128, 256, 512]
    assert frame["num_output_tokens"].tolist() == [4, 8, 0]
    assert frame["ok"].tolist() == [True, True, False]
    assert frame["error"].iloc[2] == "HTTP 400: prompt too long"
    assert frame["runtime_s"].iloc[:2].tolist() == [0.083, 0.15]
    assert frame["ttft_s"].iloc[:2].tolist() == [0.05, 0.08]
    assert frame["itl_s"].iloc[0] == pytest.approx((0.01 + 0.012 + 0.011) / 3)
    assert frame["tpot_s"].iloc[1] == pytest.approx((0.15 - 0.08) / 7)
    assert frame["inter_token_latencies_s"].iloc[0] == [0.01, 0.012, 0.011]
    assert frame["started_at_s"].tolist() == pytest.approx([0.0, 0.02, 0.03])


def test_vllm_older_results_and_appended_results(tmp_path: Path) -> None:
    result = json.loads(VLLM.read_text())
    del result["latencies"], result["start_times"]  # before vllm recorded them
    older = tmp_path / "older.json"
    older.write_text(json.dumps(result))
    frame = import_results([older])
    assert frame["runtime_s"].iloc[0] == pytest.approx(0.05 + 0.033)  # TTFT + sum of ITLs
    # --append-result: one result per line.
    appended = tmp_path / "appended.json"
    second = {**result, "max_concurrency": None, "request_rate": 4.0}
    appended.write_text(json.dumps(result) + "\n" + json.dumps(second) + "\n")
    frame = import_results([appended])
    assert len(frame) == 6 and frame["run_id"].nunique() == 2
    assert frame["load"].tolist()[3:] == ["rate=4.0"] * 3


def test_llmperf_rows_take_model_and_concurrency_from_its_summary(tmp_path: Path) -> None:
    frame = import_results([LLMPERF])
    assert frame["model"].unique().tolist() == ["mistralai/Mistral-7B-Instruct-v0.2"]
    assert frame["load"].unique().tolist() == ["concurrency=4"]
    assert frame["num_output_tokens"].tolist() == [16, 32, 0]
    assert frame["runtime_s"].iloc[:2].tolist() == [1.12, 2.01]
    assert frame["itl_s"].iloc[:2].tolist() == [0.0604, 0.0598]
    assert frame["tpot_s"].iloc[0] == pytest.approx((1.12 - 0.21) / 15)
    assert frame["ok"].tolist() == [True, True, False]
    assert frame["error"].iloc[2] == "500: Internal Server Error"
    # Without the summary beside it the model must be given.
    alone = tmp_path / LLMPERF.name
    shutil.copy(LLMPERF, alone)
    with pytest.raises(InputError, match="names no model: pass --model"):
        import_results([alone])
    assert set(import_results([alone], model="mistral-7b")["model"]) == {"mistral-7b"}


def test_genai_perf_rows_count_tokens_from_the_streamed_usage(tmp_path: Path) -> None:
    frame = import_results([GENAI_PERF])
    assert frame["model"].tolist() == ["llama-3-8b"] * 2
    assert frame["load"].tolist() == ["concurrency=2"] * 2
    assert frame["num_prompt_tokens"].tolist() == [12, 20]
    assert frame["num_output_tokens"].tolist() == [3, 2]
    assert frame["ttft_s"].tolist() == pytest.approx([0.03, 0.03])
    assert frame["runtime_s"].tolist() == pytest.approx([0.061, 0.051])
    assert frame["inter_token_latencies_s"].iloc[0] == pytest.approx([0.01, 0.01])
    document = json.loads(GENAI_PERF.read_text())
    for request in document["experiments"][0]["requests"]:
        request["response_outputs"] = [
            o for o in request["response_outputs"] if "usage" not in o["response"]
        ]
    bare = tmp_path / "profile_export.json"
    bare.write_text(json.dumps(document))
    with pytest.raises(InputError, match="no token counts"):
        import_results([bare])


# --- detection and bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (GUIDELLM_LEVELS, "guidellm"),
        (VLLM, "vllm"),
        (LLMPERF, "llmperf"),
        (GENAI_PERF, "genai-perf"),
    ],
)
def test_formats_are_detected_from_content(path: Path, expected: str) -> None:
    assert detect_format(json.loads(path.read_text())) == expected
    assert {row["source"] for row in read_result_file(path, expected)} == {expected}


def test_bad_files_are_one_line_input_errors(tmp_path: Path) -> None:
    cases = {
        "unknown.json": ('{"hello": 1}', "not a known result file: expected guidellm"),
        "text.json": ("not json at all\n", "not JSON"),
        "empty.json": ("", "empty file"),
        "summary.json": (
            '{"input_config": {}, "request_latency": {"avg": 1}}',
            "import the per-request profile_export.jsonl",
        ),
        "vllm_summary.json": (
            '{"model_id": "m", "request_throughput": 1.0}',
            "--save-result --save-detailed",
        ),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(InputError, match=message) as error:
            import_results([path])
        assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
    with pytest.raises(InputError, match="no such file"):
        import_results([tmp_path / "missing.json"])
    with pytest.raises(InputError, match="is a folder: expected a result file"):
        import_results([tmp_path])
    with pytest.raises(InputError, match=r"not a vllm result file \(it looks like guidellm's\)"):
        import_results([GUIDELLM_LEVELS], "vllm")
    with pytest.raises(InputError, match="unknown format 'k6'"):
        import_results([GUIDELLM_LEVELS], "k6")


# --- the two-step path: import, then fit / convert / summarize ---------------------------------


def test_cli_import_then_fit_skips_failed_requests(tmp_path: Path) -> None:
    requests = tmp_path / "requests.csv"
    result = run_cli("import-results", str(GUIDELLM_ERROR), str(VLLM), "-o", str(requests))
    assert result.returncode == 0, result.stderr
    assert "wrote 6 requests (2 failed, marked ok=false) from guidellm, vllm" in result.stderr
    frame = pd.read_csv(requests)
    assert "inter_token_latencies_s" not in frame.columns  # lists only in .jsonl / .parquet
    assert len(frame) == 6 and frame["ok"].tolist().count(False) == 2
    measurements = read_measurements(requests)
    assert len(measurements) == 4  # failed requests are not timings
    assert {m.model for m in measurements} == {"tiny-llama", "meta-llama/Llama-3.1-8B-Instruct"}


def test_cli_parquet_and_jsonl_outputs_feed_convert_and_summarize(tmp_path: Path) -> None:
    parquet = tmp_path / "requests.parquet"
    assert run_cli("import-results", str(VLLM), "-o", str(parquet)).returncode == 0
    frame = pd.read_parquet(parquet)
    assert list(frame["inter_token_latencies_s"].iloc[0]) == [0.01, 0.012, 0.011]
    assert len(read_measurements(parquet)) == 2
    raw = tmp_path / "requests.jsonl"
    assert run_cli("import-results", str(GUIDELLM_LEVELS), "-o", str(raw)).returncode == 0
    summary = run_cli("summarize", str(raw), "--json")
    assert summary.returncode == 0, summary.stderr
    levels = json.loads(summary.stdout)
    assert [(s["load"], s["requests"], s["error_rate"]) for s in levels] == [
        ("concurrency=1", 2, 0.0),
        ("concurrency=2", 2, 0.0),
    ]


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    output = tmp_path / "out.csv"
    unknown = tmp_path / "unknown.json"
    unknown.write_text("[1, 2]")
    assert "not a known result file" in one_line_error(
        run_cli("import-results", str(unknown), "-o", str(output))
    )
    assert "unknown format 'k6'" in one_line_error(
        run_cli("import-results", str(VLLM), "--format", "k6", "-o", str(output))
    )
    assert "unsupported file type" in one_line_error(
        run_cli("import-results", str(VLLM), "-o", str(tmp_path / "out.txt"))
    )
    assert "no such file" in one_line_error(
        run_cli("import-results", str(tmp_path / "nope.json"), "-o", str(output))
    )
    assert list(tmp_path.iterdir()) == [unknown]


# --- properties ----------------------------------------------------------------------------------

_request = st.tuples(
    st.integers(1, 4096),  # prompt tokens
    st.integers(0, 512),  # output tokens
    st.floats(0.0, 5.0, allow_nan=False),  # TTFT
    st.lists(st.floats(0.0, 0.2, allow_nan=False), max_size=8),  # ITLs
    st.sampled_from(["", "", "", "timeout"]),  # error
)


@settings(max_examples=40, deadline=None)
@given(requests=st.lists(_request, min_size=1, max_size=12))
def test_vllm_rows_keep_every_request_and_its_tokens(requests: list[tuple]) -> None:
    # Any vllm result: one row per request, tokens as given, ok exactly when vllm saw no
    # error and a positive time, and TPOT never negative.
    result = {
        "model_id": "m",
        "max_concurrency": 3,
        "input_lens": [r[0] for r in requests],
        "output_lens": [r[1] for r in requests],
        "ttfts": [r[2] for r in requests],
        "itls": [r[3] for r in requests],
        "errors": [r[4] for r in requests],
    }
    rows = list(_vllm_rows(result))
    assert len(rows) == len(requests)
    for row, (p, o, ttft, itls, error) in zip(rows, requests, strict=True):
        assert (row["num_prompt_tokens"], row["num_output_tokens"]) == (p, o)
        assert row["ok"] == (not error and ttft + sum(itls) > 0)
        if row["ok"]:
            assert row["runtime_s"] == pytest.approx(ttft + sum(itls))
            assert row["tpot_s"] is None or row["tpot_s"] >= 0
        else:
            assert row["runtime_s"] is None and row["error"]


def _vllm_rows(result: dict) -> list[dict]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vllm.json"
        path.write_text(json.dumps(result))
        return read_result_file(path, "vllm")


def test_fit_and_summarize_read_result_files_directly(tmp_path: Path) -> None:
    fit = tmp_path / "fit.json"
    # The fixture's two served requests have a prompt size each, so alpha(p) alone fits them
    # and the fit refuses; the same file with both at one prompt size separates beta.
    result = run_cli("fit", str(VLLM), "-o", str(fit))
    assert result.returncode == 2 and "beta is undetermined" in result.stderr, result.stderr
    assert not fit.exists()
    one_size = json.loads(VLLM.read_text())
    one_size["input_lens"] = [128, 128, 512]
    vllm = tmp_path / "vllm_bench_serve.json"
    vllm.write_text(json.dumps(one_size))
    result = run_cli("fit", str(vllm), "-o", str(fit))
    assert result.returncode == 0, result.stderr
    assert list(json.loads(fit.read_text())["fits"]) == ["meta-llama/Llama-3.1-8B-Instruct"]
    summary = run_cli("summarize", str(AIPERF), str(GUIDELLM_ERROR), "--json")
    assert summary.returncode == 0, summary.stderr
    levels = {(s["model"], s["load"]): s for s in json.loads(summary.stdout)}
    # aiperf's three requests and guidellm's three (one failed) share model and level.
    level = levels[("tiny-llama", "concurrency=2")]
    assert level["requests"] == 6 and level["error_rate"] == pytest.approx(1 / 6)
    assert level["itl_s"]["p50"] is not None  # aiperf records the gaps between chunks
