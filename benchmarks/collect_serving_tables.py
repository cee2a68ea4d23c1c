"""Add hand-transcribed serving-at-load tables to data/published/.

Some sources publish their serving figures as tables on a web page rather than as data: each
table here is copied cell by cell from the page named in its source (units converted to the
table's: milliseconds to seconds), with what the page states about the run. Running the script
replaces the rows of these sources in ``measurements.csv`` and ``sources.csv`` and leaves every
other row where it is.

Usage: python benchmarks/collect_serving_tables.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from idealized_runtime.core.published import (
    read_published_table,
    replace_source_rows,
    write_published_table,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "published"


@dataclass(frozen=True)
class Table:
    """One published table: the run it states and its rows, as (concurrency, cells...)."""

    source: dict[str, str]
    prefix: str  # row ids start with it
    run: dict[str, str]  # the measurements.csv cells every row of the table shares
    columns: tuple[tuple[str, str | None, float], ...]  # (metric, statistic, scale) per cell
    rows: tuple[tuple[float, ...], ...]  # (concurrency, cell, cell, ...)


NIM_NOTES = (
    "NVIDIA NIM container {version} (its inference backend for this profile is not stated on "
    "the page); the page heads its columns TTFT (ms), ITL (ms) and Throughput (Tokens/s) "
    "without naming a statistic: the AIPerf client it says it used summarizes a run by the "
    "average, so TTFT and ITL are recorded as means (ITL as time per output token); the "
    "throughput is generated tokens/s of the system (at one client it equals 500 tokens over "
    "TTFT plus 499 ITLs); '{gpus}' is read as H100 SXM; KV-cache format and request count not "
    "stated"
)

TABLES = (
    Table(
        source={
            "source_id": "nim-benchmarking-llm-1.0.0-performance",
            "title": "NVIDIA NIM LLM benchmarking guide 1.0.0: Performance (Llama models "
            "powered by NIM)",
            "url": "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md",
            "repository": "",
            "commit": "",
            "path": "",
            "source_date": "2026-11",
            "retrieved": "2026-11-27",
            "notes": "The page carries no date (the date is when this copy was read, an upper "
            "bound); only its first table is taken (Llama-3.3-70B-Instruct, NIM 1.8.0, 2 x H100 "
            "80G, fp8 TP2, 5000 input / 500 output tokens, concurrency 1-250): the copy read "
            "does not show the GPU, precision and lengths of the page's other tables",
        },
        prefix="nim180-h100-llama-3.3-70b-fp8-tp2-5000-500",
        run={
            "engine": "nim",
            "engine_version": "1.8.0",
            "gpu": "h100-sxm",
            "gpu_count": "2",
            "model": "llama-3.3-70b",
            "model_hf_id": "meta-llama/Llama-3.3-70B-Instruct",
            "weights": "fp8",
            "quantization_method": "fp8 (NIM profile)",
            "tensor_parallel_size": "2",
            "pipeline_parallel_size": "1",
            "prompt_tokens": "5000",
            "output_tokens": "500",
            "notes": NIM_NOTES.format(version="1.8.0", gpus="2 x H100 80G"),
        },
        columns=(
            ("ttft_s", "mean", 1e-3),
            ("time_per_output_token_s", "mean", 1e-3),
            ("output_throughput_tokens_per_s", None, 1.0),
        ),
        rows=(
            (1, 406.77, 18.58, 51.67),
            (5, 546.7, 21.83, 218.48),
            (25, 688.69, 38.75, 623.4),
            (50, 834.51, 59.73, 814.37),
            (100, 7996.25, 92.91, 917.26),
            (150, 34794.22, 92.86, 920.9),
            (200, 61680.22, 93.06, 920.54),
            (250, 88605.32, 93.2, 920.12),
        ),
    ),
)


def rows_of(table: Table, columns: list[str]) -> list[dict[str, str]]:
    """The measurement rows of ``table``, one per cell."""
    rows = []
    for concurrency, *cells in table.rows:
        for (metric, statistic, scale), cell in zip(table.columns, cells, strict=True):
            rows.append({
                **dict.fromkeys(columns, ""),
                **table.run,
                "row_id": f"{table.prefix}-c{int(concurrency)}-{metric.replace('_', '')}",
                "source_id": table.source["source_id"],
                "concurrency": str(int(concurrency)),
                "metric": metric,
                "statistic": statistic or "",
                "value": repr(round(cell * scale, 12)),
            })  # fmt: skip
    return rows


def main() -> None:
    columns, rows = read_published_table(DATA / "measurements.csv")
    source_columns, sources = read_published_table(DATA / "sources.csv")
    ids = {table.source["source_id"] for table in TABLES}
    new_rows = [row for table in TABLES for row in rows_of(table, columns)]
    write_published_table(
        DATA / "measurements.csv", columns, replace_source_rows(rows, new_rows, ids)
    )
    new_sources = [{c: table.source.get(c, "") for c in source_columns} for table in TABLES]
    sources = replace_source_rows(sources, new_sources, ids)
    write_published_table(DATA / "sources.csv", source_columns, sources)
    print(f"{len(new_rows)} rows from {len(TABLES)} tables")


if __name__ == "__main__":
    main()
