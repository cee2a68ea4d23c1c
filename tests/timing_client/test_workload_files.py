"""Conversation files (both layouts, and their one-line errors), price tables, the rows of
reasoning answers without usage, and `summarize`'s per-turn and dollar figures against
hand-computed values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.prices import ProviderPrice, read_price_table
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.conversations import Conversation, Turn, load_workload
from idealized_runtime.timing.grids import GridPoint
from idealized_runtime.timing.load_patterns import TraceRequest
from idealized_runtime.timing.plan import plan_sessions
from idealized_runtime.timing.rows import request_row
from idealized_runtime.timing.summary import summarize
from idealized_runtime.timing.transport import Attempt
from tests.servers import cli_command
from tests.timing_client.conftest import run_cli


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_one_line_and_one_turn_a_line_read_alike(tmp_path: Path) -> None:
    nested = write_lines(tmp_path / "nested.jsonl", [
        {"session_id": "b", "timestamp": 5, "turns": [
            {"input_length": 10, "output_length": 2}, {"input_length": 3, "output_length": 4,
                                                       "delay": 1500}]},
        {"session_id": "a", "arrival_s": 2, "turns": [{"prompt_tokens": 7, "output_tokens": 1}]},
    ])  # fmt: skip
    flat = tmp_path / "flat.csv"
    flat.write_text(
        "session_id,arrival_s,input_length,output_length,delay_s\nb,5,10,2,\nb,,3,4,1.5\na,2,7,1,\n"
    )
    expected = [
        Conversation("a", 0.0, (Turn(7, 1, 0.0),)),
        Conversation("b", 3.0, (Turn(10, 2, 0.0), Turn(3, 4, 1.5))),
    ]
    assert load_workload(nested) == load_workload(flat) == expected
    assert expected[1].requested_prompt_tokens() == [10, 15]  # 10 + 2 + 3
    # Without turns or a session column it is a trace, as before.
    trace = write_lines(tmp_path / "trace.jsonl", [{"arrival_s": 1, "prompt_tokens": 4,
                                                     "output_tokens": 2}])  # fmt: skip
    assert load_workload(trace) == [TraceRequest(0.0, 4, 2)]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"session_id": "a", "turns": []}], "row 1: turns must be a non-empty list"),
        ([{"session_id": "a", "turns": [{"input_length": 3}]}], "missing num_output_tokens"),
        ([{"session_id": "a", "turns": [{"input_length": 0, "output_length": 1}]}],
         "num_prompt_tokens must be an integer from 1"),
        ([{"session_id": "a", "turns": [{"input_length": 2, "output_length": 1,
                                         "delay": -5}]}], "non-negative number of seconds"),
        ([{"session_id": "a", "turns": [{"input_length": 2, "output_length": 1,
                                         "delay_s": 90000}]}], "over a day"),
        ([{"session_id": "a", "turns": [{"input_length": 2, "output_length": 1}]},
          {"session_id": "a", "turns": [{"input_length": 2, "output_length": 1}]}],
         "session 'a' is listed twice"),
        ([{"session_id": "a", "turns": [{"input_length": 2, "output_length": 1}]},
          {"session_id": "b", "input_length": 2, "output_length": 1}], "row 2: mixes"),
        ([{"session_id": "a", "input_length": 2, "output_length": 1},
          {"session_id": "b", "input_length": 2, "output_length": 1},
          {"session_id": "a", "input_length": 2, "output_length": 1}], "not consecutive"),
        ([{"session_id": "a", "input_length": 2, "output_length": 1},
          {"session_id": "a", "input_length": 2, "output_length": 1, "arrival_s": 3}],
         "row 2: a later turn of session 'a' has an arrival time"),
        ([{"session_id": "a", "input_length": 2, "output_length": 1},
          {"input_length": 2, "output_length": 1}], "row 2: missing session_id"),
    ],
)  # fmt: skip
def test_bad_conversations_are_one_line_naming_the_row(
    tmp_path: Path, records: list[dict[str, Any]], message: str
) -> None:
    path = write_lines(tmp_path / "bad.jsonl", records)
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as error:
        load_workload(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_turn_is_done_when_its_key_is_in_the_output() -> None:
    conversation = Conversation("a", 0.0, (Turn(10, 2), Turn(3, 4), Turn(5, 1)))
    config = MeasureConfig(base_url="http://x/v1", model="m", grid=[], conversations=[conversation])
    done = {("m", "completions", 10, 2, 0, "sessions"), ("m", "completions", 24, 1, 0, "sessions")}
    (job,), already = plan_sessions(config, done)
    assert (job.done_turns, already, job.turns_to_send) == (frozenset({0, 2}), 2, 1)
    everything = done | {("m", "completions", 15, 4, 0, "sessions")}
    assert plan_sessions(config, everything) == ([], 3)


def test_reasoning_without_usage_counts_the_streamed_chunks() -> None:
    config = MeasureConfig(base_url="http://x/v1", model="m", grid=[], endpoint="chat")
    result = Attempt(
        ok=True, status=200, runtime_s=1.0, ttft_s=0.1, ttft_answer_s=0.5, num_chunks=9,
        reasoning_chunks=5, answer_chunks=3, reasoning_seen=True,
    )  # fmt: skip
    row = request_row(config, GridPoint(4, 16), 0, result, attempts=1, waits=[],
                      started_at_s=0.0, finished_at_s=1.0, prompt_source="tokenizer",
                      dropped_fields=[], run_id="r")  # fmt: skip
    assert (row["num_output_tokens"], row["reasoning_tokens"]) == (8, 5)
    assert row["usage_mismatch"] is False  # no usage: nothing to compare with
    assert (row["session"], row["turn"], row["cached_prompt_tokens"]) == (None, None, None)
    reported = Attempt(ok=True, status=200, runtime_s=1.0, num_chunks=9, reasoning_chunks=5,
                       usage={"prompt_tokens": 4, "completion_tokens": 16,
                              "completion_tokens_details": {"reasoning_tokens": 11},
                              "prompt_tokens_details": {"cached_tokens": 2}})  # fmt: skip
    row = request_row(config, GridPoint(4, 16), 0, reported, attempts=1, waits=[],
                      started_at_s=0.0, finished_at_s=1.0, prompt_source="tokenizer",
                      dropped_fields=[], run_id="r")  # fmt: skip
    assert (row["num_output_tokens"], row["reasoning_tokens"], row["cached_prompt_tokens"]) == (
        16, 11, 2,
    )  # fmt: skip


PRICES = """
prices:
- {provider: p1, model: m, architecture: qwen3-8b, input_usd_per_mtok: 2,
   output_usd_per_mtok: 10, cached_input_usd_per_mtok: 0.5}
- {provider: p2, model: other, input_usd_per_mtok: 1, output_usd_per_mtok: 1}
"""


def turn_row(turn: int, prompt: int, cached: int, output: int, ttft: float, **extra: Any) -> dict:
    return {
        "model": "m", "load": "sessions", "ok": True, "runtime_s": 1.0, "ttft_s": ttft,
        "num_prompt_tokens": prompt, "cached_prompt_tokens": cached, "num_output_tokens": output,
        "started_at_s": float(turn), "turn": turn, "session": "s", **extra,
    }  # fmt: skip


ROWS = [
    turn_row(0, 100, 0, 10, 0.2, reasoning_tokens=4, ttft_answer_s=0.5),
    turn_row(1, 200, 100, 30, 0.1, reasoning_tokens=6, ttft_answer_s=0.3),
    turn_row(0, 300, 0, 20, 0.4, reasoning_tokens=8, ttft_answer_s=0.9),
]


def test_per_turn_figures_and_dollars_match_hand_computed_values(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    table = read_price_table(prices)
    seen: list[list[tuple[float, float]]] = []

    def idealized(price: ProviderPrice, shapes: list[tuple[float, float]]):
        seen.append(shapes)
        return [0.001 * len(shapes)] * len(shapes), f"{price.architecture} on a GPU"

    (level,) = summarize(ROWS, prices=table, idealized=idealized)
    assert level.prompt_tokens_mean == 200 and level.reasoning_tokens_mean == 6
    first, second = level.turns
    assert (first.turn, first.requests, first.prompt_tokens_mean) == (0, 2, 200)
    assert first.cached_prompt_tokens_mean == 0 and second.cached_prompt_tokens_mean == 100
    assert first.ttft_answer_s.mean == pytest.approx(0.7)
    assert first.ttft_s.mean == pytest.approx(0.3)
    assert second.reasoning_tokens_mean == 6
    # Dollars: (uncached x 2 + cached x 0.5 + output x 10) / 1e6 per request.
    usd = [(100 * 2 + 10 * 10) / 1e6, (100 * 2 + 100 * 0.5 + 30 * 10) / 1e6,
           (300 * 2 + 20 * 10) / 1e6]  # fmt: skip
    cost = level.cost
    assert cost is not None and cost.price == "p1/m"
    assert cost.usd_per_request == pytest.approx(sum(usd) / 3)
    assert cost.usd_per_million_tokens == pytest.approx(sum(usd) / 660 * 1e6)
    assert cost.usd_per_million_output_tokens == pytest.approx(sum(usd) / 60 * 1e6)
    assert seen == [[(100, 10), (200, 30), (300, 20)]]
    assert cost.idealized_usd_per_request == pytest.approx(0.003)
    assert cost.idealized_usd_per_million_output_tokens == pytest.approx(0.009 / 60 * 1e6)
    assert cost.idealized_basis == "qwen3-8b on a GPU"
    # A model the table does not price has no cost.
    (unpriced,) = summarize([{**row, "model": "x"} for row in ROWS], prices=table)
    assert unpriced.cost is None


def test_summarize_prices_on_the_command_line(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    raw = write_lines(tmp_path / "raw.jsonl", ROWS)
    result = run_cli(cli_command("summarize", str(raw), "--prices", str(prices), "--json"))
    assert result.returncode == 0, result.stderr
    (data,) = json.loads(result.stdout)
    assert data["cost"]["price"] == "p1/m"
    assert data["cost"]["idealized_basis"] == "qwen3-8b on h100-sxm, pytorch-compiled, batch 1"
    assert data["cost"]["idealized_usd_per_request"] > 0
    table = run_cli(cli_command("summarize", str(raw), "--prices", str(prices)))
    assert "dollars at the price table's prices" in table.stdout and "per turn" in table.stdout


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ("prices: 3", ".yaml", "expected a list of prices"),
        ("- {provider: a, model: m, input_usd_per_mtok: 1}", ".yaml",
         "row 1, column 'output_usd_per_mtok': must be dollars per 1M tokens"),
        ("- {model: m, input_usd_per_mtok: 1, output_usd_per_mtok: 2}", ".yaml",
         "row 1: missing provider"),
        ("provider,model,input_usd_per_mtok,output_usd_per_mtok\na,m,-1,2\n", ".csv",
         "column 'input_usd_per_mtok'"),
        ("provider,model,input_usd_per_mtok,output_usd_per_mtok\na,m,1,2\na,m,1,2\n", ".csv",
         "a/m is listed twice"),
        ("", ".csv", "no entries"),
    ],
)  # fmt: skip
def test_bad_price_tables_are_one_line(
    tmp_path: Path, text: str, suffix: str, message: str
) -> None:
    path = tmp_path / f"prices{suffix}"
    path.write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        read_price_table(path)
    raw = write_lines(tmp_path / "raw.jsonl", ROWS)
    result = run_cli(cli_command("summarize", str(raw), "--prices", str(path)))
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_one_bare_model_name_of_two_providers_asks_for_a_label(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text("provider,model,input_usd_per_mtok,output_usd_per_mtok\na,m,1,2\nb,m,1,3\n")
    table = read_price_table(path)
    assert table.for_model("b/m") == table.prices[1]
    with pytest.raises(InputError, match=r"2 prices for model 'm' \(a, b\): label the rows"):
        table.for_model("m")
