"""The deployments a plan searches, per GPU and engine stack.

- precisions: the weight formats asked for, else the checkpoint's own and the smaller formats
  the GPU multiplies natively (fp8 on Hopper and Blackwell, nvfp4 on Blackwell), the KV cache as
  asked or in the engines' default for the checkpoint (``serving.engines.default_precision``);
- layouts of one instance (``layouts``): tensor-parallel sizes (powers of two within a node);
  for a mixture of experts every split of those GPUs into expert-parallel ranks (dividing the
  experts) and attention data-parallel groups (whose tensor-parallel share splits the heads),
  as AIConfigurator's ``tp x dp = moe_tp x ep`` grid; a dense model's attention is not
  data-parallel;
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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from idealized_runtime.core.types import (
    FORMAT_BITS,
    Architecture,
    Deployment,
    Disaggregation,
    Hardware,
    Precision,
    SpeculativeDecoding,
)
from idealized_runtime.cost_model.hardware.planner import GPUS_PER_NODE
from idealized_runtime.cost_model.planning.request import IDEAL_STACK, PlanRequest
from idealized_runtime.cost_model.serving.engines import default_precision, published_acceptance

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
    """A deployment to evaluate on one engine stack, with the engine knobs searched
    (None: the engine's default)."""

    stack: str
    deployment: Deployment
    memory_fraction: float | None = None


def precisions(
    arch: Architecture,
    hardware: Hardware,
    weights: list[str] | None,
    kv_cache: str | None = None,
) -> list[Precision]:
    """The precisions tried on ``hardware`` (see the module docstring); ``weights`` fixes
    them (a format the GPU cannot compute in is refused later, in one line)."""
    if weights:
        return [default_precision(arch, weights=w, kv_cache=kv_cache) for w in weights]
    own = default_precision(arch, kv_cache=kv_cache)
    found = [own]
    for fmt, peak in NATIVE_FORMATS:
        smaller = FORMAT_BITS[fmt] < FORMAT_BITS[own.weight_format]
        if smaller and getattr(hardware, peak) is not None:
            found.append(default_precision(arch, weights=fmt, kv_cache=kv_cache))
    return found


def _splits_heads(arch: Architecture, tp: int) -> bool:
    return arch.num_heads % tp == 0 and (arch.kv_heads % tp == 0 or tp % arch.kv_heads == 0)


def _powers_of_two(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(max(limit, 1))) + 1)]


def layouts(arch: Architecture, max_gpus: int) -> list[Layout]:
    """Layouts of one instance of at most ``max_gpus`` GPUs (see the module docstring)."""
    found = []
    for tp in _powers_of_two(min(max_gpus, GPUS_PER_NODE)):
        if arch.num_experts <= 1:
            if _splits_heads(arch, tp):
                found.append(Layout(tp))
            continue
        eps = [ep for ep in _powers_of_two(tp) if arch.num_experts % ep == 0]
        dps = [dp for dp in _powers_of_two(tp) if _splits_heads(arch, tp // dp)]
        found += [Layout(tp, ep, dp) for ep in eps for dp in dps]
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
) -> Iterator[Candidate]:
    """Every deployment the plan evaluates (see the module docstring), GPU by GPU;
    ``fits(stack, instance)``: whether an instance's weights fit its GPUs on the stack."""
    arch = request.architecture
    instance_layouts = layouts(arch, request.max_gpus)
    for hardware in request.hardware:
        for precision in precisions(arch, hardware, request.weights, request.kv_cache):
            for stack in stacks:
                ideal = stack == IDEAL_STACK
                base = Deployment(architecture=arch, hardware=hardware, precision=precision)
                mine = [
                    lay
                    for lay in instance_layouts
                    if (not ideal or lay.ep == lay.attention_dp == 1)
                    and fits(stack, _with_layout(base, lay))
                ]
                drafts = speculative_options(arch, stack) if request.mtp else [None]
                for speculative in drafts:
                    drafted = base.model_copy(update={"speculative": speculative})
                    if "aggregated" in request.modes:
                        for lay in mine:
                            yield Candidate(stack, _with_layout(drafted, lay))
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
