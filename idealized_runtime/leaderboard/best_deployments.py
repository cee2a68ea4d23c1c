"""Today's models at their best deployment: per model and GPU, the most output tokens/s per GPU
that ``plan`` (``cost_model.planning.search.plan``) finds under the board's standard SLO, and
what a million output tokens cost there, beside the board's batch-1 figures.

The standard (``STANDARD``): an interactive chat service.

* **workload**: 1,024 prompt and 1,024 output tokens, each drawn evenly from 0.8x to 1x (the
  1k/1k case InferenceX publishes and AIConfigurator's examples use, with InferenceX's client's
  length spread): a chat turn with its history, neither prompt- nor decode-bound;
* **SLO**: TTFT <= 2 s and TPOT <= 50 ms (20 output tokens/s per user, faster than anyone
  reads), on the medians as ``plan`` judges them: a reply starts within a couple of seconds
  and streams faster than it is read;
* **engines**: the best of vLLM, SGLang and TensorRT-LLM on the GPU (the table names it);
* **GPUs**: at most one 8-GPU node per replica (``MAX_GPUS``), aggregated or disaggregated;
* **precision**: the checkpoint's own weights (the board compares models as published; a
  smaller format would change the model), the engines' default KV cache;
* the answer is ``plan``'s best whose request-by-request simulation meets the SLO, trying up to
  ``VERIFY_CANDIDATES`` candidates, best estimate first.

Planning one model on one GPU takes 1-60 s, so the board reads shipped figures
(``data/current_models_serving.json``, with their provenance) unless asked to plan live; the
file is regenerated with ``python -m idealized_runtime.leaderboard.best_deployments --out
data/current_models_serving.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture, Hardware, Slo
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanResult, PlanWorkload
from idealized_runtime.leaderboard.flagships import FLAGSHIP_MODELS
from idealized_runtime.leaderboard.rows import BestDeployment

SHIPPED_FILE = "current_models_serving.json"
REGENERATE = f"python -m idealized_runtime.leaderboard.best_deployments --out data/{SHIPPED_FILE}"
# The GPUs the shipped figures cover (the engine stacks are calibrated on b300 and gb200 too:
# ``--current-serving live`` plans those).
SHIPPED_GPUS = ("h100-sxm", "h200", "b200")
ServingSource = Literal["shipped", "live", "none"]
SERVING_SOURCES: tuple[ServingSource, ...] = ("shipped", "live", "none")


class ServingStandard(BaseModel):
    """What the board's best deployment is planned for (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: PlanWorkload
    slo: Slo
    stacks: tuple[str, ...]
    max_gpus: int
    verify_candidates: int

    @property
    def label(self) -> str:
        """One line for table titles."""
        w, slo = self.workload, self.slo
        return (
            f"{w.prompt_tokens}/{w.output_tokens} tokens, TTFT <= {slo.ttft_s:g} s, "
            f"TPOT <= {(slo.tpot_s or 0) * 1000:g} ms, <= {self.max_gpus} GPUs per replica, "
            f"best of {', '.join(self.stacks)}, checkpoint precision"
        )


MAX_GPUS = 8  # one node per replica
VERIFY_CANDIDATES = 24  # the estimate misses some xPyD TTFTs: simulate more than plan's 8
STANDARD = ServingStandard(
    workload=PlanWorkload(prompt_tokens=1024, output_tokens=1024, min_length_fraction=0.8),
    slo=Slo(ttft_s=2.0, tpot_s=0.05),
    stacks=("vllm", "sglang", "tensorrt-llm"),
    max_gpus=MAX_GPUS,
    verify_candidates=VERIFY_CANDIDATES,
)


def plan_request(
    arch: Architecture, gpu: Hardware, standard: ServingStandard = STANDARD
) -> PlanRequest:
    """The ``plan`` request of one model on one GPU under ``standard``."""
    from idealized_runtime.cost_model.serving.engines import default_precision

    return PlanRequest(
        architecture=arch,
        hardware=[gpu],
        stacks=list(standard.stacks),
        workload=standard.workload,
        slo=standard.slo,
        weights=[default_precision(arch).weights],
        max_gpus=standard.max_gpus,
        verify_candidates=standard.verify_candidates,
    )


def best_deployment(
    arch: Architecture, gpu: Hardware, standard: ServingStandard = STANDARD
) -> BestDeployment:
    """``plan``'s best deployment of ``arch`` on ``gpu`` under ``standard``, or why there is
    none (the model does not fit, or no candidate meets the SLO in its simulation)."""
    from idealized_runtime.cost_model.planning.search import plan

    if not _engine_gpus(standard) & {gpu.name}:
        return no_engine(gpu, standard)
    try:
        result = plan(plan_request(arch, gpu, standard))
    except InputError as error:
        return BestDeployment(status="no-fit", note=str(error), source="live")
    return from_plan(result, standard)


def no_engine(gpu: Hardware, standard: ServingStandard = STANDARD) -> BestDeployment:
    """The cell of a GPU no engine stack of ``standard`` is calibrated on."""
    return BestDeployment(
        status="no-engine",
        note=f"none of {', '.join(standard.stacks)} is calibrated on {gpu.name} (they are on "
        f"{', '.join(sorted(_engine_gpus(standard)))})",
        source="live",
    )


def _engine_gpus(standard: ServingStandard) -> set[str]:
    """The GPUs some engine stack of ``standard`` is calibrated on."""
    from idealized_runtime.cost_model.hardware.engines.catalog import get_engine

    return {gpu for stack in standard.stacks for gpu in get_engine(stack).gpus}


def no_slo_note(simulated: int, standard: ServingStandard = STANDARD) -> str:
    """Why a plan has no best: nothing meets the SLO on the estimate, or none of the candidates
    simulated (best estimate first) meets it in its simulation."""
    if not simulated:
        return f"no deployment of <= {standard.max_gpus} GPUs meets the SLO on plan's estimate"
    return (
        f"none of the {simulated} deployments simulated (plan's best estimates meeting the SLO) "
        "meets it in its request-by-request simulation"
    )


def from_plan(result: PlanResult, standard: ServingStandard = STANDARD) -> BestDeployment:
    """The board's cell of a plan's answer."""
    best, check = result.best, result.verification
    if best is None:
        return BestDeployment(
            status="no-slo",
            note=no_slo_note(result.verified, standard),
            candidates_simulated=result.verified,
            source="live",
        )
    return BestDeployment(
        status="met",
        engine=best.stack,
        weights=best.weights,
        layout=best.layout,
        token_budget=best.token_budget,
        gpus=best.gpus,
        concurrency=best.concurrency,
        output_tokens_per_s_per_gpu=best.output_tokens_per_s_per_gpu,
        usd_per_million_output_tokens=best.usd_per_million_tokens,
        tokens_per_s_per_user=best.tokens_per_s_per_user,
        ttft_s=best.ttft_s,
        tpot_s=best.tpot_s,
        simulated_ttft_p50_s=check.ttft_p50_s if check else None,
        simulated_tpot_p50_s=check.tpot_p50_s if check else None,
        simulated_output_tokens_per_s_per_gpu=check.output_tokens_per_s_per_gpu if check else None,
        candidates_simulated=result.verified,
        source="live",
    )


# --- shipped figures ---------------------------------------------------------------------------


class ShippedEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    hardware: str
    best: BestDeployment
    seconds: float  # planning time, verification included


class ShippedFigures(BaseModel):
    """``data/current_models_serving.json``: the best deployments and how they were made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    standard: ServingStandard
    command: str
    created_at: str
    machine: str
    version: str
    entries: list[ShippedEntry]

    def find(self, model: str, hardware: str) -> BestDeployment | None:
        for entry in self.entries:
            if entry.model == model and entry.hardware == hardware:
                return entry.best
        return None


def read_shipped(path: Path | None = None) -> ShippedFigures | None:
    """The shipped figures (``path``: another file of the same shape); None when absent."""
    from idealized_runtime.core.catalog import data_path

    path = path or data_path(SHIPPED_FILE)
    if not path.is_file():
        return None
    return ShippedFigures.model_validate_json(path.read_text())


def board_cell(
    arch: Architecture,
    gpu: Hardware,
    source: ServingSource,
    shipped: ShippedFigures | None,
) -> BestDeployment | None:
    """The board's best-deployment cell of one model: planned now (``live``), read from the
    shipped figures (``shipped``; a pair they lack says so and how to get it), or none."""
    if source == "none":
        return None
    if source == "live":
        return best_deployment(arch, gpu)
    if shipped is None or shipped.standard != STANDARD:
        why = "absent" if shipped is None else "made for another standard"
        return BestDeployment(
            status="not-computed",
            note=f"the shipped figures are {why}: regenerate with {REGENERATE}",
            source="shipped",
        )
    found = shipped.find(arch.name, gpu.name)
    if found is None and gpu.name not in _engine_gpus(STANDARD):
        return no_engine(gpu).model_copy(update={"source": "shipped"})
    if found is None:
        return BestDeployment(
            status="not-computed",
            note=f"not among the shipped figures ({', '.join(SHIPPED_GPUS)}; flagship models); "
            "--current-serving live plans it (seconds to a minute per model)",
            source="shipped",
        )
    return found.model_copy(update={"source": "shipped"})


def _planned_entry(model: str, gpu_name: str) -> ShippedEntry:
    """One model's best deployment on one GPU, timed (a process pool's unit of work)."""
    from idealized_runtime.core.catalog import get_architecture, get_hardware

    gpu = get_hardware(gpu_name)
    started = time.perf_counter()
    best = best_deployment(get_architecture(model), gpu)
    seconds = round(time.perf_counter() - started, 1)
    return ShippedEntry(model=model, hardware=gpu.name, best=best, seconds=seconds)


def generate(
    models: Sequence[str], gpus: Sequence[str], *, jobs: int = 1, say=lambda text: None
) -> ShippedFigures:
    """Plan every model on every GPU under ``STANDARD``: the shipped figures' content.
    ``jobs`` > 1 plans the pairs on that many processes (the entries keep the given order)."""
    from concurrent.futures import ProcessPoolExecutor

    from idealized_runtime import __version__
    from idealized_runtime.core.catalog import get_hardware

    pairs = [(name, get_hardware(gpu_name).name) for gpu_name in gpus for name in models]

    def report(entry: ShippedEntry) -> ShippedEntry:
        best = entry.best
        say(f"{entry.hardware} {entry.model}: {best.status} {best.cell_text()} ({entry.seconds} s)")
        return entry

    if jobs <= 1:
        entries = [report(_planned_entry(model, gpu)) for model, gpu in pairs]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_planned_entry, model, gpu) for model, gpu in pairs]
            entries = [report(future.result()) for future in futures]
    return ShippedFigures(
        standard=STANDARD,
        command=REGENERATE,
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        machine=f"{platform.machine()} CPU, {_cores()} cores, no GPU needed",
        version=__version__,
        entries=entries,
    )


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m idealized_runtime.leaderboard.best_deployments",
        description="Plan today's models on each GPU under the board's standard SLO and write "
        "the figures the board ships.",
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--models", default=",".join(FLAGSHIP_MODELS))
    parser.add_argument("--gpus", default=",".join(SHIPPED_GPUS))
    parser.add_argument(
        "--jobs", type=int, default=1, help="plan on this many processes (one per core)"
    )
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    try:
        figures = generate(
            models, gpus, jobs=args.jobs, say=lambda text: print(text, file=sys.stderr, flush=True)
        )
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # Written whole at the end: an interrupted run leaves the old file as it was.
    text = json.dumps(figures.model_dump(mode="json"), indent=1) + "\n"
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out} ({len(figures.entries)} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
