"""Add InferenceX's aggregated single-node serving results to data/published/.

InferenceX (SemiAnalysis, Apache-2.0) benchmarks engines nightly at fixed concurrency with
vLLM's serving client (random prompts of 80-100% of the stated lengths, ``--ignore-eos``, ten
requests per client). Its dashboard's committed test fixtures under
``packages/app/cypress/fixtures/api/`` hold snapshots of those results with each run's GitHub
Actions link: ``benchmarks.json`` (the latest run of every configuration, with the engine's
image) and ``benchmarks-history.json`` (earlier runs of the same configurations, without the
image). This script takes the NVIDIA single-node (aggregated, not disaggregated) points of GPUs
in the catalog and of the models in ``MODELS``, one source per benchmark run, and writes median
TTFT, median TPOT and output and total throughput per GPU as rows of ``measurements.csv``. A
point that several fixtures hold (the same run and configuration) is taken from the first one
given; a history point without an image takes the image its run states in another fixture.

Each run also leaves its aggregated results as an artifact, ``agg_bmk.json`` (one record per
configuration: the same figures, its layout, the engine's image; no link and no date, which the
run's id and its listing give). ``--artifact RUN:DATE:FILE`` adds one run's artifact as read from
a copy in ``--repository`` at ``--artifact-dir``/run_RUN/agg_bmk.json (the gpt-oss-120b runs
of 2025-12 and 2026-01, which no dashboard fixture holds). Artifact runs are added beside the
table's other InferenceX rows (a run the table already holds is left as it is); fixtures
rewrite every InferenceX row.

Usage: python benchmarks/collect_inferencex.py FIXTURE.json [FIXTURE.json ...]
    --repository OWNER/NAME --commit SHA
(each fixture file keeps its name in the repository, e.g. ``git show SHA:packages/app/cypress/
fixtures/api/benchmarks-history.json > /tmp/fixtures/benchmarks-history.json``)
       python benchmarks/collect_inferencex.py --artifact RUN:DATE:FILE [...]
    --artifact-dir DIR --repository OWNER/NAME --commit SHA
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from idealized_runtime.core.published import (
    read_published_table,
    replace_source_rows,
    write_published_table,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "published"
FIXTURES = "packages/app/cypress/fixtures/api"
GPUS = {"h100": "h100-sxm", "h200": "h200", "b200": "b200", "b300": "b300"}
# Artifacts name the runner: InferenceX ran TensorRT-LLM's B200 jobs on runners of their own.
ARTIFACT_HARDWARE = {"b200-trt": "b200"}
ARTIFACT_METRICS = ("median_ttft", "median_tpot", "output_tput_per_gpu", "tput_per_gpu")
RUNS = "https://github.com/SemiAnalysisAI/InferenceX/actions/runs"
ENGINES = {"sglang": "sglang", "trt": "tensorrt-llm", "vllm": "vllm"}


# InferenceX's model key -> (catalog name, {its precision key: (checkpoint, weights, activations)}).
# The checkpoints are those InferenceX's launch scripts (SemiAnalysisAI/InferenceX,
# benchmarks/{dsr1,gptoss,llama70b}_*.sh) serve; gpt-oss-120b ships MXFP4 experts (the
# activations the engines pair with them differ by GPU and kernel, so they are left unstated).
MODELS: dict[str, tuple[str, dict[str, tuple[str, str, str]]]] = {
    "dsr1": ("deepseek-r1", {
        "fp8": ("deepseek-ai/DeepSeek-R1-0528", "fp8-block", "fp8"),
        "fp4": ("nvidia/DeepSeek-R1-0528-FP4", "nvfp4", "fp4"),
    }),
    "gptoss": ("gpt-oss-120b", {"fp4": ("openai/gpt-oss-120b", "mxfp4", "")}),
    "llama70b": ("llama-3.3-70b", {
        "fp8": ("nvidia/Llama-3.3-70B-Instruct-FP8", "fp8", "fp8"),
        "fp4": ("nvidia/Llama-3.3-70B-Instruct-FP4", "nvfp4", "fp4"),
    }),
}  # fmt: skip
METRICS = (
    ("median_ttft", "ttft_s", "median"),
    ("median_tpot", "time_per_output_token_s", "median"),
    ("output_tput_per_gpu", "output_throughput_tokens_per_s_per_gpu", None),
    ("tput_per_gpu", "total_throughput_tokens_per_s_per_gpu", None),
)
SOURCE_NOTES = (
    "Results of one InferenceX GitHub Actions run, as committed in the InferenceX dashboard's "
    "test fixture (a snapshot of its results API); vLLM's serving client, random prompts of "
    "80-100% of the stated lengths, ignore_eos, ten requests per client"
)

ARTIFACT_NOTES = (
    "Results of one InferenceX GitHub Actions run: its aggregated results artifact "
    "(agg_bmk.json) as a third-party copy commits it, the run's date as that copy's run listing "
    "states it; vLLM's serving client, random prompts of 80-100% of the stated lengths, "
    "ignore_eos, ten requests per client"
)


def run_of(point: Mapping) -> str:
    """The GitHub Actions run id of a fixture point."""
    return point["run_url"].split("/runs/")[1].split("/")[0]


def point_key(point: Mapping) -> tuple:
    """What identifies one measured configuration of one run."""
    return (
        run_of(point), point["hardware"], point["framework"], point["model"],
        point["precision"], point["spec_method"], point["decode_tp"], point["decode_ep"],
        bool(point["decode_dp_attention"]), point["isl"], point["osl"], point["conc"],
    )  # fmt: skip


def artifact_points(
    records: Iterable[Mapping], run: str, date: str, disaggregated: bool = False
) -> list[dict]:
    """One run's artifact records (``agg_bmk.json``) as dashboard fixture points of run
    ``run`` on ``date``: its single-node records, or (``disaggregated``) its xPyD ones with
    both pools' layouts."""
    points = []
    for record in records:
        if bool(record.get("disagg")) != disaggregated:
            continue
        point = {
            "hardware": ARTIFACT_HARDWARE.get(record["hw"], record["hw"]),
            "framework": record["framework"], "model": record["infmax_model_prefix"],
            "precision": record["precision"], "spec_method": record["spec_decoding"],
            "disagg": disaggregated, "is_multinode": bool(record.get("is_multinode")),
            "isl": int(record["isl"]), "osl": int(record["osl"]), "conc": int(record["conc"]),
            "image": record.get("image"), "date": date, "run_url": f"{RUNS}/{run}",
            "metrics": {key: record[key] for key in ARTIFACT_METRICS if key in record},
        }  # fmt: skip
        if disaggregated:
            for pool in ("prefill", "decode"):
                point |= {f"{pool}_{key}": record[f"{pool}_{key}"]
                          for key in ("num_workers", "tp", "ep")}  # fmt: skip
                point[f"{pool}_dp_attention"] = _flag(record[f"{pool}_dp_attention"])
                point[f"num_{pool}_gpu"] = record[f"num_{pool}_gpu"]
        else:
            point |= {"decode_tp": int(record["tp"]), "decode_ep": int(record["ep"]),
                      "decode_dp_attention": _flag(record["dp_attention"])}  # fmt: skip
        points.append(point)
    return points


def artifact_spec(spec: str, artifact_dir: str) -> tuple[str, str, str, str]:
    """``--artifact RUN:DATE:FILE``: the run, its date, the local file, and the artifact's path
    in the copy read (``artifact_dir``/run_RUN/agg_bmk.json)."""
    run, date, file = spec.split(":", 2)
    return run, date, file, f"{artifact_dir}/run_{run}/agg_bmk.json"


def _flag(value: object) -> bool:
    """An artifact's switch: a bool, or "true" / "false"."""
    return str(value).lower() == "true"


def collected(point: Mapping) -> bool:
    """Whether ``point`` is an aggregated single-node run this table can hold."""
    return (
        not point["disagg"] and not point["is_multinode"] and point["hardware"] in GPUS
        and point["framework"] in ENGINES and point["model"] in MODELS
        and point["precision"] in MODELS[point["model"]][1]
    )  # fmt: skip


def rows_of(
    fixtures: Iterable[tuple[str, list[Mapping]]],
    columns: list[str],
    *,
    repository: str,
    commit: str,
    retrieved: str,
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The measurement rows and the sources (one per run) of the fixtures' points, each
    fixture given as (its path in the repository, its points)."""
    fixtures = list(fixtures)
    images: dict[tuple[str, str], str] = {}
    for _, points in fixtures:
        for point in points:
            if point.get("image"):
                images.setdefault((run_of(point), point["framework"]), point["image"])
    seen: set[tuple] = set()
    rows: list[dict[str, str]] = []
    sources: dict[str, dict[str, str]] = {}
    for path, points in fixtures:
        for point in points:
            if not collected(point) or point_key(point) in seen:
                continue
            seen.add(point_key(point))
            rows += _point_rows(point, columns, path, sources, images, repository, commit,
                                retrieved)  # fmt: skip
    return rows, sorted(sources.values(), key=lambda s: s["source_id"])


def _point_rows(
    point: Mapping,
    columns: list[str],
    path: str,
    sources: dict[str, dict[str, str]],
    images: Mapping[tuple[str, str], str],
    repository: str,
    commit: str,
    retrieved: str,
) -> list[dict[str, str]]:
    model, checkpoints = MODELS[point["model"]]
    checkpoint, weights, activations = checkpoints[point["precision"]]
    run = run_of(point)
    source_id = f"inferencex-run-{run}"
    sources.setdefault(source_id, {
        "source_id": source_id,
        "title": f"InferenceX benchmark run {run} ({point['date']})",
        "url": point["run_url"],
        "repository": repository,
        "commit": commit,
        "path": path,
        "source_date": point["date"],
        "retrieved": retrieved,
        "notes": ARTIFACT_NOTES if path.endswith("agg_bmk.json") else SOURCE_NOTES,
    })  # fmt: skip
    own_image = point.get("image") or ""
    image = own_image or images.get((run, point["framework"]), "")
    version = image.rsplit(":", 1)[-1] if image else ""
    dpa = bool(point["decode_dp_attention"])
    spec = "" if point["spec_method"] == "none" else point["spec_method"]
    prefix = "ix" if point["model"] == "dsr1" else f"ix-{point['model']}"
    base = (f"{prefix}-{point['hardware']}-{point['framework']}-{point['precision']}-"
            f"{spec or 'nospec'}-tp{point['decode_tp']}-ep{point['decode_ep']}-"
            f"dpa{int(dpa)}-{point['isl']}-{point['osl']}-c{point['conc']}-{run}")  # fmt: skip
    notes = (
        "InferenceX aggregated serving point; lengths are the random dataset's maxima (prompts "
        "and outputs drawn from 80-100% of them); KV-cache format not stated"
    )
    if not image:
        notes += "; engine image not stated"
    elif not own_image:
        notes += "; engine image as the run's other record states it"
    if point["model"] == "gptoss":
        notes += "; MXFP4 experts, activation format not stated"
    rows = []
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
            "model_hf_id": checkpoint,
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
            "notes": notes,
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures", nargs="*")
    parser.add_argument(
        "--artifact", action="append", default=[], metavar="RUN:DATE:FILE",
        help="one run's agg_bmk.json (repeatable); its rows are added beside the others",
    )  # fmt: skip
    parser.add_argument("--artifact-dir", default="", help="the artifacts' folder in the copy")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--retrieved", default="2026-11-26")
    args = parser.parse_args()
    if bool(args.fixtures) == bool(args.artifact):
        parser.error("give dashboard fixtures or --artifact runs, not both")
    fixtures = [(f"{FIXTURES}/{Path(f).name}", json.loads(Path(f).read_text()))
                for f in args.fixtures]  # fmt: skip
    columns, rows = read_published_table(DATA / "measurements.csv")
    source_columns, sources = read_published_table(DATA / "sources.csv")
    replaced = ["inferencex-"]
    if args.artifact:
        held = {source["source_id"] for source in sources}
        replaced = []
        for spec in args.artifact:
            run, date, file, path = artifact_spec(spec, args.artifact_dir)
            if f"inferencex-run-{run}" in held:
                print(f"run {run} is in the table already: left as it is")
                continue
            records = json.loads(Path(file).read_text())
            fixtures.append((path, artifact_points(records, run, date)))
            replaced.append(f"inferencex-run-{run}")
    new_rows, new_sources = rows_of(
        fixtures, columns, repository=args.repository, commit=args.commit,
        retrieved=args.retrieved,
    )  # fmt: skip
    rows = replace_source_rows(rows, new_rows, replaced)
    write_published_table(DATA / "measurements.csv", columns, rows)
    sources = replace_source_rows(sources, new_sources, replaced)
    write_published_table(DATA / "sources.csv", source_columns, sources)
    print(f"{len(rows)} rows, {len(new_rows)} from {len(new_sources)} InferenceX runs")


if __name__ == "__main__":
    main()
