"""A deployment served by an engine stack (``hardware.engines``): its step times on the
engine's measured kernels and the server the engine's defaults make (token budget, running
sequences, how prompts and decode tokens share a step, KV-cache capacity, admission, speculative
tokens); and the published acceptance of a model's multi-token prediction
(``data/speculative/acceptance.csv``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import fields, replace
from functools import lru_cache
from typing import Any

from scipy.optimize import brentq

from idealized_runtime.core.catalog import data_path
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture, Deployment, Precision, parse_precision
from idealized_runtime.cost_model.hardware.engines.catalog import EngineStack, get_engine
from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels
from idealized_runtime.cost_model.hardware.engines.step import (
    kernel_format,
    kv_capacity_tokens,
    sized_token_budget,
)
from idealized_runtime.cost_model.serving.simulator import ServerConfig
from idealized_runtime.cost_model.serving.step_time import EngineStepTime


def default_precision(
    architecture: Architecture,
    dtype: str = "bfloat16",
    weights: str | None = None,
    kv_cache: str | None = None,
    activations: str | None = None,
) -> Precision:
    """The precision an engine serves a checkpoint in: the options given, else the
    checkpoint's own (``quantization_config``), else ``dtype``; the KV cache as the engines'
    default for that checkpoint: fp8 for NVFP4 checkpoints (their quantization config quantizes
    the KV cache too), else the 16-bit compute dtype."""
    base = architecture.precision or Precision.from_dtype(dtype)  # type: ignore[arg-type]
    precision = parse_precision(weights, kv_cache, activations, default=base)
    if kv_cache is None and precision.weight_format == "nvfp4":
        precision = precision.model_copy(update={"kv_cache": "fp8"})
    return precision


# How an engine splits an instance's GPUs, where it cannot run every ``tp x dp = moe_tp x ep``
# split: TensorRT-LLM's attention data parallelism gives every rank its own attention (its
# Mapping's attention TP is 1 under enable_attention_dp), so attention groups are all GPUs or
# none; vLLM's experts are either tensor-parallel or expert-parallel over every GPU of the
# instance (--enable-expert-parallel makes the EP group the whole TP x DP world), never both.
# SGLang runs every split (--dp with --enable-dp-attention, --ep-size below --tp).
# AIConfigurator's search space encodes the same two rules.
WHOLE_ATTENTION_DP = frozenset({"tensorrt-llm"})
WHOLE_EXPERT_SPLIT = frozenset({"vllm"})


def split_refusal(engine: str, tp: int, ep: int, attention_dp: int) -> str | None:
    """Why ``engine`` cannot serve an instance of ``tp`` GPUs split so (one line), else None."""
    if engine in WHOLE_ATTENTION_DP and attention_dp not in (1, tp):
        return (
            f"{engine} gives every GPU of an instance its own attention or none: attention "
            f"data-parallel size {attention_dp} on {tp} GPUs is no split it runs (1 or {tp})"
        )
    if engine in WHOLE_EXPERT_SPLIT and ep not in (1, tp):
        return (
            f"{engine} splits an instance's experts over all its GPUs, tensor-parallel or "
            f"expert-parallel, not both: expert-parallel size {ep} on {tp} GPUs is no split it "
            f"runs (1 or {tp})"
        )
    return None


def _check_setting_kind(name: str, value: Any, default: Any) -> None:
    """InputError in one line unless ``value`` is of the kind of the setting's default: a
    switch takes true or false, a count a whole number, a fraction or time any number."""
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "a whole number"
    elif isinstance(default, float):
        ok, kind = isinstance(value, int | float) and not isinstance(value, bool), "a number"
    else:
        ok, kind = isinstance(value, type(default)), type(default).__name__
    if not ok:
        raise InputError(f"bad engine setting {name}={value!r}: {name} takes {kind}")


def engine_server(
    engine: EngineStack | str,
    deployment: Deployment,
    *,
    max_batch: int | None = None,
    token_budget: int | None = None,
    kv_tokens: int | None = None,
    settings: Mapping[str, Any] | None = None,
    longest_prompt: int | None = None,
    running: int | None = None,
) -> tuple[EngineStepTime, ServerConfig]:
    """The step times and the server of ``deployment`` on ``engine``; the options given
    override the engine's defaults (as its command-line flags would; per attention-DP rank where
    the engine states them so, ``limits_per_rank``): ``settings`` any of
    ``SchedulerDefaults``' fields (memory_fraction, cuda_graph_max_batch, admission,
    recv_interval, ...). With no budget given, prompts not chunked, an engine with a budget of
    its own for that takes it (``unchunked_budget``: SGLang), and one that sizes its budget
    (``SchedulerDefaults.sized_budget``) and does not chunk prompts takes
    ``sized_token_budget`` for ``longest_prompt`` (its new tokens) beside ``running``
    sequences (default: the running limit), per rank."""
    stack = get_engine(engine) if isinstance(engine, str) else engine
    refusal = split_refusal(stack.name, deployment.tp, deployment.ep, deployment.attention_dp)
    if refusal is not None:
        raise InputError(refusal)
    scheduler = stack.defaults_for(deployment)
    known = {f.name for f in fields(scheduler)}
    unknown = sorted(set(settings or {}) - known)
    if unknown:
        raise InputError(
            f"unknown engine settings {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    for name, value in (settings or {}).items():
        _check_setting_kind(name, value, getattr(scheduler, name))
    scheduler = replace(scheduler, **dict(settings or {}))
    spec = deployment.speculative
    decode_tokens = 1 + (spec.draft_tokens if spec is not None else 0)
    # Limits an engine states per attention-DP rank (TensorRT-LLM) hold on every rank.
    ranks = deployment.attention_dp if scheduler.limits_per_rank else 1
    # A budget given, as the option or as an engine setting, is the engine's flag: kept.
    given = token_budget is not None or "token_budget" in (settings or {})
    if token_budget is not None:
        scheduler = replace(scheduler, token_budget=token_budget)
    elif not given and not scheduler.chunked_prefill and scheduler.unchunked_budget:
        scheduler = replace(scheduler, token_budget=scheduler.unchunked_budget)
    elif not given and scheduler.sized_budget and not scheduler.chunked_prefill and longest_prompt:
        slots = max_batch or scheduler.max_running  # per rank
        per_rank = -(-(running or slots * ranks) // deployment.attention_dp)
        budget = sized_token_budget(
            scheduler.token_budget, longest_prompt, min(per_rank, slots), decode_tokens
        )
        scheduler = replace(scheduler, token_budget=budget)
    model = replace(stack.step_model(deployment), scheduler=scheduler)
    if scheduler.moe_runner:
        _check_moe_runner(stack.name, deployment, model.kernels, scheduler.moe_runner)
    config = ServerConfig(
        max_batch=(max_batch or scheduler.max_running) * ranks,
        token_budget=scheduler.token_budget * ranks,
        kv_capacity_tokens=kv_tokens or kv_capacity_tokens(deployment, scheduler),
        prefill_first=scheduler.prefill_first,
        chunked_prefill=scheduler.chunked_prefill,
        tokens_per_step=spec.tokens_per_step if spec is not None else 1.0,
        admission=scheduler.admission,
        recv_interval=scheduler.recv_interval,
        dp_ranks=deployment.attention_dp,
        decode_tokens=decode_tokens,
        balance_timeout_steps=scheduler.balance_timeout_steps,
        request_overhead_s=scheduler.residual_overhead_s(deployment.architecture.num_layers),
        unchunked_limit=scheduler.unchunked_limit,
        budget_setting=scheduler.budget_setting,
        request_path=scheduler.request_path,
    )
    return EngineStepTime(model), config


def _check_moe_runner(stack: str, deployment: Deployment, kernels: GpuKernels, runner: str) -> None:
    """Refuse, in one line, a MoE runner the engine's kernels on the deployment's GPU have no
    measurements of for its experts' format (a runner is a launch flag of the engine: one it
    was not measured with would silently leave the default kernels)."""
    gpu, arch = deployment.hardware.name, deployment.architecture
    if runner not in kernels.moe_runners:
        measured = ", ".join(repr(r) for r in kernels.moe_runners) or "none"
        raise InputError(
            f"moe_runner {runner!r}: {stack} on {gpu} has measured MoE runners {measured} "
            "beside its default"
        )
    if arch.num_experts <= 1:
        raise InputError(f"moe_runner {runner!r}: {arch.name} has no experts")
    experts = kernel_format(deployment.precision, experts=True)
    served = kernels.moe_served.get(experts, experts)
    formats = kernels.runner_formats(runner)
    if served not in formats:
        raise InputError(
            f"moe_runner {runner!r}: {stack} on {gpu} has it measured for "
            f"{', '.join(formats)} experts, not {served}"
        )


@lru_cache(maxsize=1)
def _acceptance_figures() -> dict[tuple[str, str], tuple[int, float]]:
    """(model, metric) -> (draft tokens, value) of the published acceptance figures."""
    with data_path("speculative", "acceptance.csv").open(encoding="utf-8", newline="") as handle:
        return {
            (r["model"], r["metric"]): (int(r["draft_tokens"]), float(r["value"]))
            for r in csv.DictReader(handle)
        }


def published_acceptance(model: str, draft_tokens: int) -> float | None:
    """The acceptance rate per draft token (``SpeculativeDecoding.acceptance_rate``) of
    ``model``'s multi-token prediction with ``draft_tokens`` drafts, from published figures;
    None when none are shipped. The first draft is accepted at its published rate a1; each
    later one, given the one before it was, at the rate a that gives the published acceptance
    length L at K drafts: L = 1 + a1 (1 - a^K) / (1 - a) (a module reused for later drafts
    is less accurate there). The rate returned gives the same expected tokens per step as this
    chain at ``draft_tokens`` drafts."""
    figures = _acceptance_figures()
    if (model, "first_draft_acceptance") not in figures or (
        model,
        "acceptance_length",
    ) not in figures:
        return None
    first = figures[model, "first_draft_acceptance"][1]
    published_k, length = figures[model, "acceptance_length"]
    later = brentq(lambda a: 1 + first * _series(a, published_k) - length, 1e-6, 1 - 1e-9)
    tokens = 1 + first * _series(later, draft_tokens)
    return float(brentq(lambda a: _series(a, draft_tokens + 1) - tokens, 1e-9, 1 - 1e-9))


def _series(rate: float, terms: int) -> float:
    """1 + rate + ... + rate^(terms - 1)."""
    return (1 - rate**terms) / (1 - rate)
