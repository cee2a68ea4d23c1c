"""A deployment served by an engine stack (``hardware.engines``): its step times on the
engine's measured kernels and the server the engine's defaults make (token budget, running
sequences, how prompts and decode tokens share a step, KV-cache capacity, speculative tokens).
"""

from __future__ import annotations

from dataclasses import replace

from idealized_runtime.core.types import Architecture, Deployment, Precision, parse_precision
from idealized_runtime.cost_model.hardware.engines.catalog import EngineStack, get_engine
from idealized_runtime.cost_model.hardware.engines.step import kv_capacity_tokens
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


def engine_server(
    engine: EngineStack | str,
    deployment: Deployment,
    *,
    max_batch: int | None = None,
    token_budget: int | None = None,
    kv_tokens: int | None = None,
) -> tuple[EngineStepTime, ServerConfig]:
    """The step times and the server of ``deployment`` on ``engine``; the options given
    override the engine's defaults (as its command-line flags would)."""
    stack = get_engine(engine) if isinstance(engine, str) else engine
    model = stack.step_model(deployment)
    scheduler = stack.scheduler
    if token_budget is not None:
        scheduler = replace(scheduler, token_budget=token_budget)
    spec = deployment.speculative
    config = ServerConfig(
        max_batch=max_batch or scheduler.max_running,
        token_budget=scheduler.token_budget,
        kv_capacity_tokens=kv_tokens or kv_capacity_tokens(deployment, scheduler),
        prefill_first=scheduler.prefill_first,
        chunked_prefill=scheduler.chunked_prefill,
        tokens_per_step=spec.tokens_per_step if spec is not None else 1.0,
    )
    return EngineStepTime(replace(model, scheduler=scheduler)), config
