"""The plan's pick against NVIDIA AIConfigurator's, side by side, each judged by both tools and
by our request-by-request simulator.

For each case (a model, GPU, engine, prompt and output lengths and an SLO on 8 GPUs):

1. AIConfigurator 0.12's own search, ``aiconfigurator cli default`` (its Python API,
   ``cli_default``, in the interpreter given by ``--aiconfigurator``: its own venv), aggregated and
   disaggregated; its pick is its best tokens/s per GPU under the SLO, with its own figures;
2. the plan's search (``cost_model.planning.plan``) for the same GPU, engine, weights, KV-cache
   format, lengths (fixed, as AIConfigurator's) and SLO, at most 8 GPUs per replica; its pick is
   the best whose simulation meets the SLO (``PlanResult.verified``: candidates simulated);
3. each pick as the other tool predicts it: AIConfigurator's layout and concurrency on the plan's
   estimator; the plan's on ``cli_estimate``;
4. both picks simulated request by request (``planning.search.verify``): tokens/s per GPU and
   whether the medians meet the SLO, the verdict the issue asks to win on.

Run time of each: AIConfigurator's search (its process, wall clock), the plan's search and its
verification. AIConfigurator's answers are kept in ``--cache`` (JSON, one entry per case) so an
interrupted run resumes where it stopped. Skipped, with a line saying so, when no
AIConfigurator interpreter is given or it cannot import ``aiconfigurator``.

Usage: python benchmarks/plan_vs_aiconfigurator.py --aiconfigurator /path/to/venv/bin/python
       [--cases N] [--cache aic_plan_cache.json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment, Disaggregation, Slo
from idealized_runtime.cost_model.planning.request import PlanPoint, PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import (
    estimate_point,
    plan,
    point_servers,
    verify,
)
from idealized_runtime.cost_model.serving.engines import default_precision

HERE = Path(__file__).resolve().parent
AIC_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm"}
AIC_BACKENDS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}
AIC_KV = {"fp8": "fp8", "bfloat16": "bf16", "float16": "fp16"}
GPUS = 8


@dataclass(frozen=True)
class Case:
    model: str  # ours
    aic_model: str  # AIConfigurator's model path (a bundled config)
    gpu: str
    stack: str
    prompt: int
    output: int
    ttft_s: float
    tpot_s: float
    weights: str | None = None  # None: the checkpoint's own

    @property
    def label(self) -> str:
        return (f"{self.model} {self.weights or ''} {self.prompt}/{self.output} {self.gpu} "
                f"{self.stack}").replace("  ", " ")  # fmt: skip


CASES = [
    Case("llama-3.3-70b", "nvidia/Llama-3.1-70B-Instruct-FP8", "h200", "tensorrt-llm", 8192,
         1024, 2.0, 0.033, "fp8"),
    Case("llama-3.3-70b", "nvidia/Llama-3.1-70B-Instruct-FP8", "h200", "vllm", 8192, 1024, 2.0,
         0.033, "fp8"),
    Case("qwen3-32b", "Qwen/Qwen3-32B", "h100-sxm", "tensorrt-llm", 4000, 500, 1.0, 0.020, "bf16"),
    Case("deepseek-v3", "deepseek-ai/DeepSeek-V3", "h200", "sglang", 1024, 1024, 1.0, 0.050),
    Case("deepseek-v3", "deepseek-ai/DeepSeek-V3", "h200", "tensorrt-llm", 1024, 1024, 1.0, 0.050),
    Case("deepseek-v3", "deepseek-ai/DeepSeek-V3", "h200", "vllm", 1024, 1024, 1.0, 0.050),
    Case("gpt-oss-120b", "openai/gpt-oss-120b", "b200", "tensorrt-llm", 1024, 1024, 1.0, 0.020),
    Case("gpt-oss-120b", "openai/gpt-oss-120b", "h200", "vllm", 2048, 1024, 1.0, 0.020),
    Case("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "h100-sxm", "sglang", 2048, 256, 0.5,
         0.015, "bf16"),
    Case("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B-FP8", "b200", "tensorrt-llm", 4096, 1024,
         1.5, 0.030, "fp8"),
    Case("qwen3-32b", "Qwen/Qwen3-32B", "b200", "vllm", 8192, 1024, 2.0, 0.025, "bf16"),
]  # fmt: skip


def aic(python: str, job: dict) -> dict:
    done = subprocess.run(
        [python, str(HERE / "aiconfigurator_plan.py")], input=json.dumps(job),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail[:200]}
    return json.loads(done.stdout)


def _job(case: Case, **more: object) -> dict:
    return {"model_path": case.aic_model, "system": AIC_SYSTEMS[case.gpu],
            "backend": AIC_BACKENDS[case.stack], "isl": case.prompt, "osl": case.output,
            **more}  # fmt: skip


def aic_pick(found: dict) -> tuple[str, dict] | None:
    """AIConfigurator's best row over its modes: (mode, row)."""
    rows = [(mode, row) for mode, row in (found.get("best") or {}).items() if row]
    if not rows:
        return None
    return max(rows, key=lambda item: float(item[1]["tokens/s/gpu"]))


def _int(row: dict, key: str, default: int = 1) -> int:
    value = row.get(key)
    try:
        return int(value) if value not in (None, "", "None") else default
    except (TypeError, ValueError):
        return default


def aic_deployment(case: Case, request: PlanRequest, mode: str, row: dict) -> Deployment:
    """AIConfigurator's row as a deployment of ours (an instance's GPUs = tp x dp)."""
    arch = request.architecture

    def layout(prefix: str) -> tuple[int, int, int]:
        dp = _int(row, f"{prefix}dp")
        gpus = _int(row, f"{prefix}tp") * dp * _int(row, f"{prefix}pp")
        ep = _int(row, f"{prefix}moe_ep") if arch.num_experts > 1 else 1
        return gpus, ep, dp

    precision = default_precision(arch, weights=case.weights, kv_cache=_kv(row, mode))
    if mode == "agg":
        tp, ep, dp = layout("")
        return Deployment(architecture=arch, hardware=request.hardware[0], precision=precision,
                          tp=tp, ep=ep, attention_dp=dp)  # fmt: skip
    ptp, pep, pdp = layout("(p)")
    tp, ep, dp = layout("(d)")
    split = Disaggregation(
        prefill_workers=_int(row, "(p)workers"), decode_workers=_int(row, "(d)workers"),
        prefill_tp=ptp, prefill_ep=pep, prefill_attention_dp=pdp,
    )  # fmt: skip
    return Deployment(architecture=arch, hardware=request.hardware[0], precision=precision,
                      tp=tp, ep=ep, attention_dp=dp, disaggregation=split)  # fmt: skip


def _kv(row: dict, mode: str) -> str | None:
    value = row.get("kvcache") or row.get("(d)kvcache")
    return AIC_KV.get(str(value)) if value else None


def aic_layout(point: PlanPoint, moe: bool) -> tuple[str, dict]:
    """Our pick as ``cli_estimate``'s mode and layout arguments (attention: tp x dp; a mixture
    of experts' GPUs: moe_tp x ep)."""

    def fields(prefix: str, tp: int, ep: int, dp: int, batch: int) -> dict:
        experts = {f"{prefix}moe_tp_size": tp // ep, f"{prefix}moe_ep_size": ep} if moe else {}
        return {f"{prefix}tp_size": tp // dp, f"{prefix}attention_dp_size": dp,
                f"{prefix}batch_size": max(batch // dp, 1), **experts}  # fmt: skip

    if point.disaggregation is None:
        return "agg", fields("", point.tp, point.ep, point.attention_dp, point.concurrency)
    split = point.disaggregation
    decode_batch = -(-point.concurrency // split.decode_workers)
    return "disagg", {
        **fields("prefill_", split.prefill_tp, split.prefill_ep, split.prefill_attention_dp, 1),
        **fields("decode_", point.tp, point.ep, point.attention_dp, decode_batch),
        "prefill_num_workers": split.prefill_workers,
        "decode_num_workers": split.decode_workers,
    }


def plan_request(case: Case, kv: str | None) -> PlanRequest:
    return PlanRequest(
        architecture=get_architecture(case.model), hardware=[get_hardware(case.gpu)],
        stacks=[case.stack], weights=[case.weights] if case.weights else None, kv_cache=kv,
        workload=PlanWorkload(prompt_tokens=case.prompt, output_tokens=case.output),
        slo=Slo(ttft_s=case.ttft_s, tpot_s=case.tpot_s), max_gpus=GPUS,
    )  # fmt: skip


def run_case(case: Case, python: str, cache: dict, cache_path: Path) -> dict:
    if case.label not in cache and cache_path.exists():  # another run may have added it
        cache.update({**json.loads(cache_path.read_text()), **cache})
    if case.label not in cache:
        slo = {"ttft_ms": case.ttft_s * 1e3, "tpot_ms": case.tpot_s * 1e3}
        start = time.perf_counter()
        found = aic(python, _job(case, op="default", total_gpus=GPUS, **slo))
        found["wall_s"] = time.perf_counter() - start
        cache[case.label] = found
    found = cache[case.label]
    out: dict = {"case": case.label, "aic_s": found.get("wall_s")}
    picked = aic_pick(found)
    kv = _kv(picked[1], picked[0]) if picked else None
    request = plan_request(case, kv)
    start = time.perf_counter()
    try:
        result = plan(request)
    except InputError as error:
        out["ours_error"] = str(error)
        result = None
    out["ours_s"] = time.perf_counter() - start
    if result is not None:
        out.update(ours_search_s=result.seconds, ours_tried=result.verified)
        best = result.best
        if best is not None and result.verification is not None:
            out.update(ours=best.label, ours_est=best.output_tokens_per_s_per_gpu,
                       ours_sim=result.verification.output_tokens_per_s_per_gpu,
                       ours_sim_ok=result.verification.meets_slo)  # fmt: skip
            mode, layout = aic_layout(best, request.architecture.num_experts > 1)
            theirs = aic(python, _job(case, op="estimate", mode=mode, layout=layout))
            if "error" in theirs:
                out["ours_by_aic"] = theirs["error"][:60]
            else:
                raw = theirs["raw"]
                out["ours_by_aic"] = float(raw.get("tokens/s/gpu", float("nan")))
                out["ours_by_aic_ok"] = (theirs["ttft_ms"] <= case.ttft_s * 1e3
                                         and theirs["tpot_ms"] <= case.tpot_s * 1e3)  # fmt: skip
    if picked is None:
        out["aic"] = found.get("error", "no configuration under the SLO")[:80]
        return out
    mode, row = picked
    out.update(aic_own=float(row["tokens/s/gpu"]), aic_ttft_ms=row.get("ttft"),
               aic_tpot_ms=row.get("tpot"))  # fmt: skip
    try:
        deployment = aic_deployment(case, request, mode, row)
        point = estimate_point(request, case.stack, deployment, _int(row, "concurrency"))
    except (InputError, ValueError) as error:
        out["aic"] = f"{mode} (ours cannot express it: {str(error)[:60]})"
        return out
    out.update(aic=point.label.removeprefix(f"{case.stack} "), aic_by_ours_ok=point.meets_slo,
               aic_by_ours=point.output_tokens_per_s_per_gpu)  # fmt: skip
    check = verify(request, point, point_servers(request, point))
    out.update(aic_sim=check.output_tokens_per_s_per_gpu, aic_sim_ok=check.meets_slo,
               aic_sim_ttft=check.ttft_p50_s, aic_sim_tpot=check.tpot_p50_s)  # fmt: skip
    return out


def _cell(value: object, ok: object = None) -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if isinstance(value, float) else str(value)
    if ok is not None:
        text += " ok" if ok else " MISS"
    return text


def table(rows: list[dict]) -> list[str]:
    head = (
        "| case | AIC pick | AIC's figure | ours on it (est) | sim of AIC pick | our pick | "
        "our est | AIC on ours | sim of our pick | ours / AIC (sim) | AIC s | plan s (tried) |"
    )
    lines = [head, "|" + " --- |" * 12]
    for r in rows:
        ratio = "-"
        if r.get("ours_sim") and r.get("aic_sim"):
            ratio = f"{r['ours_sim'] / r['aic_sim']:.2f}"
        aic_s = f"{r['aic_s']:.0f}" if r.get("aic_s") else "-"
        ours_s = f"{r['ours_s']:.1f} ({r.get('ours_tried', '-')})"
        lines.append(
            f"| {r['case']} | {r.get('aic', '-')} | {_cell(r.get('aic_own'))} | "
            f"{_cell(r.get('aic_by_ours'), r.get('aic_by_ours_ok'))} | "
            f"{_cell(r.get('aic_sim'), r.get('aic_sim_ok'))} | "
            f"{r.get('ours', r.get('ours_error', '-'))} | {_cell(r.get('ours_est'))} | "
            f"{_cell(r.get('ours_by_aic'), r.get('ours_by_aic_ok'))} | "
            f"{_cell(r.get('ours_sim'), r.get('ours_sim_ok'))} | {ratio} | {aic_s} | {ours_s} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", help="python of a venv with aiconfigurator 0.12")
    parser.add_argument("--cases", type=int, default=len(CASES))
    parser.add_argument("--cache", default="aic_plan_cache.json")
    args = parser.parse_args()
    python = args.aiconfigurator
    if not python or subprocess.run([python, "-c", "import aiconfigurator"],
                                    capture_output=True, check=False).returncode:  # fmt: skip
        print("skipped: no AIConfigurator interpreter (--aiconfigurator PYTHON)")
        return 0
    cache_path = Path(args.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    print(f"load average {os.getloadavg()[0]:.1f}; tokens/s per GPU; ok/MISS: the SLO")
    rows = []
    for case in CASES[: args.cases]:
        rows.append(run_case(case, python, cache, cache_path))
        if cache_path.exists():
            cache.update({**json.loads(cache_path.read_text()), **cache})
        cache_path.write_text(json.dumps(cache, indent=1))
        print(json.dumps(rows[-1]), flush=True)
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
