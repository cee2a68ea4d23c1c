"""Add a TensorRT-LLM performance overview's offline throughput table to data/published/.

TensorRT-LLM's ``docs/source/performance/perf-overview.md`` publishes, per release, the output
tokens/s of ``trtllm-bench throughput`` (every request queued at once, fixed input and output
lengths, FP8 with an FP8 KV cache, GUARANTEED_NO_EVICT) per model, tensor-parallel size and GPU.
This script reads the first markdown table of such a page (model and TP carried down the rows,
one column per GPU) and writes the H200 and H100 figures (the GPUs the engine stacks measure) of
models in the catalog as rows of ``measurements.csv``, with the page as one source.

Usage: python benchmarks/collect_trtllm_perf_overview.py PAGE.md --version 0.17 --commit SHA
       --source-date 2025-02
"""

from __future__ import annotations

import argparse
from pathlib import Path

from idealized_runtime.core.published import read_published_table, write_published_table

DATA = Path(__file__).resolve().parent.parent / "data" / "published"
GPUS = {"H200 141GB HBM3": "h200", "H100 80GB HBM3": "h100-sxm"}
# The page's model names -> (catalog name, Hugging Face checkpoint the page's runs quantized).
MODELS = {
    f"LLaMA v3.1 {size}": (f"llama-3.1-{size.lower()}", f"meta-llama/Llama-3.1-{size}-Instruct")
    for size in ("8B", "70B", "405B")
} | {"Mistral 7B": ("mistral-7b", "mistralai/Mistral-7B-v0.1"),
     "Mixtral 8x7B": ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1")}  # fmt: skip
# The page's $num_requests per input/output lengths (the same table in every version).
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000,
            (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000,
            (20000, 2000): 1000}  # fmt: skip


def table_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """The GPU column names and the body rows of the page's first table."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    header = cells[0]
    body = [row for row in cells[1:] if row[2] and "," in row[2]]
    return header, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page")
    parser.add_argument("--version", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--source-date", required=True)
    parser.add_argument("--retrieved", default="2026-11-26")
    args = parser.parse_args()
    source_id = f"trtllm-perf-overview-v{args.version}"
    header, body = table_rows(Path(args.page).read_text())
    columns = {i: (name, GPUS[name]) for i, name in enumerate(header) if name in GPUS}
    fields, rows = read_published_table(DATA / "measurements.csv")
    rows = [r for r in rows if r["source_id"] != source_id]
    added, model, tp = 0, "", ""
    version = args.version.replace(".", "")
    for cells in body:
        model, tp = cells[0] or model, cells[1] or tp
        if model not in MODELS:
            continue
        name, checkpoint = MODELS[model]
        isl, osl = (int(x) for x in cells[2].split(","))
        for index, (label, gpu) in columns.items():
            if not cells[index]:
                continue
            rows.append({
                **dict.fromkeys(fields, ""),
                "row_id": f"trtllm{version}-{gpu}-{name}-fp8-tp{tp}-{isl}-{osl}",
                "source_id": source_id, "engine": "tensorrt-llm",
                "engine_version": f"{args.version} (TensorRT engines)",
                "cuda_graphs_or_compiled": "", "gpu": gpu, "gpu_count": tp, "model": name,
                "model_hf_id": checkpoint, "weights": "fp8", "kv_cache": "fp8",
                "activations": "fp8", "quantization_method": "FP8 (trtllm-bench build "
                "--quantization FP8; the page: the KV cache is then FP8 too)",
                "tensor_parallel_size": tp, "pipeline_parallel_size": "1",
                "num_requests": str(REQUESTS[isl, osl]), "prompt_tokens": str(isl),
                "output_tokens": str(osl), "metric": "output_throughput_tokens_per_s",
                "value": cells[index],
                "notes": "Offline max-throughput run (trtllm-bench throughput; all requests "
                "queued at once, no fixed concurrency; Guaranteed No Evict; KV cache 0.95 of the "
                "free memory in most runs, 0.90 when that ran out of memory); fixed input/output "
                f"lengths; total output tokens/s of the system; {label}",
            })  # fmt: skip
            added += 1
    write_published_table(DATA / "measurements.csv", fields, rows)
    source_fields, sources = read_published_table(DATA / "sources.csv")
    sources = [s for s in sources if s["source_id"] != source_id]
    sources.append({
        "source_id": source_id,
        "title": f"TensorRT-LLM {args.version} performance overview (offline throughput table)",
        "url": f"https://github.com/NVIDIA/TensorRT-LLM/blob/{args.commit}/"
        "docs/source/performance/perf-overview.md",
        "repository": "NVIDIA/TensorRT-LLM", "commit": args.commit,
        "path": "docs/source/performance/perf-overview.md", "source_date": args.source_date,
        "retrieved": args.retrieved,
        "notes": f"The table states it was generated with version {args.version}; the page "
        "carries no date and the date is the month of that release. H200 and H100 columns "
        "(GH200, L40S and A100 left out: the engine stacks have no kernels on them)",
    })  # fmt: skip
    write_published_table(DATA / "sources.csv", source_fields, sources)
    print(f"{added} rows of {source_id}")


if __name__ == "__main__":
    main()
