"""DataFrames, Parquet, chunked conversion and prompt-only (0 output token) requests."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idealized_runtime import cost_model
from idealized_runtime.core import catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.fitting.convert import (
    convert_file,
    convert_requests,
    write_conversion,
)
from idealized_runtime.cost_model.fitting.evaluate import predict_alpha, predict_runtime
from idealized_runtime.cost_model.fitting.helm_format import import_helm_table
from idealized_runtime.cost_model.fitting.measurements_io import read_measurements
from idealized_runtime.cost_model.fitting.request_logs import iter_requests, read_requests

HEADER = "model,num_prompt_tokens,num_output_tokens,runtime_s,note\n"


@pytest.fixture(scope="module")
def helm_fits():
    return import_helm_table(catalog.helm_table("idealized"))


def helm_rule(table: dict, model: str, p: int, o: int) -> float:
    """HELM's own formula, written out: the next profiled prompt size scaled by p / size, plus
    (o - 1) per-token times only when o > 0."""
    entry = table[model]
    sizes = sorted(int(k) for k in entry["runtime_for_prompt_tokens"])
    key = next((s for s in sizes if p <= s), sizes[-1])
    runtime = entry["runtime_for_prompt_tokens"][str(key)] * p / key
    if o > 0:
        runtime += entry["runtime_per_output_token"] * (o - 1)
    return runtime + (entry.get("overhead") or 0.0)


def test_zero_output_tokens_cost_alpha_alone_as_in_helm(tmp_path: Path, helm_fits) -> None:
    table = catalog.helm_table("idealized")
    model = sorted(helm_fits)[0]
    rows = [(model, 300, 0), (model, 300, 1), (model, 2000, 0), (model, 50, 17)]
    source = tmp_path / "lm.csv"
    source.write_text(HEADER + "".join(f"{m},{p},{o},,x\n" for m, p, o in rows))
    convert_file(source, helm_fits, tmp_path / "out.csv")
    out = pd.read_csv(tmp_path / "out.csv")
    expected = [helm_rule(table, m, p, o) for m, p, o in rows]
    np.testing.assert_allclose(out["idealized_runtime_s"], expected, rtol=1e-12)
    assert out["idealized_runtime_s"][0] == out["idealized_runtime_s"][1]
    alpha = predict_alpha(helm_fits[model], 300)
    assert predict_runtime(helm_fits[model], 300, 0) == pytest.approx(alpha)


@pytest.mark.parametrize("method", ["helm", "default", "denoised"])
def test_fits_accept_prompt_only_timings(method: str) -> None:
    # runtime = 0.01 + 0.001 * p for the prompt pass, 0.02 s per further token.
    rows = []
    for p in (16, 64, 256):
        for o in (0, 1, 8, 32):
            rows.append(("m", p, o, 0.01 + 0.001 * p + 0.02 * max(o - 1, 0)))
    frame = pd.DataFrame(
        rows, columns=["model", "num_prompt_tokens", "num_output_tokens", "runtime_s"]
    )
    fits = cost_model.fit_frame(frame, method=method)
    predicted = predict_runtime(fits["m"], frame["num_prompt_tokens"], frame["num_output_tokens"])
    np.testing.assert_allclose(predicted, frame["runtime_s"], rtol=0.05)


def test_frame_api_matches_the_file_path(tmp_path: Path, helm_fits) -> None:
    model = sorted(helm_fits)[1]
    frame = pd.DataFrame(
        {
            "model": [model, model, "other"],
            "num_prompt_tokens": [10, 20, 30],
            "num_output_tokens": [0, 5, 6],
            "runtime_s": [0.5, np.nan, 1.0],
            "id": ["a", "b", "c"],
        }
    )
    with pytest.raises(InputError, match="no fit for model"):
        cost_model.convert_frame(frame, helm_fits)
    out = cost_model.convert_frame(frame, helm_fits, skip_unknown=True)
    assert list(out["id"]) == ["a", "b"]
    assert math.isnan(out["runtime_discrepancy_s"].iloc[1])
    table = read_requests(frame)
    conversion = convert_requests(table, helm_fits, skip_unknown=True)
    pd.testing.assert_frame_equal(
        conversion.to_frame(), out[list(conversion.columns)].reset_index(drop=True)
    )
    assert table.to_frame()["num_output_tokens"].tolist() == [0, 5, 6]
    frame.to_parquet(tmp_path / "r.parquet")
    convert_file(tmp_path / "r.parquet", helm_fits, tmp_path / "o.parquet", skip_unknown=True)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "o.parquet"), out.reset_index(drop=True)
    )
    bad = frame.assign(num_output_tokens=[1, -2, 1])
    with pytest.raises(InputError) as caught:
        read_requests(bad)
    assert str(caught.value) == (
        "DataFrame, row 2, column 'num_output_tokens': must be at least 0, got -2"
    )


def test_measurements_from_parquet_and_frames(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"model": ["m", "m"], "num_prompt_tokens": [4, 8], "num_output_tokens": [0, 3],
         "runtime_s": [0.1, 0.3], "ttft_s": [np.nan, 0.05]}
    )  # fmt: skip
    frame.to_parquet(tmp_path / "t.parquet")
    from_file = read_measurements(tmp_path / "t.parquet")
    assert from_file == read_measurements(frame)
    assert from_file[0].ttft_s is None and from_file[1].ttft_s == 0.05
    assert from_file[0].num_output_tokens == 0


def test_chunked_conversion_locates_bad_rows_across_chunks(tmp_path: Path, helm_fits) -> None:
    model = sorted(helm_fits)[0]
    lines = [f"{model},{10 + i},{i % 4},{0.5 + i / 1000},n{i}\n" for i in range(200)]
    source = tmp_path / "big.csv"
    source.write_text(HEADER + "".join(lines))
    chunks = list(iter_requests(source, chunk_bytes=256))
    assert len(chunks) > 10 and sum(len(c) for c in chunks) == 200
    whole = convert_requests(read_requests(source), helm_fits)
    convert_file(source, helm_fits, tmp_path / "chunked.csv", chunk_bytes=256)
    write_conversion(read_requests(source), whole, tmp_path / "whole.csv")
    assert (tmp_path / "chunked.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()

    for bad_row, cell, column, message in (
        (150, "x7", "num_output_tokens", "expected a whole number of tokens, got 'x7'"),
        (151, "-3", "num_output_tokens", "expected a whole number of tokens, got '-3'"),
        (180, "0.0.1", "runtime_s", "expected a number of seconds, got '0.0.1'"),
    ):
        broken = list(lines)
        fields = broken[bad_row - 1].rstrip("\n").split(",")
        fields[2 if column == "num_output_tokens" else 3] = cell
        broken[bad_row - 1] = ",".join(fields) + "\n"
        source.write_text(HEADER + "".join(broken))
        out = tmp_path / "never.csv"
        with pytest.raises(InputError) as caught:
            convert_file(source, helm_fits, out, chunk_bytes=256)
        assert str(caught.value) == f"{source}, row {bad_row}, column '{column}': {message}"
        assert not out.exists() and not list(tmp_path.glob(".never*"))


def test_csv_floats_are_written_in_shortest_form(tmp_path: Path, helm_fits) -> None:
    model = sorted(helm_fits)[0]
    source = tmp_path / "r.csv"
    source.write_text(HEADER + f"{model},10,2,0.051,a\n")
    convert_file(source, helm_fits, tmp_path / "o.csv")
    text = (tmp_path / "o.csv").read_text()
    assert "0.051," in text and "00000000" not in text.split("\n")[1].split(",", 4)[3]
    for value in pd.read_csv(tmp_path / "o.csv").iloc[0, 5:]:
        assert repr(float(value)) in text


names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=8
).filter(lambda s: s.strip() == s and s.strip())
rows = st.lists(
    st.tuples(
        names,
        st.integers(1, 10_000_000),
        st.integers(0, 10_000_000),
        st.one_of(st.none(), st.floats(1e-7, 1e6, allow_nan=False)),
        st.text(alphabet="ab, \"'", max_size=5),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=rows)
def test_csv_and_parquet_round_trip_exactly(tmp_path_factory, helm_fits, rows) -> None:
    folder = tmp_path_factory.mktemp("rt")
    fits = {name: next(iter(helm_fits.values())) for name, *_ in rows}
    frame = pd.DataFrame(
        rows, columns=["model", "num_prompt_tokens", "num_output_tokens", "runtime_s", "note"]
    )
    frame["runtime_s"] = frame["runtime_s"].astype(float)
    frame.to_parquet(folder / "in.parquet")
    convert_file(folder / "in.parquet", fits, folder / "a.csv")
    convert_file(folder / "a.csv", fits, folder / "b.parquet")
    convert_file(folder / "b.parquet", fits, folder / "c.csv")
    assert (folder / "a.csv").read_bytes() == (folder / "c.csv").read_bytes()
    back = pd.read_parquet(folder / "b.parquet")
    pd.testing.assert_frame_equal(back[frame.columns.tolist()], frame, check_dtype=False)


def test_jsonl_objects_survive_and_mixed_fields_become_text(tmp_path: Path, helm_fits) -> None:
    model = sorted(helm_fits)[0]
    source = tmp_path / "r.jsonl"
    source.write_text(
        f'{{"model": "{model}", "num_prompt_tokens": 10, "num_output_tokens": 0, '
        '"meta": {"a": 1}, "tag": 5}\n'
        f'{{"model": "{model}", "num_prompt_tokens": 12, "num_output_tokens": 3, '
        '"meta": [1, 2], "tag": "x"}\n'
    )
    convert_file(source, helm_fits, tmp_path / "o.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["meta"] for r in rows] == [{"a": 1}, [1, 2]] and rows[0]["tag"] == 5
    convert_file(source, helm_fits, tmp_path / "o.parquet")
    frame = pd.read_parquet(tmp_path / "o.parquet")
    assert frame["meta"].tolist() == ['{"a": 1}', "[1, 2]"] and frame["tag"].tolist() == ["5", "x"]
    assert frame["idealized_runtime_s"].tolist() == [r["idealized_runtime_s"] for r in rows]


def test_cli_fit_methods_match_the_domain_type() -> None:
    from typing import get_args

    from idealized_runtime.cli.fitting import FIT_METHODS
    from idealized_runtime.core.types import FitMethod

    assert get_args(FitMethod) == FIT_METHODS
