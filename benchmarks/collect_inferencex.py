"""Add InferenceX's aggregated single-node serving results to data/published/.

InferenceX (SemiAnalysis, Apache-2.0) benchmarks engines nightly at fixed concurrency with
vLLM's serving client (random prompts of 80-100% of the stated lengths, ``--ignore-eos``, ten
requests per client). Its dashboard's committed test fixture
``packages/app/cypress/fixtures/api/benchmarks.json`` holds a snapshot of those results with
each run's GitHub Actions link; this script takes the NVIDIA single-node (aggregated, not
disaggregated) points of GPUs in the catalog, one source per benchmark run, and writes median
TTFT, median TPOT and output throughput per GPU as rows of ``measurements.csv``.

Usage: python benchmarks/collect_inferencex.py FIXTURE.json --repository OWNER/NAME --commit SHA
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from idealized_runtime.core.published import read_published_table, write_published_table

DATA = Path(__file__).resolve().parent.parent / "data" / "published"
GPUS = {"h100": "h100-sxm", "h200": "h200", "b200": "b200", "b300": "b300"}
ENGINES = {"sglang": "sglang", "trt": "tensorrt-llm", "vllm": "vllm"}
MODELS = {"dsr1": ("deepseek-r1", {"fp8": "deepseek-ai/DeepSeek-R1-0528",
                                   "fp4": "nvidia/DeepSeek-R1-0528-FP4"})}  # fmt: skip
WEIGHTS = {"fp8": ("fp8-block", "fp8"), "fp4": ("nvfp4", "fp4")}
METRICS = (
    ("median_ttft", "ttft_s", "median"),
    ("median_tpot", "time_per_output_token_s", "median"),
    ("output_tput_per_gpu", "output_throughput_tokens_per_s_per_gpu", None),
    ("tput_per_gpu", "total_throughput_tokens_per_s_per_gpu", None),
)
PATH = "packages/app/cypress/fixtures/api/benchmarks.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--retrieved", default="2026-11-26")
    args = parser.parse_args()
    results = json.loads(Path(args.fixture).read_text())
    columns, rows = read_published_table(DATA / "measurements.csv")
    rows = [r for r in rows if not r["source_id"].startswith("inferencex-")]
    source_columns, sources = read_published_table(DATA / "sources.csv")
    sources = [s for s in sources if not s["source_id"].startswith("inferencex-")]
    runs: dict[str, dict[str, str]] = {}
    for point in results:
        if point["disagg"] or point["is_multinode"] or point["hardware"] not in GPUS:
            continue
        if point["model"] not in MODELS or point["framework"] not in ENGINES:
            continue
        model, checkpoints = MODELS[point["model"]]
        weights, activations = WEIGHTS[point["precision"]]
        run = point["run_url"].split("/runs/")[1].split("/")[0]
        source_id = f"inferencex-run-{run}"
        runs.setdefault(source_id, {
            "source_id": source_id,
            "title": f"InferenceX benchmark run {run} ({point['date']})",
            "url": point["run_url"],
            "repository": args.repository,
            "commit": args.commit,
            "path": PATH,
            "source_date": point["date"],
            "retrieved": args.retrieved,
            "notes": "Results of one InferenceX GitHub Actions run, as committed in the "
            "InferenceX dashboard's test fixture (a snapshot of its results API); vLLM's "
            "serving client, random prompts of 80-100% of the stated lengths, ignore_eos, "
            "ten requests per client",
        })  # fmt: skip
        image = point.get("image") or ""
        version = image.rsplit(":", 1)[-1] if image else ""
        dpa = bool(point["decode_dp_attention"])
        spec = "" if point["spec_method"] == "none" else point["spec_method"]
        base = (f"ix-{point['hardware']}-{point['framework']}-{point['precision']}-"
                f"{spec or 'nospec'}-tp{point['decode_tp']}-ep{point['decode_ep']}-"
                f"dpa{int(dpa)}-{point['isl']}-{point['osl']}-c{point['conc']}-{run}")  # fmt: skip
        for key, metric, statistic in METRICS:
            value = point["metrics"].get(key)
            if value is None or value <= 0:
                continue
            rows.append({
                **dict.fromkeys(columns, ""),
                "row_id": f"{base}-{metric.replace('_', '')[:12]}-{key}".lower(),
                "source_id": source_id,
                "engine": ENGINES[point["framework"]],
                "engine_version": version,
                "cuda_graphs_or_compiled": "true",
                "gpu": GPUS[point["hardware"]],
                "gpu_count": str(point["decode_tp"]),
                "model": model,
                "model_hf_id": checkpoints[point["precision"]],
                "weights": weights,
                "activations": activations,
                "tensor_parallel_size": str(point["decode_tp"]),
                "pipeline_parallel_size": "1",
                "num_requests": str(10 * point["conc"]),
                "prompt_tokens": str(point["isl"]),
                "output_tokens": str(point["osl"]),
                "metric": metric,
                "value": repr(float(value)),
                "concurrency": str(point["conc"]),
                "statistic": statistic or "",
                "expert_parallel_size": str(point["decode_ep"]),
                "attention_dp": "true" if dpa else "false",
                "speculative": spec,
                "notes": "InferenceX aggregated serving point; lengths are the random "
                "dataset's maxima (prompts and outputs drawn from 80-100% of them); KV-cache "
                "format not stated" + ("" if version else "; engine image not stated"),
            })  # fmt: skip
    write_published_table(DATA / "measurements.csv", columns, rows)
    new_sources = sorted(runs.values(), key=lambda s: s["source_id"])
    write_published_table(DATA / "sources.csv", source_columns, [*sources, *new_sources])
    print(f"{len(rows)} rows, {len(runs)} InferenceX runs")


if __name__ == "__main__":
    main()
