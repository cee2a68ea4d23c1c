"""The deployments a plan searches, per GPU and engine stack.

- precisions: the weight formats asked for, else the checkpoint's own and the smaller formats
  the GPU multiplies natively (fp8 on Hopper and Blackwell, nvfp4 on Blackwell); each with the
  KV-cache formats asked for, else the engines' default for the checkpoint
  (``serving.engines.default_precision``) and an fp8 cache where the GPU computes in fp8;
  on Blackwell MXFP4 experts also with MXFP8 activations (W4A8) on the engines where that is a
  knob (``w4a8_by_default``), unless the request fixes the activations;
- layouts of one instance (``layouts``): tensor-parallel sizes (powers of two within a node;
  a mixture of experts also wide expert-parallel over a larger NVLink domain, GB200 NVL72);
  for a mixture of experts every split of those GPUs into expert-parallel ranks (dividing the
  experts) and attention data-parallel groups (whose tensor-parallel share splits the heads),
  as AIConfigurator's ``tp x dp = moe_tp x ep`` grid, less the splits an engine cannot run
  (``engine_runs``: TensorRT-LLM's attention groups are all GPUs or none, vLLM's experts all
  tensor- or all expert-parallel); a dense model's attention is not data-parallel;
- multi-token prediction (``MTP_DRAFTS`` draft tokens) on the engine stacks, for a model whose
  acceptance is published (``serving.engines.published_acceptance``);
- disaggregated (xPyD): a prefill layout (attention data-parallel over all its GPUs or not) and
  a decode layout, with x prefill and y decode instances for every coprime pair up to
  ``MAX_WORKERS`` each (8:1 to 1:8; a larger fleet repeats the pair), within ``max_gpus`` GPUs
  in all;
- the engine's KV memory fraction: its default, and ``MEMORY_FRACTIONS`` where the KV cache
  is what limits the running requests (``Candidate.memory_fraction``; the search decides).

Pruned before evaluation: an instance layout whose weights do not fit the GPU's memory on the
engine (``fits``, the engine's own memory rule) never appears in an aggregated or xPyD
candidate. The ``ideal`` stack (the roofline hardware model on an ideal server, the reference
line) models tensor parallelism alone, aggregated.

A candidate's engine knobs are fields of ``Candidate`` (and of ``PlanPoint``), so a further
knob (the token budget) is one more field and one more loop here.

The engine's token budget per step (per attention-DP rank where the engine counts so) is a
knob too, as AIConfigurator searches it: ``token_budgets`` (aggregated deployments; a
disaggregated instance takes the engine's default, sized for the prompts where the engine does
not chunk them, ``serving.engines.engine_server``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    FORMAT_BITS,
    Architecture,
    Deployment,
    Disaggregation,
    Hardware,
    Precision,
    SpeculativeDecoding,
)
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine
from idealized_runtime.cost_model.hardware.engines.step import sized_token_budget
from idealized_runtime.cost_model.hardware.planner import GPUS_PER_NODE
from idealized_runtime.cost_model.planning.request import IDEAL_STACK, PlanRequest
from idealized_runtime.cost_model.serving.engines import (
    default_precision,
    published_acceptance,
    split_refusal,
)

MAX_WORKERS = 8  # prefill or decode instances of one xPyD replica
# x prefill : y decode instances tried: every coprime pair up to MAX_WORKERS each (AIConfigurator
# searches up to 8:1 too; (2, 2) is a replica of (1, 1) at twice the clients).
WORKER_PAIRS = tuple(
    (x, y)
    for x in range(1, MAX_WORKERS + 1)
    for y in range(1, MAX_WORKERS + 1)
    if math.gcd(x, y) == 1
)
NATIVE_FORMATS = (("fp8", "peak_fp8_tflops"), ("nvfp4", "peak_fp4_tflops"))
# Token budgets per step a plan tries (the engines' defaults are 8192).
TOKEN_BUDGETS = (4096, 8192, 16384)
MTP_DRAFTS = (1, 3)  # draft tokens of multi-token prediction tried
# KV memory fractions tried beside the engine's default where the KV cache limits the batch.
MEMORY_FRACTIONS = (0.95,)


@dataclass(frozen=True)
class Layout:
    """One instance's GPUs: tensor-parallel size, expert-parallel ranks, attention groups."""

    tp: int
    ep: int = 1
    attention_dp: int = 1


@dataclass(frozen=True)
class Candidate:
    """A deployment to evaluate on one engine stack, with the engine knobs searched: the token
    budget per step and the KV memory fraction (None: the engine's default, or the ideal
    server's)."""

    stack: str
    deployment: Deployment
    token_budget: int | None = None
    memory_fraction: float | None = None


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
    arch: Architecture,
    hardware: Hardware,
    weights: list[str] | None,
    kv_caches: list[str] | None = None,
    activations: str | None = None,
) -> list[Precision]:
    """The precisions tried on ``hardware`` (see the module docstring); ``weights`` fixes
    them (a format the GPU cannot compute in is refused later, in one line), ``kv_caches``
    the KV-cache formats; ``activations`` fixes the matmuls' input format (a smaller format
    that cannot take it is left out)."""
    found = [p for kv in kv_caches or [None]
             for p in _weight_precisions(arch, hardware, weights, kv, activations)]  # fmt: skip
    if kv_caches is None and hardware.peak_fp8_tflops is not None:
        found += [p.model_copy(update={"kv_cache": "fp8"}) for p in found
                  if FORMAT_BITS[p.kv_cache] > 8]  # fmt: skip
    if activations is None and hardware.peak_fp4_tflops is not None:
        # Blackwell multiplies MXFP4 experts by MXFP8 activations (W4A8): TensorRT-LLM's and
        # SGLang's default there, vLLM's with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8, a knob.
        mxfp4 = [p for p in found if p.weight_format == "mxfp4" and p.activations != "fp8"]
        found += [p.model_copy(update={"activations": "fp8"}) for p in mxfp4]
    return list(dict.fromkeys(found))


def _weight_precisions(
    arch: Architecture,
    hardware: Hardware,
    weights: list[str] | None,
    kv_cache: str | None,
    activations: str | None,
) -> list[Precision]:
    """The weight formats tried (see ``precisions``) with one KV-cache format (None: the
    engines' default for each)."""
    if weights:
        found = [default_precision(arch, weights=w, kv_cache=kv_cache, activations=activations)
                 for w in weights]  # fmt: skip
    else:
        own = default_precision(arch, kv_cache=kv_cache, activations=activations)
        found = [own]
        for fmt, peak in NATIVE_FORMATS:
            smaller = FORMAT_BITS[fmt] < FORMAT_BITS[own.weight_format]
            if smaller and getattr(hardware, peak) is not None:
                try:
                    found.append(default_precision(
                        arch, weights=fmt, kv_cache=kv_cache, activations=activations))  # fmt: skip
                except InputError:
                    continue  # e.g. fp8 activations asked, nvfp4 weights
    return found


def w4a8_by_default(stack: str, hardware: Hardware) -> bool:
    """Whether ``stack`` already serves MXFP4 experts with MXFP8 activations on ``hardware``
    (``kernel_fit.MOE_SERVED``): its W4A8 candidates would repeat its default ones."""
    if stack == IDEAL_STACK:
        return True  # the roofline's experts read 4-bit weights either way
    kernels = get_engine(stack).gpus.get(hardware.name)
    return kernels is not None and kernels.moe_served.get("mxfp4") == "mxfp4_mxfp8"


def engine_runs(stack: str, layout: Layout) -> bool:
    """Whether the engine of ``stack`` serves an instance split as ``layout``
    (``serving.engines.split_refusal``)."""
    return split_refusal(stack, layout.tp, layout.ep, layout.attention_dp) is None


def _splits_heads(arch: Architecture, tp: int) -> bool:
    return arch.num_heads % tp == 0 and (arch.kv_heads % tp == 0 or tp % arch.kv_heads == 0)


def _powers_of_two(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(max(limit, 1))) + 1)]


def layouts(arch: Architecture, max_gpus: int, scale_up_gpus: int | None = None) -> list[Layout]:
    """Layouts of one instance of at most ``max_gpus`` GPUs (see the module docstring); where
    one NVLink domain joins more GPUs than a node (``scale_up_gpus``, GB200 NVL72), a mixture
    of experts also spreads over more of them, wide expert-parallel as the deployments on such
    racks run it: every expert rank its own attention group (``ep = attention_dp = tp``)."""
    found = []
    for tp in _powers_of_two(min(max_gpus, GPUS_PER_NODE)):
        if arch.num_experts <= 1:
            if _splits_heads(arch, tp):
                found.append(Layout(tp))
            continue
        eps = [ep for ep in _powers_of_two(tp) if arch.num_experts % ep == 0]
        dps = [dp for dp in _powers_of_two(tp) if _splits_heads(arch, tp // dp)]
        found += [Layout(tp, ep, dp) for ep in eps for dp in dps]
    if arch.num_experts > 1 and scale_up_gpus:
        wide = _powers_of_two(min(max_gpus, scale_up_gpus))
        found += [Layout(tp, tp, tp) for tp in wide
                  if tp > GPUS_PER_NODE and arch.num_experts % tp == 0]  # fmt: skip
    return found


def speculative_options(arch: Architecture, stack: str) -> list[SpeculativeDecoding | None]:
    """No speculation, and multi-token prediction where the model's acceptance is published."""
    found: list[SpeculativeDecoding | None] = [None]
    if stack == IDEAL_STACK:
        return found
    for drafts in MTP_DRAFTS:
        rate = published_acceptance(arch.name, drafts)
        if rate is not None:
            found.append(SpeculativeDecoding(draft_tokens=drafts, acceptance_rate=rate))
    return found


def candidates(
    request: PlanRequest,
    stacks: list[str],
    fits: Callable[[str, Deployment], bool] = lambda stack, deployment: True,
    refused: list[str] | None = None,
) -> Iterator[Candidate]:
    """Every deployment the plan evaluates (see the module docstring), GPU by GPU;
    ``fits(stack, instance)``: whether an instance's weights fit its GPUs on the stack; the
    budgets left out are appended to ``refused``, one line each."""
    arch = request.architecture
    choices: dict[tuple[str, Layout], BudgetChoice] = {}
    for hardware in request.hardware:
        instance_layouts = layouts(arch, request.max_gpus, hardware.scale_up_gpus)
        for precision in precisions(
            arch, hardware, request.weights, request.kv_cache, request.activations
        ):
            w4a8 = precision.weight_format == "mxfp4" and precision.activations == "fp8"
            for stack in stacks:
                if w4a8 and request.activations is None and w4a8_by_default(stack, hardware):
                    continue
                ideal = stack == IDEAL_STACK
                base = Deployment(architecture=arch, hardware=hardware, precision=precision)
                mine = [
                    lay
                    for lay in instance_layouts
                    if (not ideal or lay.ep == lay.attention_dp == 1)
                    and engine_runs(stack, lay)
                    and (request.attention_dp or lay.attention_dp == 1)
                    and fits(stack, _with_layout(base, lay))
                ]
                drafts = speculative_options(arch, stack) if request.mtp else [None]
                for speculative in drafts:
                    drafted = base.model_copy(update={"speculative": speculative})
                    if "aggregated" in request.modes:
                        for lay in mine:
                            deployment = _with_layout(drafted, lay)
                            if ideal:
                                yield Candidate(stack, deployment)
                                continue
                            if (stack, lay) not in choices:
                                choices[stack, lay] = token_budgets(request, stack, lay)
                                if refused is not None:
                                    refused += choices[stack, lay].refused
                            for budget in choices[stack, lay].budgets:
                                yield Candidate(stack, deployment, token_budget=budget)
                    if "disaggregated" in request.modes and not ideal:
                        yield from _disaggregated(stack, drafted, mine, request.max_gpus)


def _with_layout(base: Deployment, layout: Layout) -> Deployment:
    return base.model_copy(
        update={"tp": layout.tp, "ep": layout.ep, "attention_dp": layout.attention_dp}
    )


def _disaggregated(
    stack: str, base: Deployment, instance_layouts: list[Layout], max_gpus: int
) -> Iterator[Candidate]:
    prefill_layouts = [
        lay for lay in instance_layouts if lay.attention_dp in (1, lay.tp) and lay.ep in (1, lay.tp)
    ]
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
                    prefill_attention_dp=prefill.attention_dp,
                )
                deployment = _with_layout(base, decode).model_copy(update={"disaggregation": split})
                yield Candidate(stack, deployment)
