"""The deployments a plan searches, per GPU and engine stack.

- precisions: the weight formats asked for, else the checkpoint's own and the smaller formats
  the GPU multiplies natively (fp8 on Hopper and Blackwell, nvfp4 on Blackwell), the KV cache in
  the engines' default for the checkpoint (``serving.engines.default_precision``);
- layouts of one instance: tensor-parallel sizes that split the heads (``valid_tensor_parallel_
  sizes``, within a node), and for a mixture of experts the experts spread over every GPU or
  not (ep = tp or 1) and the attention data-parallel over every GPU or not (dp = tp or 1);
- disaggregated (xPyD): a prefill layout (attention not data-parallel: prompts fill the GEMMs
  anyway) and a decode layout, with x prefill and y decode instances for the coprime pairs in
  ``WORKER_PAIRS``, within ``max_gpus`` GPUs in all.

The ``ideal`` stack (the roofline hardware model on an ideal server, the reference line)
models tensor parallelism alone, aggregated.

The engine's token budget per step (per attention-DP rank where the engine counts so) is a
knob too, as AIConfigurator searches it: ``token_budgets`` (aggregated deployments; a
disaggregated instance takes the engine's default, sized for the prompts where the engine does
not chunk them, ``serving.engines.engine_server``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from idealized_runtime.core.types import (
    FORMAT_BITS,
    Architecture,
    Deployment,
    Disaggregation,
    Hardware,
    Precision,
)
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine
from idealized_runtime.cost_model.hardware.engines.step import sized_token_budget
from idealized_runtime.cost_model.hardware.planner import GPUS_PER_NODE, valid_tensor_parallel_sizes
from idealized_runtime.cost_model.planning.request import IDEAL_STACK, PlanRequest
from idealized_runtime.cost_model.serving.engines import default_precision

# x prefill : y decode instances tried (AIConfigurator and the engines' published xPyD runs use
# small coprime ratios; a larger fleet repeats the pair).
WORKER_PAIRS = ((1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2))
NATIVE_FORMATS = (("fp8", "peak_fp8_tflops"), ("nvfp4", "peak_fp4_tflops"))
# Token budgets per step a plan tries (the engines' defaults are 8192).
TOKEN_BUDGETS = (4096, 8192, 16384)


@dataclass(frozen=True)
class Layout:
    """One instance's GPUs: tensor-parallel size, expert-parallel ranks, attention groups."""

    tp: int
    ep: int = 1
    attention_dp: int = 1


@dataclass(frozen=True)
class Candidate:
    """A deployment to evaluate on one engine stack, at a token budget per step (None: the
    engine's default, or the ideal server's)."""

    stack: str
    deployment: Deployment
    token_budget: int | None = None


@dataclass(frozen=True)
class BudgetChoice:
    """The token budgets tried for one engine and layout, and those left out with why (one
    line each)."""

    budgets: list[int]
    refused: list[str]


def token_budgets(request: PlanRequest, stack: str, layout: Layout) -> BudgetChoice:
    """The budgets (per attention-DP rank where the engine counts so) a plan tries for
    ``stack`` on ``layout``, pruned analytically:

    - an engine that chunks prompts: ``TOKEN_BUDGETS`` (``request.token_budgets`` when
      given) up to the first that holds every client's prompt and every running sequence's
      decode tokens in one step (a larger one schedules the same steps);
    - an engine that does not: those the engine accepts (at least the prompt, or prompt +
      output for vLLM; the others are refused, as the engine refuses such requests), of which
      the smallest and the smallest on which the prompt joins a step beside every running
      sequence at the highest load (``sized_token_budget`` when no listed budget does); load
      levels that would starve on the smaller are dropped later (``search``)."""
    scheduler = get_engine(stack).scheduler
    workload = request.workload
    listed = sorted(set(request.token_budgets or TOKEN_BUDGETS))
    ranks = layout.attention_dp if scheduler.limits_per_rank else 1
    running = -(-min(max(request.concurrency), scheduler.max_running * ranks) // ranks)
    prompt = workload.prompt_tokens
    if scheduler.chunked_prefill:
        whole_step = max(request.concurrency) * prompt + running
        kept = [b for b in listed if not any(k >= whole_step for k in listed if k < b)]
        return BudgetChoice(kept, [])
    limit = {"prompt": prompt, "sequence": prompt + workload.output_tokens}.get(
        scheduler.unchunked_limit, 0
    )
    accepted = [b for b in listed if b >= limit]
    refused = [
        f"{stack} {scheduler.budget_setting} {b}: refuses requests of {limit} tokens "
        "(it does not chunk prompts)"
        for b in listed
        if b < limit
    ]
    if request.token_budgets:
        return BudgetChoice(accepted, refused)
    need = prompt + max(running - 1, 0)
    roomy = [b for b in accepted if b >= need] or [sized_token_budget(limit, prompt, running)]
    return BudgetChoice(sorted({*accepted[:1], roomy[0]}), refused)


def precisions(
    arch: Architecture, hardware: Hardware, weights: list[str] | None
) -> list[Precision]:
    """The precisions tried on ``hardware`` (see the module docstring); ``weights`` fixes
    them (a format the GPU cannot compute in is refused later, in one line)."""
    if weights:
        return [default_precision(arch, weights=w) for w in weights]
    own = default_precision(arch)
    found = [own]
    for fmt, peak in NATIVE_FORMATS:
        smaller = FORMAT_BITS[fmt] < FORMAT_BITS[own.weight_format]
        if smaller and getattr(hardware, peak) is not None:
            found.append(default_precision(arch, weights=fmt))
    return found


def layouts(arch: Architecture, max_gpus: int) -> list[Layout]:
    """Layouts of one instance of at most ``max_gpus`` GPUs (see the module docstring)."""
    found = []
    for tp in valid_tensor_parallel_sizes(arch, min(max_gpus, GPUS_PER_NODE)):
        if arch.num_experts <= 1:
            found.append(Layout(tp))
            continue
        eps = [1] + ([tp] if tp > 1 and arch.num_experts % tp == 0 else [])
        dps = [1] + ([tp] if tp > 1 else [])
        found += [Layout(tp, ep, dp) for ep in eps for dp in dps]
    return found


def candidates(
    request: PlanRequest, stacks: list[str], refused: list[str] | None = None
) -> Iterator[Candidate]:
    """Every deployment the plan evaluates (see the module docstring), GPU by GPU; the
    budgets left out are appended to ``refused``, one line each."""
    arch = request.architecture
    instance_layouts = layouts(arch, request.max_gpus)
    choices: dict[tuple[str, Layout], BudgetChoice] = {}
    for hardware in request.hardware:
        for precision in precisions(arch, hardware, request.weights):
            for stack in stacks:
                ideal = stack == IDEAL_STACK
                mine = [
                    lay for lay in instance_layouts if not ideal or lay.ep == lay.attention_dp == 1
                ]
                base = Deployment(architecture=arch, hardware=hardware, precision=precision)
                if "aggregated" in request.modes:
                    for lay in mine:
                        deployment = _with_layout(base, lay)
                        if ideal:
                            yield Candidate(stack, deployment)
                            continue
                        if (stack, lay) not in choices:
                            choices[stack, lay] = token_budgets(request, stack, lay)
                        choice = choices[stack, lay]
                        if refused is not None:
                            refused += choice.refused
                        for budget in choice.budgets:
                            yield Candidate(stack, deployment, budget)
                if "disaggregated" in request.modes and not ideal:
                    yield from _disaggregated(stack, base, mine, request.max_gpus)


def _with_layout(base: Deployment, layout: Layout) -> Deployment:
    return base.model_copy(
        update={"tp": layout.tp, "ep": layout.ep, "attention_dp": layout.attention_dp}
    )


def _disaggregated(
    stack: str, base: Deployment, instance_layouts: list[Layout], max_gpus: int
) -> Iterator[Candidate]:
    prefill_layouts = [lay for lay in instance_layouts if lay.attention_dp == 1]
    for decode in instance_layouts:
        for prefill in prefill_layouts:
            for workers_p, workers_d in WORKER_PAIRS:
                if workers_p * prefill.tp + workers_d * decode.tp > max_gpus:
                    continue
                split = Disaggregation(
                    prefill_workers=workers_p,
                    decode_workers=workers_d,
                    prefill_tp=prefill.tp,
                    prefill_ep=prefill.ep,
                )
                deployment = _with_layout(base, decode).model_copy(update={"disaggregation": split})
                yield Candidate(stack, deployment)
