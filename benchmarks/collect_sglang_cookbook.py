"""Add the serving benchmarks of SGLang's cookbook (sgl-project/sgl-cookbook) to data/published/.

Each model page of the cookbook ends with a speed benchmark: the ``sglang.launch_server``
command, then per scenario the ``sglang.bench_serving`` command and its printed result. This
script reads the pages in ``PAGES`` (models in the catalog, on GPUs the engine stacks know),
pairs every printed result with the commands above it, and writes the median TTFT, median
TPOT, median ITL and output and total tokens/s of each random-dataset run as rows of
``measurements.csv``, one source per page. Runs over ShareGPT (no per-request lengths stated)
are left out. SGLang's random dataset draws each prompt and output length uniformly from 1 to
the stated length (``--random-range-ratio`` 0 by default); the printed totals say what was
drawn.

Usage: git --git-dir MIRROR archive SHA docs | tar -x -C DIR
       python benchmarks/collect_sglang_cookbook.py DIR --commit SHA
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from idealized_runtime.core.published import (
    read_published_table,
    replace_source_rows,
    write_published_table,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "published"
REPOSITORY = "sgl-project/sgl-cookbook"
SOURCE_PREFIX = "sglang-cookbook-"


@dataclass(frozen=True)
class Page:
    """A cookbook page and what its test environment states."""

    path: str
    slug: str
    title: str
    page_date: str  # the last commit that changed the page
    figures_since: str  # the first commit whose page holds the same figures
    model: str
    checkpoint: str
    weights: str
    activations: str
    gpu: str
    version: str


PAGES = (
    Page(
        "docs/autoregressive/Qwen/Qwen3.md", "qwen3-235b-a22b", "Qwen3 (Qwen3-235B-A22B-Instruct"
        "-2507 on 8 B200)", "2026-01-14", "2026-01-05", "qwen3-235b-a22b",
        "Qwen/Qwen3-235B-A22B-Instruct-2507", "bf16", "bf16", "b200", "0.5.6",
    ),
    Page(
        "docs/autoregressive/DeepSeek/DeepSeek-R1.md", "deepseek-r1", "DeepSeek-R1 (DeepSeek-R1"
        "-0528 on 8 B200)", "2026-02-10", "2026-01-05", "deepseek-r1",
        "deepseek-ai/DeepSeek-R1-0528", "fp8-block", "fp8", "b200", "0.5.6.post1",
    ),
)  # fmt: skip
METRICS = (
    ("Median TTFT (ms)", "ttft_s", "median", 1e-3),
    ("Median TPOT (ms)", "time_per_output_token_s", "median", 1e-3),
    ("Median ITL (ms)", "inter_token_latency_s", "median", 1e-3),
    ("Output token throughput (tok/s)", "output_throughput_tokens_per_s", None, 1.0),
    ("Total token throughput (tok/s)", "total_throughput_tokens_per_s", None, 1.0),
)
_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_RESULT = re.compile(r"^([^:\n]+):\s+([-\d.]+)\s*$", re.M)


def flags(command: str) -> dict[str, str]:
    """The ``--flag value`` pairs of a shell command (a flag without a value maps to "")."""
    words = shlex.split(command.replace("\\\n", " "))
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else ""
            found[word[2:]] = "" if following.startswith("--") else following
    return found


def runs(text: str) -> list[tuple[dict[str, str], dict[str, str], dict[str, float]]]:
    """(server flags, benchmark flags, printed result) of every benchmark result on a page."""
    server: dict[str, str] = {}
    bench: dict[str, str] = {}
    found = []
    for block in _BLOCK.findall(text):
        if "launch_server" in block or ("sglang serve" in block and "--backend" not in block):
            server = flags(block)
        elif "bench_serving" in block:
            bench = flags(block)
        elif "Serving Benchmark Result" in block:
            result = {k.strip(): float(v) for k, v in _RESULT.findall(block)}
            found.append((server, bench, result))
    return found


def rows_of(page: Page, text: str, columns: list[str]) -> list[dict[str, str]]:
    """The measurement rows of one cookbook page."""
    rows = []
    for server, bench, result in runs(text):
        if bench.get("dataset-name") != "random":
            continue  # ShareGPT: per-request lengths not stated
        concurrency = int(bench["max-concurrency"])
        if int(result["Max request concurrency"]) != concurrency:
            raise ValueError(f"{page.path}: a result does not follow its command")
        prompt, output = int(bench["random-input-len"]), int(bench["random-output-len"])
        tp = int(server.get("tp", server.get("tp-size", "1")))
        ep = int(server.get("ep", server.get("ep-size", "1")))
        requests = int(result["Successful requests"])
        mean_in = result["Total input tokens"] / requests
        mean_out = result["Total generated tokens"] / requests
        ratio = bench.get("random-range-ratio", "0")
        notes = (
            f"SGLang cookbook speed benchmark: sglang.launch_server --tp {tp}, otherwise the "
            "engine's defaults (KV-cache format not stated); sglang.bench_serving --dataset-name "
            f"random --random-input-len {prompt} "
            f"--random-output-len {output} --num-prompts {requests} --max-concurrency "
            f"{concurrency}, lengths drawn uniformly from 1 to the stated ones (range ratio "
            f"{ratio}): {mean_in:.0f} prompt and {mean_out:.0f} generated tokens per request "
            "on average, as the printed totals say"
        )
        base = f"sglcb-{page.slug}-{page.gpu}-tp{tp}-{prompt}-{output}-c{concurrency}"
        for label, metric, statistic, scale in METRICS:
            rows.append({
                **dict.fromkeys(columns, ""),
                "row_id": f"{base}-{metric.replace('_', '')[:16]}",
                "source_id": f"{SOURCE_PREFIX}{page.slug}",
                "engine": "sglang",
                "engine_version": page.version,
                "cuda_graphs_or_compiled": "true",
                "gpu": page.gpu,
                "gpu_count": str(tp),
                "model": page.model,
                "model_hf_id": page.checkpoint,
                "weights": page.weights,
                "activations": page.activations,
                "tensor_parallel_size": str(tp),
                "pipeline_parallel_size": "1",
                "num_requests": str(requests),
                "prompt_tokens": str(prompt),
                "output_tokens": str(output),
                "metric": metric,
                "value": repr(round(result[label] * scale, 12)),
                "concurrency": str(concurrency),
                "statistic": statistic or "",
                "expert_parallel_size": str(ep),
                "attention_dp": "true" if "enable-dp-attention" in server else "false",
                "notes": notes,
            })  # fmt: skip
    return rows


def source_of(page: Page, commit: str, retrieved: str) -> dict[str, str]:
    return {
        "source_id": f"{SOURCE_PREFIX}{page.slug}",
        "title": f"SGLang cookbook: {page.title}, speed benchmark",
        "url": f"https://github.com/{REPOSITORY}/blob/{commit}/{page.path}",
        "repository": REPOSITORY,
        "commit": commit,
        "path": page.path,
        "source_date": page.page_date,
        "retrieved": retrieved,
        "notes": f"Date of the page's last change; the same figures since {page.figures_since}. "
        f"SGLang {page.version} on 8 {page.gpu.upper()} GPUs, tensor parallel 8; "
        "sglang.bench_serving over its random dataset at 1, 16 and 64-100 concurrent clients",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cookbook", help="a directory holding the cookbook's docs/")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--retrieved", default="2026-11-27")
    args = parser.parse_args()
    columns, rows = read_published_table(DATA / "measurements.csv")
    source_columns, sources = read_published_table(DATA / "sources.csv")
    new_rows = [
        row
        for page in PAGES
        for row in rows_of(page, (Path(args.cookbook) / page.path).read_text(), columns)
    ]
    new_sources = [source_of(page, args.commit, args.retrieved) for page in PAGES]
    rows = replace_source_rows(rows, new_rows, [SOURCE_PREFIX])
    write_published_table(DATA / "measurements.csv", columns, rows)
    sources = replace_source_rows(sources, new_sources, [SOURCE_PREFIX])
    write_published_table(DATA / "sources.csv", source_columns, sources)
    print(f"{len(new_rows)} rows from {len(PAGES)} cookbook pages")


if __name__ == "__main__":
    main()
