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
from idealized_runtime.cost_model.hardware.planner import GPUS_PER_NODE, valid_tensor_parallel_sizes
from idealized_runtime.cost_model.planning.request import IDEAL_STACK, PlanRequest
from idealized_runtime.cost_model.serving.engines import default_precision

# x prefill : y decode instances tried (AIConfigurator and the engines' published xPyD runs use
# small coprime ratios; a larger fleet repeats the pair).
WORKER_PAIRS = ((1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2))
NATIVE_FORMATS = (("fp8", "peak_fp8_tflops"), ("nvfp4", "peak_fp4_tflops"))


@dataclass(frozen=True)
class Layout:
    """One instance's GPUs: tensor-parallel size, expert-parallel ranks, attention groups."""

    tp: int
    ep: int = 1
    attention_dp: int = 1


@dataclass(frozen=True)
class Candidate:
    """A deployment to evaluate on one engine stack."""

    stack: str
    deployment: Deployment


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


def candidates(request: PlanRequest, stacks: list[str]) -> Iterator[Candidate]:
    """Every deployment the plan evaluates (see the module docstring), GPU by GPU."""
    arch = request.architecture
    instance_layouts = layouts(arch, request.max_gpus)
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
                        yield Candidate(stack, _with_layout(base, lay))
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
