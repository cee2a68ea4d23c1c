"""Reading timings and request logs: formats, skipped rows and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.fitting.measurements_io import (
    parse_measurements,
    read_measurements,
)
from idealized_runtime.cost_model.fitting.request_logs import RequestTable, read_requests

HEADER = "model,num_prompt_tokens,num_output_tokens,runtime_s,notes\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_and_jsonl_measurements(tmp_path) -> None:
    csv_path = write(tmp_path, "m.csv", HEADER + "a,10,2,0.5,x\na,10,1,0.25,\n")
    rows = read_measurements(csv_path)
    assert [(r.model, r.num_prompt_tokens, r.num_output_tokens, r.runtime_s) for r in rows] == [
        ("a", 10, 2, 0.5),
        ("a", 10, 1, 0.25),
    ]
    lines = [
        {
            "model": "a",
            "num_prompt_tokens": 5,
            "num_output_tokens": 3,
            "runtime_s": 1.0,
            "ttft_s": 0.2,
            "batch_size": 1,
        },
        {"model": "a", "ok": False, "error": "timeout"},
        {"model": "a", "num_prompt_tokens": 6, "num_output_tokens": 3, "runtime_s": 1.5},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"model": "a", "num_pro'
    rows = read_measurements(write(tmp_path, "m.jsonl", text))  # partial last line ignored
    assert [r.num_prompt_tokens for r in rows] == [5, 6]
    assert rows[0].ttft_s == 0.2 and rows[1].ttft_s is None


@pytest.mark.parametrize(
    "body, row, column",
    [
        ("a,10,2.5,0.5,\n", 1, "num_output_tokens"),
        ("a,10,2,0.5,\na,-3,2,0.5,\n", 2, "num_prompt_tokens"),
        ("a,10,-1,0.5,\n", 1, "num_output_tokens"),
        ("a,0,2,0.5,\n", 1, "num_prompt_tokens"),
        ("a,10,2,nan,\n", 1, "runtime_s"),
        ("a,10,2,-1,\n", 1, "runtime_s"),
        ("a,10,2,fast,\n", 1, "runtime_s"),
        ("a,10,2,,\n", 1, "runtime_s"),
        (",10,2,1,\n", 1, "model"),
    ],
)
def test_bad_values_name_file_row_and_column(tmp_path, body, row, column) -> None:
    path = write(tmp_path, "bad.csv", HEADER + body)
    with pytest.raises(InputError) as caught:
        read_measurements(path)
    assert (caught.value.path, caught.value.row, caught.value.column) == (str(path), row, column)
    assert f"row {row}" in str(caught.value) and column in str(caught.value)


def test_missing_columns_empty_files_and_types(tmp_path) -> None:
    with pytest.raises(InputError, match=r"missing required column.*runtime_s"):
        read_measurements(write(tmp_path, "a.csv", "model,num_prompt_tokens,num_output_tokens\n"))
    with pytest.raises(InputError, match="empty file"):
        read_measurements(write(tmp_path, "b.csv", ""))
    with pytest.raises(InputError, match="no data rows"):
        read_requests(write(tmp_path, "c.csv", HEADER))
    with pytest.raises(InputError, match="no data rows"):
        read_requests(write(tmp_path, "d.jsonl", "\n"))
    with pytest.raises(InputError, match=r"row 2.*not valid JSON"):
        good = '{"model": "a", "num_prompt_tokens": 1, "num_output_tokens": 1}\n'
        read_requests(write(tmp_path, "e.jsonl", good + "{oops\n"))
    with pytest.raises(InputError, match=r"expected \.csv, \.jsonl or \.parquet"):
        read_requests(write(tmp_path, "f.txt", HEADER))
    with pytest.raises(InputError, match="no such file"):
        read_requests(tmp_path / "missing.csv")


def test_request_table_columns(tmp_path) -> None:
    body = "b,10,2,0.5,x\na,7,1,,y\nb,3,4,1.5,z\n"
    table = read_requests(write(tmp_path, "r.csv", HEADER + body))
    assert table.models == ["a", "b"]
    assert table.model_index.tolist() == [1, 0, 1]
    assert table.num_prompt_tokens.tolist() == [10, 7, 3]
    np.testing.assert_array_equal(table.runtime_s, [0.5, np.nan, 1.5])
    with pytest.raises(InputError) as caught:
        read_requests(write(tmp_path, "s.csv", HEADER + "a,1,1,,\na,1,x,,\n"))
    assert (caught.value.row, caught.value.column) == (2, "num_output_tokens")


def test_request_table_from_columns_validates() -> None:
    table = RequestTable.from_columns(["m", "n", "m"], [1, 2, 3], [4, 5, 6])
    assert table.models == ["m", "n"] and len(table) == 3
    with pytest.raises(InputError, match=r"whole number from 1 to 10000000, got 0$"):
        RequestTable.from_columns(["m"], [0], [1])
    with pytest.raises(InputError, match=r"whole number from 0 to 10000000, got -1$"):
        RequestTable.from_columns(["m"], [1], [-1])
    assert RequestTable.from_columns(["m"], [1], [0]).num_output_tokens.tolist() == [0]


def test_parse_measurements_in_memory_matches_the_file_reader(tmp_path: Path) -> None:
    text = "model,num_prompt_tokens,num_output_tokens,runtime_s\nm,16,4,0.5\nm,32,8,0.9\n"
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert parse_measurements(text) == read_measurements(path)
    with pytest.raises(InputError, match=r"^upload, row 2, column 'runtime_s'"):
        parse_measurements(text.replace("0.9", "-1"))
    with pytest.raises(InputError, match="unsupported format"):
        parse_measurements(text, kind="xml")
