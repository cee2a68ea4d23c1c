"""`summarize`: percentiles against hand-computed values, throughput windows, SLO goodput edge
cases, the CLI's JSON contract and its one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Slo
from idealized_runtime.timing.summary import load_label, parse_slo, summarize
from tests.servers import cli_command
from tests.timing_client.conftest import run_cli


def request(
    start: float,
    e2e: float | None,
    ttft: float | None = None,
    tokens: int = 11,
    *,
    model: str = "m",
    load: Any = "concurrency=2",
    gaps: list[float] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "model": model,
        "load": load,
        "ok": e2e is not None,
        "runtime_s": e2e,
        "ttft_s": ttft,
        "num_output_tokens": tokens,
        "inter_token_latencies_s": gaps or [],
        "started_at_s": start,
        **extra,
    }


FIVE = [
    request(0, 1.0, 0.1, gaps=[0.01, 0.02]),
    request(0, 2.0, 0.2, gaps=[0.03]),
    request(1, 3.0, 0.3),
    request(2, 4.0, 0.4, gaps=[0.04, 0.05]),
    request(3, 5.0, 0.5),
]


def test_percentiles_and_throughput_match_hand_computed_values() -> None:
    (summary,) = summarize(FIVE)
    assert (summary.model, summary.load, summary.requests) == ("m", "concurrency=2", 5)
    # Window: first start 0, last end 3 + 5 = 8 s.
    assert summary.requests_per_s == pytest.approx(5 / 8)
    assert summary.output_tokens_per_s == pytest.approx(55 / 8)
    # Linear interpolation between order statistics: p90 of 1..5 sits at rank 3.6 -> 4.6.
    assert summary.e2e_s.model_dump() == pytest.approx(
        {"p50": 3.0, "p90": 4.6, "p99": 4.96, "mean": 3.0}
    )
    assert summary.ttft_s.model_dump() == pytest.approx(
        {"p50": 0.3, "p90": 0.46, "p99": 0.496, "mean": 0.3}
    )
    # TPOT = (e2e - ttft) / (11 - 1) = 0.09 * k.
    assert summary.tpot_s.p50 == pytest.approx(0.27)
    assert summary.tpot_s.mean == pytest.approx(0.27)
    # ITL pools every gap: 0.01..0.05.
    assert summary.itl_s.model_dump() == pytest.approx(
        {"p50": 0.03, "p90": 0.046, "p99": 0.0496, "mean": 0.03}
    )
    assert summary.error_rate == 0
    assert summary.goodput_requests_per_s == summary.requests_per_s  # no SLO: every success


def test_failures_count_in_requests_and_error_rate_not_in_throughput() -> None:
    rows = [*FIVE, request(4, None, finished_at_s=10.0), request(5, None)]
    (summary,) = summarize(rows)
    assert summary.requests == 7
    assert summary.error_rate == pytest.approx(2 / 7)
    # The failed request ending at 10 s stretches the window: 5 successes over 10 s.
    assert summary.requests_per_s == pytest.approx(0.5)
    assert summary.e2e_s.p50 == 3.0  # failures have no latency


def test_goodput_slo_edge_cases() -> None:
    rows = [*FIVE, request(4, None, finished_at_s=8.0)]
    window = 8.0
    assert summarize(rows)[0].goodput_requests_per_s == pytest.approx(5 / window)
    # All fail the target.
    assert summarize(rows, Slo(e2e_s=0.5))[0].goodput_requests_per_s == 0
    # e2e <= 3 s: three of five; the error never counts.
    assert summarize(rows, Slo(e2e_s=3.0))[0].goodput_requests_per_s == pytest.approx(3 / window)
    # Every target must hold: ttft <= 0.4 (four) and tpot <= 0.2 (0.09, 0.18: two).
    both = Slo(ttft_s=0.4, tpot_s=0.2)
    assert summarize(rows, both)[0].goodput_requests_per_s == pytest.approx(2 / window)
    # A request without TTFT (not streamed) fails a TTFT target; one output token meets TPOT.
    plain = [request(0, 1.0, None, tokens=1), request(0, 1.0, 0.5, tokens=1)]
    assert summarize(plain, Slo(ttft_s=1.0))[0].goodput_requests_per_s == pytest.approx(1.0)
    assert summarize(plain, Slo(tpot_s=1e-9))[0].goodput_requests_per_s == pytest.approx(2.0)


def test_groups_by_model_and_load_in_load_order_and_dataframes_work() -> None:
    rows = [
        request(0, 1.0, 0.1, model="b", load="rate=8.0"),
        request(0, 1.0, 0.1, model="b", load="rate=2.0"),
        request(0, 1.0, 0.1, model="a", load={"pattern": "concurrency", "concurrency": 16}),
        request(0, 1.0, 0.1, model="a", load={"pattern": "concurrency", "concurrency": 4}),
        request(0, 1.0, 0.1, model="a", load="sweep:throughput"),
        request(0, 1.0, 0.1, model="a", load="sweep:synchronous"),
        request(0, 1.0, 0.1, model="a", load="sweep:rate=3.5"),
    ]
    order = [(s.model, s.load) for s in summarize(rows)]
    assert order == [
        ("a", "sweep:synchronous"),
        ("a", "concurrency=4"),
        ("a", "concurrency=16"),
        ("a", "sweep:rate=3.5"),
        ("a", "sweep:throughput"),
        ("b", "rate=2.0"),
        ("b", "rate=8.0"),
    ]
    frame = pd.DataFrame([*FIVE, request(4, None)])
    assert summarize(frame) == summarize([*FIVE, request(4, None)])


def test_resumed_runs_add_their_windows() -> None:
    # Two runs of one level, each on its own clock starting at 0: 2 s + 3 s.
    rows = [
        request(0, 2.0, 0.1, run_id="first"),
        request(0, 3.0, 0.1, run_id="second"),
        request(1, 1.0, 0.1, run_id="second"),
    ]
    assert summarize(rows)[0].requests_per_s == pytest.approx(3 / 5)


def test_iso_timestamps_are_the_fallback_clock() -> None:
    rows = [
        {"model": "m", "load": "rate=1.0", "ok": True, "runtime_s": 1.0,
         "started_at": "2026-11-23T10:00:00Z", "finished_at": "2026-11-23T10:00:01Z"},
        {"model": "m", "load": "rate=1.0", "ok": True, "runtime_s": 1.0,
         "started_at": "2026-11-23T10:00:03Z", "finished_at": "2026-11-23T10:00:04Z"},
    ]  # fmt: skip
    assert summarize(rows)[0].requests_per_s == pytest.approx(0.5)


def test_load_labels() -> None:
    assert load_label({"pattern": "poisson", "rate": 4}) == "rate=4.0"
    assert load_label("concurrency=8") == "concurrency=8"
    assert load_label(None) == "unlabelled"


@pytest.mark.parametrize(
    "text", ["", "ttft", "ttft=abc", "ttft=-1", "ttft=0", "ttft=nan", "speed=1", "e2e=1,e2e=2"]
)
def test_bad_slo_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError):
        parse_slo(text)


def test_slo_parses_any_subset() -> None:
    assert parse_slo("ttft=0.5, e2e=10") == Slo(ttft_s=0.5, e2e_s=10.0)
    assert parse_slo("TPOT=0.05") == Slo(tpot_s=0.05)


rows_strategy = st.lists(
    st.builds(
        request,
        start=st.floats(0, 100),
        e2e=st.one_of(st.none(), st.floats(0.001, 50)),
        ttft=st.floats(0.0005, 0.001),
        tokens=st.integers(1, 50),
        gaps=st.lists(st.floats(0, 1), max_size=4),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, e2e=st.floats(0.01, 60))
def test_invariants(rows: list[dict[str, Any]], e2e: float) -> None:
    (summary,) = summarize(rows, Slo(e2e_s=e2e))
    (unbounded,) = summarize(rows)
    assert 0 <= summary.error_rate <= 1
    assert summary.goodput_requests_per_s <= unbounded.goodput_requests_per_s + 1e-12
    assert unbounded.goodput_requests_per_s == pytest.approx(unbounded.requests_per_s)
    for stats in (summary.e2e_s, summary.ttft_s, summary.itl_s, summary.tpot_s):
        if stats.p50 is not None:
            assert stats.p50 <= stats.p90 + 1e-12 <= stats.p99 + 2e-12
    assert math.isfinite(summary.output_tokens_per_s)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"model": "cut')
    return path


def test_cli_json_contract_and_output_file(tmp_path: Path) -> None:
    raw = write_jsonl(tmp_path / "raw.jsonl", [*FIVE, request(4, None)])
    out = tmp_path / "sub" / "summary.json"
    result = run_cli(cli_command("summarize", str(raw), "--slo", "e2e=3", "--json", "-o", str(out)))
    assert result.returncode == 0, result.stderr
    (data,) = json.loads(result.stdout)
    assert list(data) == [
        "model", "load", "requests", "requests_per_s", "output_tokens_per_s", "ttft_s", "itl_s",
        "tpot_s", "e2e_s", "error_rate", "goodput_requests_per_s", "ttft_answer_s",
        "prompt_tokens_mean", "cached_prompt_tokens_mean", "output_tokens_mean",
        "reasoning_tokens_mean", "turns", "cost",
    ]  # fmt: skip
    for key in ("ttft_s", "itl_s", "tpot_s", "e2e_s", "ttft_answer_s"):
        assert list(data[key]) == ["p50", "p90", "p99", "mean"]
    # Rows without the newer keys: the answer's TTFT is the TTFT, no turns, no price table.
    assert data["ttft_answer_s"] == data["ttft_s"]
    assert (data["turns"], data["cost"], data["reasoning_tokens_mean"]) == ([], None, None)
    assert data["requests"] == 6 and data["goodput_requests_per_s"] == pytest.approx(3 / 8)
    assert json.loads(out.read_text()) == [data]
    table = run_cli(cli_command("summarize", str(raw)))
    assert table.returncode == 0 and "concurrency=2" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft=fast"], "--slo ttft='fast' is not a number"),
        (["--slo", "p99=1"], "--slo must be"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    raw = write_jsonl(tmp_path / "raw.jsonl", FIVE)
    result = run_cli(cli_command("summarize", str(raw), *args))
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_missing_and_broken_files(tmp_path: Path) -> None:
    missing = run_cli(cli_command("summarize", str(tmp_path / "nope.jsonl")))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    broken = tmp_path / "broken.jsonl"
    broken.write_text('not json\n{"model": "m"}\n')
    result = run_cli(cli_command("summarize", str(broken)))
    assert result.returncode == 2 and "line 1 is not a JSON object" in result.stderr
