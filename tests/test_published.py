"""The published-measurements table (data/published/): it loads, validates, resolves every name
in the catalogs, and covers what calibrating reference stacks needs."""

from __future__ import annotations

import csv
import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from idealized_runtime.core import catalog, published
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.published import (
    METRICS,
    PublishedRow,
    load_published,
    published_frame,
    published_sources,
)

# Architectures that ship with the new model families (added to data/architectures.yaml with
# their family support); rows may name them before that lands.
ADDED_WITH_NEW_FAMILIES = frozenset(
    {"llama-3.3-70b", "gemma-3-27b", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b", "phi-4"}
) | {f"qwen3-{size}" for size in ("8b", "14b", "32b", "30b-a3b", "235b-a22b")}
SMALL_MEMORY_GPUS = {"l4", "l40s", "mi300x"}


@pytest.fixture(scope="module")
def rows() -> list[PublishedRow]:
    return load_published()


def _valid_record(**changes: str) -> dict[str, str]:
    record = {
        "row_id": "x-1",
        "source_id": "gptfast-readme",
        "engine": "gpt-fast",
        "gpu": "a100-80gb",
        "gpu_count": "1",
        "model": "llama-2-7b",
        "weights": "bf16",
        "tensor_parallel_size": "1",
        "metric": "decode_tokens_per_s",
        "value": "104.9",
    }
    record.update(changes)
    return record


# --- the table loads and validates ---------------------------------------------------------------


def test_rows_load_with_unique_ids_and_positive_values(rows: list[PublishedRow]) -> None:
    assert len({row.row_id for row in rows}) == len(rows)
    assert all(row.value > 0 and row.metric in METRICS for row in rows)


def test_every_source_is_used_and_every_used_source_exists(rows: list[PublishedRow]) -> None:
    used = {row.source_id for row in rows}
    assert used == set(published_sources())


def test_sources_say_where_and_when(rows: list[PublishedRow]) -> None:
    for source in published_sources().values():
        assert source.url or (source.repository and source.path), source.source_id
        if source.repository and source.commit:
            assert len(source.commit) == 40, source.source_id


def test_every_gpu_is_in_the_hardware_catalog(rows: list[PublishedRow]) -> None:
    hardware = catalog.hardware_catalog()
    assert {row.gpu for row in rows} <= set(hardware)


def test_every_model_resolves_in_the_architecture_catalog(rows: list[PublishedRow]) -> None:
    architectures = catalog.architectures()
    missing = {row.model for row in rows} - set(architectures) - ADDED_WITH_NEW_FAMILIES
    assert not missing


def test_parallelism_is_consistent(rows: list[PublishedRow]) -> None:
    for row in rows:
        pipeline = row.pipeline_parallel_size or 1
        assert row.tensor_parallel_size * pipeline <= row.gpu_count, row.row_id


def test_unstated_workload_fields_are_explained_in_notes(rows: list[PublishedRow]) -> None:
    for row in rows:
        if row.batch_size is None or row.prompt_tokens is None or row.output_tokens is None:
            assert row.notes, row.row_id


def test_frame_has_the_schema_columns_and_nullable_integers(rows: list[PublishedRow]) -> None:
    frame = published_frame()
    assert len(frame) == len(rows)
    with (catalog.data_path("published", "measurements.csv")).open(encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert list(frame.columns[: len(header)]) == header
    assert str(frame["batch_size"].dtype) == "Int64"
    assert frame["source_date"].notna().all()
    assert (frame["value"] > 0).all()


# --- validation of single rows ------------------------------------------------------------


def test_a_valid_record_parses_and_empty_cells_are_unstated() -> None:
    row = PublishedRow(**_valid_record(batch_size="", power_cap_w="330"))
    assert row.batch_size is None and row.power_cap_w == 330.0
    assert row.weight_bits == 16 and row.unit == "tokens/s per sequence"
    assert PublishedRow(**_valid_record(weights="int4-g128")).weight_format == "int4"


@pytest.mark.parametrize(
    "changes",
    [
        {"metric": "tokens_per_minute"},
        {"value": "0"},
        {"value": "-3"},
        {"value": "nan"},
        {"weights": "int3"},
        {"kv_cache": "fp12"},
        {"tensor_parallel_size": "0"},
        {"gpu_count": ""},
        {"row_id": "Has Spaces"},
        {"unknown_column": "1"},
    ],
)
def test_bad_records_are_rejected(changes: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        PublishedRow(**_valid_record(**changes))


@pytest.fixture
def published_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the shipped published data that the loaders read instead (caches cleared
    before and after, so that no other test sees it)."""
    copy = tmp_path / "published"
    shutil.copytree(catalog.data_path("published"), copy)
    monkeypatch.setattr(published, "data_path", lambda *parts: tmp_path.joinpath(*parts))
    published.published_sources.cache_clear()
    published._published_rows.cache_clear()
    yield copy
    published.published_sources.cache_clear()
    published._published_rows.cache_clear()


def test_a_row_with_an_unknown_source_is_one_located_error(published_copy: Path) -> None:
    with (published_copy / "measurements.csv").open("a", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(PublishedRow.model_fields))
        writer.writerow(_valid_record(row_id="extra-row", source_id="nowhere"))
    with pytest.raises(InputError, match=r"nowhere.*sources\.csv"):
        load_published()


# --- pairs needed to compare precisions and tensor-parallel sizes -------------------------


def _serving_setup(row: PublishedRow) -> tuple:
    """What else a serving-at-load figure depends on: clients, statistic, expert and attention
    parallelism, speculative decoding (all None for the static tables)."""
    return (row.concurrency, row.statistic, row.expert_parallel_size, row.attention_dp,
            row.speculative)  # fmt: skip


def _pairs(rows: list[PublishedRow], vary: str) -> dict[tuple, dict[str, float]]:
    """Groups rows that differ only in ``vary`` (weights or tensor_parallel_size)."""
    groups: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in rows:
        key_fields = {
            "source": row.source_id,
            "model": row.model,
            "gpu": row.gpu,
            "metric": row.metric,
            "batch": row.batch_size,
            "prompt": row.prompt_tokens,
            "output": row.output_tokens,
            "weights": row.weights,
            "activations": row.activations,
            "tp": row.tensor_parallel_size,
            "serving": _serving_setup(row),
        }
        key_fields.pop("weights" if vary == "weights" else "tp")
        if vary == "weights":
            key_fields.pop("activations")
        label = (
            f"{row.weights}/{row.activations}"
            if vary == "weights"
            else str(row.tensor_parallel_size)
        )
        groups[tuple(key_fields.values())][label] = row.value
    return groups


def test_quantized_pairs_exist(rows: list[PublishedRow]) -> None:
    groups = _pairs(rows, "weights").values()
    formats = {
        label.split("/")[0].split("-g")[0]
        for group in groups
        if any(label.startswith(("bf16/", "fp16/")) for label in group)
        for label in group
    }
    assert {"int8", "int4", "fp8"} <= formats


def test_tensor_parallel_pairs_exist(rows: list[PublishedRow]) -> None:
    sizes_with_tp1 = {
        size
        for group in _pairs(rows, "tp").values()
        if "1" in group and len(group) > 1
        for size in group
    }
    assert {"2", "4", "8"} <= sizes_with_tp1


def test_ratios_within_one_source_are_plausible(rows: list[PublishedRow]) -> None:
    # Against the bf16/fp16 run of the same model, source and workload, no precision is 16x
    # faster or slower (int8 dynamic quantization at batch 1 is the slowest published, about
    # 11x). Against the smallest TP size, k times the GPUs is never more than 5k times faster:
    # throughput runs scale super-linearly when one GPU has little memory left for the KV cache
    # (Llama-3.1-70B in FP8 on one H100: 9.1x from TP 1 to 2 at 128/4096 tokens in TensorRT-LLM
    # 0.17's table), but not beyond that. A wrong unit or a swapped column shows up here.
    for group in _pairs(rows, "weights").values():
        for label, baseline in group.items():
            if label.startswith(("bf16/", "fp16/")):
                assert all(1 / 16 < value / baseline < 16 for value in group.values()), group
    for group in _pairs(rows, "tp").values():
        smallest = min(group, key=int)
        for size, value in group.items():
            ratio = value / group[smallest]
            assert 1 / 16 < ratio < 5 * int(size) / int(smallest), group


def test_one_workload_across_an_engines_sources_stays_within_5x(rows: list[PublishedRow]) -> None:
    # The same engine, GPU, model, precision, TP size and lengths published by different sources
    # (one performance page at several releases, a blog post beside it) moves with the release
    # and the batch size chosen, but not by 5x (static batches of TensorRT-LLM 0.9 to in-flight
    # batching in 0.17: 4.1x): milliseconds stored as seconds would, as would the per-GPU
    # figure of a TP 8 run stored as the system's.
    groups: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in rows:
        metric, value = row.system_figure()
        key = (
            row.engine, row.gpu, row.model, row.weights, row.tensor_parallel_size,
            row.prompt_tokens, row.output_tokens, metric, _serving_setup(row),
        )  # fmt: skip
        if row.metric == "ttft_s" and row.batch_size != 1:
            continue  # a static batch's TTFT includes queueing
        groups[key][row.source_id] = value
    compared = 0
    for group in groups.values():
        if len(group) > 1:
            compared += 1
            assert max(group.values()) / min(group.values()) < 5, group
    assert compared >= 20


# --- coverage the reference stacks need ---------------------------------------------


def test_coverage_of_engines_gpus_parallelism_and_workloads(rows: list[PublishedRow]) -> None:
    architectures = catalog.architectures()
    assert len(rows) >= 60
    assert len({row.engine for row in rows}) >= 4
    gpus = {row.gpu for row in rows}
    assert (
        {"a100-80gb", "h100-sxm"} <= gpus and gpus & {"h200", "b200"} and gpus & SMALL_MEMORY_GPUS
    )
    assert {1, 2, 4, 8} <= {row.tensor_parallel_size for row in rows}
    moe = {
        row.model
        for row in rows
        if row.model in architectures and architectures[row.model].num_experts > 1
    }
    assert moe and any(row.model not in moe for row in rows)
    batches = {row.batch_size for row in rows}
    assert 1 in batches and any(batch and batch > 1 for batch in batches)
    assert len({row.weight_format for row in rows}) >= 3
    metrics = {row.metric for row in rows}
    assert {"decode_tokens_per_s", "ttft_s", "output_throughput_tokens_per_s"} <= metrics


def test_per_gpu_throughput_scales_to_the_system() -> None:
    row = PublishedRow(
        **_valid_record(metric="output_throughput_tokens_per_s_per_gpu", value="600", gpu_count="4")
    )
    assert row.system_figure() == ("output_throughput_tokens_per_s", 2400.0)
    batch_one = PublishedRow(**_valid_record())
    assert batch_one.system_figure() == ("decode_tokens_per_s", 104.9)


def test_a_row_with_a_stray_comma_is_one_located_error(published_copy: Path) -> None:
    with (published_copy / "sources.csv").open("a", encoding="utf-8") as handle:
        handle.write("extra,Title, with a comma,https://example.org,,,,2024-01,2026-11-23,\n")
    with pytest.raises(InputError, match=r"sources\.csv, row \d+: wrong number of cells"):
        published_sources()


def test_frame_round_trips_through_parquet(tmp_path: Path) -> None:
    import pandas

    frame = published_frame()
    path = tmp_path / "published.parquet"
    frame.to_parquet(path, index=False)
    pandas.testing.assert_frame_equal(pandas.read_parquet(path), frame)


def test_readme_states_the_shipped_counts(rows: list[PublishedRow]) -> None:
    readme = catalog.data_path("published", "README.md").read_text(encoding="utf-8")
    sources = published_sources()
    assert f"{len(rows)} figures from {len(sources)} sources" in readme


@given(
    gpu_count=st.integers(min_value=1, max_value=64),
    value=st.floats(min_value=1e-3, max_value=1e7, allow_nan=False, allow_infinity=False),
    metric=st.sampled_from(METRICS),
)
def test_system_figure_scales_only_per_gpu_throughput(
    gpu_count: int, value: float, metric: str
) -> None:
    row = PublishedRow(**_valid_record(gpu_count=str(gpu_count), value=repr(value), metric=metric))
    system_metric, system_value = row.system_figure()
    assert system_metric in METRICS and not system_metric.endswith("_per_gpu")
    expected = value * gpu_count if metric.endswith("_per_gpu") else value
    assert system_value == pytest.approx(expected)


@given(
    base=st.sampled_from(sorted(published.WEIGHT_BITS)),
    group=st.one_of(st.none(), st.integers(min_value=1, max_value=4096)),
)
def test_every_weight_format_with_a_group_size_parses(base: str, group: int | None) -> None:
    weights = base if group is None else f"{base}-g{group}"
    row = PublishedRow(**_valid_record(weights=weights))
    assert row.weight_format == base and row.weight_bits == published.WEIGHT_BITS[base]
