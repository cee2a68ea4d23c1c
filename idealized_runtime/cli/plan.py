"""CLI: ``plan`` the best deployment under an SLO (``cost_model.planning.plan``).

Prints the answer first: the best configuration, the fleet for a rate with its dollars and
joules per million output tokens and the simulation's check; ``--frontiers`` adds the best per
GPU and each GPU and engine's Pareto frontier; ``--json`` prints the ``PlanResult``;
``--report DIR`` writes the page with the frontier charts. Runs no model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail, require_folder
from idealized_runtime.core.errors import InputError


def _names(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@app.command("plan")
def plan_command(
    arch: str = typer.Option(..., "--arch", help="catalog name or HF config.json"),
    hardware: list[str] = typer.Option(..., "--hardware", help="GPUs to consider: h100-sxm,b200"),
    stack: list[str] = typer.Option(
        [], "--stack", help="engine stacks (vllm, sglang, tensorrt-llm) and ideal; default all"
    ),
    prompt_tokens: int = typer.Option(..., "--prompt-tokens", min=1),
    output_tokens: int = typer.Option(..., "--output-tokens", min=1),
    min_length: float = typer.Option(
        1.0,
        "--min-length",
        help="lengths drawn from this fraction of the stated ones up to them (InferenceX: 0.8)",
    ),
    shared_prefix: int = typer.Option(
        0, "--shared-prefix", min=0, help="prompt tokens shared within each prefix group"
    ),
    prefix_groups: int = typer.Option(1, "--prefix-groups", min=1, help="groups of prompts"),
    prefix_hit_rate: Optional[float] = typer.Option(  # noqa: UP045  (typer needs Optional)
        None, "--prefix-hit-rate", help="prefix-cache hit rate instead of shared prefixes"
    ),
    slo: Optional[str] = typer.Option(  # noqa: UP045
        None, "--slo", help="ttft=S,tpot=S,e2e=S (seconds; any subset)"
    ),
    rate: Optional[float] = typer.Option(  # noqa: UP045
        None, "--rate", help="requests/s to serve: replicas and GPUs needed"
    ),
    weights: list[str] = typer.Option(
        [], "--weights", help="weight formats to try (default: the checkpoint's and smaller)"
    ),
    kv_cache: list[str] = typer.Option(
        [],
        "--kv-cache",
        help="KV-cache formats to try (default: the engines' for the weights, and fp8 where "
        "the GPU computes in fp8)",
    ),
    activations: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--activations",
        help="the matmuls' input format (default the engines'; fp8 with mxfp4 experts: W4A8)",
    ),
    moe_runner: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--moe-runner",
        help="the engines' MoE runner where measured beside their default (SGLang's triton for "
        "bf16 experts on Blackwell); default each engine's",
    ),
    mode: list[str] = typer.Option([], "--mode", help="aggregated, disaggregated (default both)"),
    max_gpus: int = typer.Option(16, "--max-gpus", min=1, help="GPUs per replica at most"),
    concurrency: list[str] = typer.Option(
        [],
        "--concurrency",
        help="closed-loop clients per replica to try (list; per rank of an attention-DP instance)",
    ),
    max_concurrency: Optional[int] = typer.Option(  # noqa: UP045
        None, "--max-concurrency", help="clients per replica at most"
    ),
    attention_dp: bool = typer.Option(
        True,
        "--attention-dp/--no-attention-dp",
        help="search attention data parallelism (a mixture of experts)",
    ),
    token_budget: list[str] = typer.Option(
        [],
        "--token-budget",
        help="engine token budgets per step to try (list; default 4096,8192,16384, pruned per "
        "engine: a budget the engine would refuse for the prompts is left out)",
    ),
    verify: bool = typer.Option(
        True, "--verify/--no-verify", help="simulate the best configuration request by request"
    ),
    report: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--report", help="write plan.html (frontier charts) and plan.json to this folder"
    ),
    frontiers: bool = typer.Option(
        False, "--frontiers", help="also print the best per GPU and every frontier"
    ),
    frontier_points: int = typer.Option(
        8, "--frontier-points", min=0, help="frontier points printed per GPU and stack"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
) -> None:
    """Which GPU, engine, precision and layout serve a workload under an SLO with the most
    tokens/s per GPU: Pareto frontiers, the best configuration, GPUs for a rate, cost."""
    from pydantic import ValidationError

    from idealized_runtime.core.architectures import load_architecture
    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.core.load_levels import parse_load_levels
    from idealized_runtime.core.types import Slo
    from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
    from idealized_runtime.cost_model.planning.search import plan
    from idealized_runtime.report.plan import plan_text, write_plan_report
    from idealized_runtime.timing.summary import parse_slo

    if report is not None:
        require_folder(report, "--report", "plan.html")
    levels = parse_load_levels(concurrency, "--concurrency", integer=True) if concurrency else None
    budgets = (
        parse_load_levels(token_budget, "--token-budget", integer=True) if token_budget else None
    )
    options = {
        "stacks": _names(stack) or None, "weights": _names(weights) or None, "rate": rate,
        "kv_cache": _names(kv_cache) or None,
        "slo": parse_slo(slo) if slo else Slo(), "max_gpus": max_gpus, "verify": verify,
        "attention_dp": attention_dp,
        **({"activations": activations} if activations else {}),
        **({"moe_runner": moe_runner} if moe_runner else {}),
        **({"modes": _names(mode)} if mode else {}),
        **({"concurrency": levels} if levels else {}),
        **({"max_concurrency": max_concurrency} if max_concurrency is not None else {}),
        **({"token_budgets": budgets} if budgets else {}),
    }  # fmt: skip
    lengths = {"prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
               "min_length_fraction": min_length, "shared_prefix_tokens": shared_prefix,
               "prefix_groups": prefix_groups, "prefix_hit_rate": prefix_hit_rate}  # fmt: skip
    try:
        request = PlanRequest(
            architecture=load_architecture(arch),
            hardware=[get_hardware(name) for name in _names(hardware)],
            workload=PlanWorkload(**lengths),
            **options,
        )
    except ValidationError as error:
        problem = error.errors()[0]
        field = ".".join(map(str, problem["loc"]))
        fail(f"{field}: {problem['msg'].removeprefix('Value error, ')}")
    try:
        result = plan(request)
    except InputError as error:
        fail(str(error))
    if report is not None:
        write_plan_report(result, report)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=1))
        return
    typer.echo(plan_text(result, frontier_points, frontiers=frontiers))
    if report is not None:
        typer.echo(f"\nwrote {report / 'plan.html'}")
