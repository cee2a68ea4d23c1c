"""Write InferenceX's disaggregated (xPyD) serving results to data/published/disaggregated.csv.

InferenceX (SemiAnalysis, Apache-2.0) also benchmarks disaggregated prefill/decode deployments
(NVIDIA Dynamo over SGLang and TensorRT-LLM), at fixed concurrency with vLLM's serving client.
Its dashboard's committed test fixture ``packages/app/cypress/fixtures/api/benchmarks.json``
holds a snapshot of those results with each run's GitHub Actions link; this script takes the
points of GPUs that the catalog and the engine stacks know, with the layout of both pools
(tensor-parallel, expert-parallel and attention data-parallel sizes and worker counts), and
writes one row per point with its source: median TTFT and TPOT, and output tokens/s per decode
GPU (InferenceX divides a disaggregated run's output throughput by its decode GPUs and its
input throughput by its prefill GPUs). Points whose worker counts are not stated are left out.
``--artifact RUN:DATE:FILE`` (repeatable) adds the xPyD records of one run's aggregated results
artifact (``agg_bmk.json``, read from a copy in ``--repository`` at ``--artifact-dir``/run_RUN/;
see ``collect_inferencex.py``) beside the table's other rows.

Usage: python benchmarks/collect_inferencex_disaggregated.py FIXTURE.json --repository OWNER/NAME
    --commit SHA
       python benchmarks/collect_inferencex_disaggregated.py --artifact RUN:DATE:FILE [...]
    --artifact-dir DIR --repository OWNER/NAME --commit SHA
"""

from __future__ import annotations

import argparse
import json
import runpy
from collections.abc import Iterable, Mapping
from pathlib import Path

from idealized_runtime.core.published import (
    read_published_table,
    replace_source_rows,
    write_published_table,
)
from idealized_runtime.core.published_disaggregated import COLUMNS, DISAGGREGATED_FILE

DATA = Path(__file__).resolve().parent.parent / "data" / "published"
GPUS = {"h100": "h100-sxm", "h200": "h200", "b200": "b200", "b300": "b300", "gb200": "gb200"}
ENGINES = {"dynamo-sglang": "sglang", "dynamo-trt": "tensorrt-llm"}
# InferenceX's model key -> (catalog name, {its precision key: (checkpoint, weights)}).
MODELS = {
    "dsr1": ("deepseek-r1", {"fp8": ("deepseek-ai/DeepSeek-R1-0528", "fp8-block"),
                             "fp4": ("nvidia/DeepSeek-R1-0528-FP4", "nvfp4")}),
    "gptoss": ("gpt-oss-120b", {"fp4": ("openai/gpt-oss-120b", "mxfp4")}),
}  # fmt: skip
PATH = "packages/app/cypress/fixtures/api/benchmarks.json"


def rows_of(
    points: Iterable[Mapping], path: str, *, repository: str, commit: str, retrieved: str
) -> list[dict]:
    """The table's rows of the xPyD points of GPUs, engines and models it knows (a dashboard
    fixture's, or a run artifact's as ``collect_inferencex.artifact_points`` reads them)."""
    rows = []
    for point in points:
        if not point["disagg"] or point["hardware"] not in GPUS:
            continue
        if point["model"] not in MODELS or point["framework"] not in ENGINES:
            continue
        if point["precision"] not in MODELS[point["model"]][1]:
            continue
        if not (point["prefill_num_workers"] and point["decode_num_workers"]):
            continue  # an older record without worker counts
        metrics = point["metrics"]
        if not all(metrics.get(k) for k in ("median_ttft", "median_tpot", "output_tput_per_gpu")):
            continue
        model, checkpoints = MODELS[point["model"]]
        run = point["run_url"].split("/runs/")[1].split("/")[0]
        spec = "" if point["spec_method"] == "none" else point["spec_method"]
        image = point.get("image") or ""
        layout = (f"p{point['prefill_num_workers']}x{point['prefill_tp']}"
                  f"ep{point['prefill_ep']}dpa{int(point['prefill_dp_attention'])}-"
                  f"d{point['decode_num_workers']}x{point['decode_tp']}"
                  f"ep{point['decode_ep']}dpa{int(point['decode_dp_attention'])}")  # fmt: skip
        rows.append({
            "row_id": (f"ixd-{point['hardware']}-{point['framework']}-{point['precision']}-"
                       f"{spec or 'nospec'}-{layout}-{point['isl']}-{point['osl']}-"
                       f"c{point['conc']}-{run}"),
            "source_id": f"inferencex-run-{run}",
            "source_title": f"InferenceX benchmark run {run} ({point['date']})",
            "source_url": point["run_url"],
            "repository": repository,
            "commit": commit,
            "path": path,
            "source_date": point["date"],
            "retrieved": retrieved,
            "engine": ENGINES[point["framework"]],
            "engine_version": image.rsplit(":", 1)[-1] if image else "",
            "gpu": GPUS[point["hardware"]],
            "model": model,
            "model_hf_id": checkpoints[point["precision"]][0],
            "weights": checkpoints[point["precision"]][1],
            "speculative": spec,
            "prompt_tokens": point["isl"],
            "output_tokens": point["osl"],
            "concurrency": point["conc"],
            "prefill_workers": point["prefill_num_workers"],
            "prefill_tp": point["prefill_tp"],
            "prefill_ep": point["prefill_ep"],
            "prefill_attention_dp": str(bool(point["prefill_dp_attention"])).lower(),
            "prefill_gpus": point["num_prefill_gpu"],
            "decode_workers": point["decode_num_workers"],
            "decode_tp": point["decode_tp"],
            "decode_ep": point["decode_ep"],
            "decode_attention_dp": str(bool(point["decode_dp_attention"])).lower(),
            "decode_gpus": point["num_decode_gpu"],
            "ttft_s_median": repr(float(metrics["median_ttft"])),
            "tpot_s_median": repr(float(metrics["median_tpot"])),
            "output_tokens_per_s_per_decode_gpu": repr(float(metrics["output_tput_per_gpu"])),
            "notes": "InferenceX disaggregated (Dynamo) serving point, multi-node; lengths "
            "are the random dataset's maxima (drawn from 80-100% of them); KV-cache format "
            "and transfer fabric not stated",
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, options in (
        ("fixture", {"nargs": "?"}),
        ("--artifact", {"action": "append", "default": [], "metavar": "RUN:DATE:FILE"}),
        ("--artifact-dir", {"default": ""}),
        ("--repository", {"required": True}),
        ("--commit", {"required": True}),
        ("--retrieved", {"default": "2026-11-26"}),
    ):
        parser.add_argument(name, **options)  # type: ignore[arg-type]
    args = parser.parse_args()
    if bool(args.fixture) == bool(args.artifact):
        parser.error("give a dashboard fixture or --artifact runs, not both")
    where = {"repository": args.repository, "commit": args.commit, "retrieved": args.retrieved}
    if args.fixture:
        points = json.loads(Path(args.fixture).read_text())
        rows = sorted(rows_of(points, PATH, **where), key=lambda r: r["row_id"])
    else:
        collector = runpy.run_path(str(Path(__file__).with_name("collect_inferencex.py")))
        _, rows = read_published_table(DATA / DISAGGREGATED_FILE)
        for spec in args.artifact:
            run, date, file, path = collector["artifact_spec"](spec, args.artifact_dir)
            records = json.loads(Path(file).read_text())
            points = collector["artifact_points"](records, run, date, disaggregated=True)
            new = sorted(rows_of(points, path, **where), key=lambda r: r["row_id"])
            rows = replace_source_rows(rows, new, [f"inferencex-run-{run}"])
    write_published_table(DATA / DISAGGREGATED_FILE, COLUMNS, rows)
    print(f"{len(rows)} disaggregated points from {len({r['source_id'] for r in rows})} runs")


if __name__ == "__main__":
    main()
