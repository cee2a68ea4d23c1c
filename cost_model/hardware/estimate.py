"""Estimates: what one request, or decode at a batch size, takes and costs on real accelerators.

``estimate_from_fit``
    A fitted (profiled) model's runtime of a request, and its costs on the fit's hardware.
``plan_request`` / ``estimate_from_deployment`` / ``hardware_model_estimate`` / ``estimate_request``
    The hardware model's runtime of a request on the GPUs the planner chooses, on a reference
    stack (``stacks``) or the ideal roofline: what ``idealized-runtime estimate --arch`` and
    the REST API give.
``cost_variants``
    Accelerator-seconds, energy and dollars of a runtime on ``num_gpus`` GPUs.
``decode_throughput``
    Idealized decode throughput and cost per million output tokens at batch sizes 1..256:
    a step reads the weights once for the whole batch and each sequence's KV cache, and does
    batch x the FLOPs, so throughput grows with the batch until compute catches up with memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    BF16,
    IDEAL,
    Architecture,
    Deployment,
    Efficiency,
    FittedCostModel,
    Hardware,
    Precision,
    parse_precision,
)
from idealized_runtime.cost_model.hardware.counts import memory_per_gpu
from idealized_runtime.cost_model.hardware.planner import (
    DEFAULT_RESERVE_FRACTION,
    GB,
    plan_deployment,
)
from idealized_runtime.cost_model.hardware.roofline import (
    check_precision,
    decode_step_time,
    hardware_model_alpha,
    hardware_model_beta,
    hardware_model_runtime,
)
from idealized_runtime.cost_model.hardware.stacks.catalog import (
    DEFAULT_STACK,
    get_stack,
    shipped_stacks,
)

if TYPE_CHECKING:
    from idealized_runtime.cost_model.hardware.engines.catalog import EngineStack

BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def cost_variants(runtime_s: float, num_gpus: int, hardware: Hardware) -> dict[str, float]:
    """What ``runtime_s`` on ``num_gpus`` GPUs of ``hardware`` costs.

    - ``gpu_seconds``: runtime x GPUs (the cost-aware idealized runtime).
    - ``energy_j``: board power (TDP) x GPUs x runtime. An upper bound for the GPUs themselves
      (decode rarely draws full TDP) that leaves out host CPUs, networking and cooling (PUE).
    - ``cost_usd``: GPU-hours x the indicative hourly price in ``data/hardware.yaml``
      (0 where no price is known).
    """
    if not (math.isfinite(runtime_s) and runtime_s >= 0):
        raise InputError(f"runtime must be a finite non-negative number of seconds: {runtime_s}")
    if num_gpus < 1:
        raise InputError(f"num_gpus must be >= 1, got {num_gpus}")
    gpu_seconds = float(runtime_s) * num_gpus
    energy_j = hardware.board_power_w * gpu_seconds
    return {
        "runtime_s": float(runtime_s),
        "num_gpus": float(num_gpus),
        "gpu_seconds": gpu_seconds,
        "energy_j": energy_j,
        "energy_wh": energy_j / 3600.0,
        "cost_usd": hardware.hourly_price_usd * gpu_seconds / 3600.0,
    }


@dataclass(frozen=True)
class ThroughputPoint:
    """Decode at one batch size: step time, output tokens/s, cost per million output tokens."""

    batch_size: int
    num_gpus: int
    step_s: float
    tokens_per_s: float
    usd_per_million_tokens: float
    joules_per_token: float
    memory_bound: bool
    fits: bool  # weights + KV of the whole batch fit on ``num_gpus`` GPUs


def decode_throughput(
    deployment: Deployment,
    *,
    context_tokens: int,
    batch_sizes: Sequence[int] = BATCH_SIZES,
) -> list[ThroughputPoint]:
    """Idealized decode throughput per batch size at a context length, on the deployment's
    GPUs (one node: ``plan_deployment`` at batch 1 chooses them). Batches whose KV cache would
    not fit on them are still computed but flagged ``fits=False``."""
    arch, hardware, tp = deployment.architecture, deployment.hardware, deployment.tp
    if deployment.pp > 1:
        raise InputError(
            f"{arch.name} needs {deployment.num_gpus} {hardware.name} GPUs over {deployment.pp} "
            "pipeline stages; the throughput table models one node (pass tp explicitly)"
        )
    usable = hardware.memory_gb * GB * (1.0 - DEFAULT_RESERVE_FRACTION)
    points = []
    for batch in batch_sizes:
        at_batch = deployment.model_copy(update={"batch_size": batch})
        step = decode_step_time(at_batch, context_tokens)
        seconds = float(step.total_s)
        cost = cost_variants(seconds, tp, hardware)
        weights, kv = memory_per_gpu(
            arch, deployment.precision, tp=tp, context_tokens=context_tokens, batch_size=batch
        )
        points.append(
            ThroughputPoint(
                batch_size=batch,
                num_gpus=tp,
                step_s=seconds,
                tokens_per_s=batch / seconds,
                usd_per_million_tokens=cost["cost_usd"] / batch * 1e6,
                joules_per_token=cost["energy_j"] / batch,
                memory_bound=bool(step.memory_bound),
                fits=weights + kv <= usable,
            )
        )
    return points


# --- one request, end to end (what `idealized-runtime estimate` and the REST API print) -------


@dataclass(frozen=True)
class Estimate:
    """A request's runtime and costs, and where the figures come from.

    ``source``: ``profiled`` (a fit of measured timings), ``calibrated`` (the hardware model
    with a shipped stack calibration), ``analytic`` (the ideal roofline) or ``engine`` (an
    engine stack's measured kernels and scheduler, ``hardware.engines``).
    """

    source: str
    model: str
    hardware: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    batch_size: int
    runtime_s: float
    alpha_s: float
    beta_s: float  # mean seconds per decode step of this request
    tp: int
    num_gpus: int
    costs: dict[str, float]  # cost_variants(); empty when the hardware is unknown
    notes: tuple[str, ...] = ()
    precision: str | None = None  # Precision.label of a hardware-model estimate

    @property
    def output_tokens_per_s(self) -> float:
        return self.batch_size * self.num_output_tokens / self.runtime_s

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "model": self.model,
            "hardware": self.hardware,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_output_tokens": self.num_output_tokens,
            "batch_size": self.batch_size,
            "runtime_s": self.runtime_s,
            "alpha_s": self.alpha_s,
            "beta_s": self.beta_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "tensor_parallel_size": self.tp,
            "num_gpus": self.num_gpus,
            "precision": self.precision,
            **{k: v for k, v in self.costs.items() if k not in ("runtime_s", "num_gpus")},
            "notes": list(self.notes),
        }


def _check_tokens(num_prompt_tokens: int, num_output_tokens: int, batch_size: int) -> None:
    if num_prompt_tokens < 1 or num_output_tokens < 0:
        raise InputError("prompt token counts must be >= 1 and output token counts >= 0")
    if batch_size < 1:
        raise InputError(f"batch size must be >= 1, got {batch_size}")


def estimate_from_fit(
    fit: FittedCostModel,
    num_prompt_tokens: int,
    num_output_tokens: int,
    *,
    hardware: Hardware | None = None,
    num_gpus: int | None = None,
) -> Estimate:
    """A fitted (profiled) model's figures; costs on ``hardware`` (default: the fit's stack's,
    when the catalog knows it) over ``num_gpus`` (default: the stack's device count)."""
    from idealized_runtime.cost_model.fitting import evaluate

    _check_tokens(num_prompt_tokens, num_output_tokens, 1)
    runtime = float(evaluate.predict_runtime(fit, num_prompt_tokens, num_output_tokens))
    alpha = float(evaluate.predict_alpha(fit, num_prompt_tokens))
    steps = max(num_output_tokens - 1, 0)
    overhead = fit.overhead_s or 0.0
    beta = (
        (runtime - alpha - overhead) / steps
        if steps
        else fit.beta_s + fit.beta_per_context_token_s * num_prompt_tokens
    )
    stack = fit.stack
    tp = stack.tensor_parallel_size if stack else 1
    gpus = num_gpus or (stack.num_devices if stack else 1)
    notes = []
    if fit.prompt_sizes and num_prompt_tokens > max(fit.prompt_sizes):
        notes.append(
            f"prompt beyond the fit's profiled sizes (up to {max(fit.prompt_sizes)} tokens): "
            "its runtime is extrapolated"
        )
    if hardware is None and stack is not None:
        from idealized_runtime.core.catalog import hardware_catalog

        hardware = hardware_catalog().get(stack.hardware)
    if hardware is None:
        notes.append("hardware unknown: no GPU-seconds, energy or dollars")
    return Estimate(
        source="profiled",
        model=fit.model,
        hardware=hardware.name if hardware else None,
        num_prompt_tokens=num_prompt_tokens,
        num_output_tokens=num_output_tokens,
        batch_size=1,
        runtime_s=runtime,
        alpha_s=alpha,
        beta_s=beta,
        tp=tp,
        num_gpus=gpus,
        costs=cost_variants(runtime, gpus, hardware) if hardware else {},
        notes=tuple(notes),
    )


def plan_request(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: int,
    num_output_tokens: int,
    *,
    batch_size: int = 1,
    tp: int | None = None,
    precision: Precision = BF16,
    efficiency: Efficiency = IDEAL,
    stack: str | None = None,
) -> Deployment:
    """The deployment a request of ``batch_size`` identical sequences runs on: the smallest
    layout holding the weights and the KV cache of p + o tokens per sequence
    (``planner.plan_deployment``; ``tp`` fixes the tensor-parallel size). InputError for a
    request the model cannot serve (tokens, context length, a precision the GPU lacks)."""
    _check_tokens(num_prompt_tokens, num_output_tokens, batch_size)
    check_precision(hardware, precision)
    arch.check_context(num_prompt_tokens, num_output_tokens)
    return plan_deployment(
        arch,
        hardware,
        context_tokens=num_prompt_tokens + num_output_tokens,
        batch_size=batch_size,
        precision=precision,
        tp=tp,
        efficiency=efficiency,
        stack=stack,
    )


def estimate_from_deployment(
    deployment: Deployment,
    num_prompt_tokens: int,
    num_output_tokens: int,
    engine: EngineStack | None = None,
) -> Estimate:
    """The hardware model's figures for one request (the deployment's batch of identical
    sequences), on all of the deployment's GPUs. With pipeline stages the request still runs
    its layers one stage after another, so its time is that of all layers at the stage's
    tensor-parallel size. Source ``calibrated`` on a named stack, else ``analytic``; on an
    ``engine`` stack (source ``engine``) the request's prompt and decode steps on the engine's
    measured kernels, sent together to an idle engine (``engines.request``)."""
    _check_tokens(num_prompt_tokens, num_output_tokens, deployment.batch_size)
    notes = []
    if engine is not None:
        from idealized_runtime.cost_model.hardware.engines.request import request_times

        model = engine.step_model(deployment)  # refuses unmeasured GPUs and precisions
        alpha, runtime = request_times(model, num_prompt_tokens, num_output_tokens)
        next_step = request_times(model, num_prompt_tokens, 2)[1] - alpha
        notes.append(f"{engine.name} {engine.kernels(deployment.hardware.name).version} kernels")
    else:
        runtime = float(hardware_model_runtime(deployment, num_prompt_tokens, num_output_tokens))
        alpha = float(hardware_model_alpha(deployment, num_prompt_tokens))
        next_step = float(hardware_model_beta(deployment, num_prompt_tokens))
    steps = max(num_output_tokens - 1, 0)
    # With one output token there is no decode step to average over: report the time of the
    # step that would come next, at this context.
    beta = (runtime - alpha) / steps if steps else next_step
    if deployment.pp > 1:
        notes.append(f"{deployment.pp} pipeline stages of tensor-parallel size {deployment.tp}")
    return Estimate(
        source="engine" if engine else "calibrated" if deployment.stack else "analytic",
        model=deployment.architecture.name,
        hardware=deployment.hardware.name,
        num_prompt_tokens=num_prompt_tokens,
        num_output_tokens=num_output_tokens,
        batch_size=deployment.batch_size,
        runtime_s=runtime,
        alpha_s=alpha,
        beta_s=beta,
        tp=deployment.tp,
        num_gpus=deployment.num_gpus,
        costs=cost_variants(runtime, deployment.num_gpus, deployment.hardware),
        notes=tuple(notes),
        precision=deployment.precision.label,
    )


# --- estimates on a reference stack or an engine stack ----------------------------------


def hardware_model_estimate(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: int,
    num_output_tokens: int,
    *,
    batch_size: int = 1,
    tp: int | None = None,
    precision: Precision | None = None,
    ideal: bool = False,
    stack: str | None = None,
    engine: str | None = None,
    token_budget: int | None = None,
) -> tuple[Estimate, str]:
    """The hardware model's estimate as ``estimate --arch`` and the REST API give it: on a
    reference stack (source ``calibrated``; the stack's name is returned; default
    ``DEFAULT_STACK``), the ideal roofline (``ideal``: source ``analytic``, name ""), or an
    engine stack (``engine``: vllm, sglang, tensorrt-llm; source ``engine``, its name
    returned; InputError in one line when its KV cache cannot hold the request, or when the
    engine refuses the prompt for its token budget: ``token_budget``, else the engine's,
    sized for the request where the engine sizes it, ``engines.step.sized_token_budget``).
    ``precision`` defaults to the checkpoint's own (``arch.precision``), else bf16."""
    precision = precision or arch.precision or BF16
    chosen_engine = None
    if ideal and (stack is not None or engine is not None):
        raise InputError("a stack and the ideal roofline exclude one another")
    if token_budget is not None and engine is None:
        raise InputError("--token-budget applies to an engine stack (vllm, sglang, tensorrt-llm)")
    if engine is not None:
        from idealized_runtime.cost_model.hardware.engines.catalog import get_engine

        chosen_engine = get_engine(engine)
        efficiency, calibration = IDEAL, chosen_engine.name
    elif ideal:
        efficiency, calibration = IDEAL, ""
    else:
        chosen = get_stack(stack or DEFAULT_STACK)
        efficiency, calibration = chosen.efficiency_for(precision.weights), chosen.name
    deployment = plan_request(
        arch,
        hardware,
        num_prompt_tokens,
        num_output_tokens,
        batch_size=batch_size,
        tp=tp,
        precision=precision,
        efficiency=efficiency,
        stack=calibration or None,
    )
    if chosen_engine is not None:
        chosen_engine = _with_budget(
            chosen_engine, deployment, token_budget, num_prompt_tokens, num_output_tokens,
            batch_size,
        )  # fmt: skip
        _check_engine_cache(chosen_engine, deployment, num_prompt_tokens + num_output_tokens)
    estimate = estimate_from_deployment(
        deployment, num_prompt_tokens, num_output_tokens, chosen_engine
    )
    return estimate, calibration


def _with_budget(
    engine: EngineStack,
    deployment: Deployment,
    budget: int | None,
    prompt: int,
    output: int,
    batch: int,
) -> EngineStack:
    """``engine`` with its defaults for ``deployment`` (``EngineStack.defaults_for``) at
    ``budget`` tokens per step (else its default, sized for ``batch`` prompts sent together
    where the engine sizes it); InputError in one line when the engine refuses the request for
    that budget (``budget_refusal``)."""
    from idealized_runtime.cost_model.hardware.engines.step import (
        budget_refusal,
        sized_token_budget,
    )

    scheduler = engine.defaults_for(deployment)
    if budget is not None and budget < 1:
        raise InputError(f"--token-budget must be >= 1, got {budget}")
    if budget is None and scheduler.sized_budget and not scheduler.chunked_prefill:
        budget = sized_token_budget(scheduler.token_budget, prompt, batch - 1)
    budget = budget or scheduler.token_budget
    flag = f"--token-budget ({scheduler.budget_setting})"
    refusal = budget_refusal(
        scheduler.unchunked_limit, scheduler.chunked_prefill, budget, prompt, output, flag
    )
    if refusal:
        raise InputError(refusal)
    # The defaults resolved for the deployment: none sized by the GPU left to override them.
    return replace(engine, scheduler=replace(scheduler, token_budget=budget), gpu_defaults={})


def _check_engine_cache(engine: EngineStack, deployment: Deployment, tokens: int) -> None:
    from idealized_runtime.cost_model.hardware.engines.step import kv_capacity_tokens

    needed = deployment.batch_size * tokens
    capacity = kv_capacity_tokens(deployment, engine.scheduler)
    if needed > capacity:
        raise InputError(
            f"{engine.name} holds {capacity} tokens of KV cache for "
            f"{deployment.architecture.name} on {deployment.tp} {deployment.hardware.name}; the "
            f"request needs {needed} (raise --tp)"
        )


class HardwareModelRequest(Protocol):
    """What a hardware-model estimate reads from a request: the REST API's body, a benchmark
    file's ``estimates`` entry (any object with these attributes)."""

    prompt_tokens: int
    output_tokens: int
    batch_size: int
    weights: str | None
    kv_cache: str | None
    activations: str | None
    ideal: bool
    stack: str | None

    @property
    def tp(self) -> int | None: ...


def split_stack(name: str | None) -> tuple[str | None, str | None]:
    """(reference stack, engine stack) that ``name`` names: an engine stack (its measured
    kernels: vllm, sglang, tensorrt-llm) where it is one, else a reference stack. A name that is
    neither is one ``InputError`` line listing both kinds."""
    from idealized_runtime.cost_model.hardware.engines.catalog import engine_names

    if name is None:
        return None, None
    engines = engine_names()
    if name in engines:
        return None, name
    try:
        get_stack(name)
    except InputError:
        raise InputError(
            f"unknown stack {name!r}; known: {', '.join(sorted(engines))} (engine stacks), "
            f"{', '.join(sorted(shipped_stacks()))} (reference stacks)"
        ) from None
    return name, None


def estimate_request(
    request: HardwareModelRequest, arch: Architecture, hardware: Hardware
) -> tuple[Estimate, Precision, str]:
    """``hardware_model_estimate`` for ``request`` on ``arch`` and ``hardware`` (on an engine
    stack when ``request.stack`` names one): the precision parsed from the
    request's labels (unset parts: the checkpoint's own), the estimate, and the stack's name
    ("" for the ideal roofline). InputError for refused input."""
    stack, engine = split_stack(request.stack)
    precision = parse_precision(
        request.weights, request.kv_cache, request.activations, default=arch.precision
    )
    estimate, calibration = hardware_model_estimate(
        arch,
        hardware,
        request.prompt_tokens,
        request.output_tokens,
        batch_size=request.batch_size,
        tp=request.tp,
        precision=precision,
        ideal=request.ideal,
        stack=stack,
        engine=engine,
    )
    return estimate, precision, calibration
