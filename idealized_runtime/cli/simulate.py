"""CLI: ``simulate`` an ideal continuous-batching server under load (``cost_model.serving``).

Writes request rows of the same shape as ``measure``'s raw JSONL, one load level after another,
and prints the per-level summary that ``summarize`` prints for measured runs. Runs no model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail
from idealized_runtime.core.errors import InputError

DEFAULT_REQUESTS = 200


def _architecture(name: str) -> Any:
    from idealized_runtime.core.architectures import load_architecture

    return load_architecture(name)


@app.command("simulate")
def simulate_command(
    output: Path = typer.Option(..., "-o", "--output", help="request rows (JSONL) to write"),
    arch: Optional[str] = typer.Option(  # noqa: UP045  (typer needs Optional on 3.10)
        None, "--arch", help="catalog name or HF config.json (roofline step times)"
    ),
    hardware: Optional[str] = typer.Option(  # noqa: UP045
        None, "--hardware", help="accelerator for the roofline model, e.g. h100-sxm"
    ),
    fit: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--fit",
        help="step times from a profile CSV with a batch grid, a serve-model --step-log JSONL, "
        "a serve-model engine profile JSON (POST /v1/engine/profile), or a step-time fit",
    ),
    save_fit: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--save-fit", help="write the step-time fit of --fit CSV to this JSON"
    ),
    workload: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--workload", help="trace: arrival_s, num_prompt_tokens, num_output_tokens"
    ),
    rate: list[str] = typer.Option([], "--rate", help="Poisson arrivals per second (list)"),
    concurrency: list[str] = typer.Option([], "--concurrency", help="closed-loop clients (list)"),
    think_time: float = typer.Option(
        0.0,
        "--think-time",
        help="closed loop: seconds from a request's end to its client's next request",
    ),
    prompt_tokens: Optional[int] = typer.Option(None, "--prompt-tokens", min=1),  # noqa: UP045
    output_tokens: Optional[int] = typer.Option(None, "--output-tokens", min=1),  # noqa: UP045
    grid: Optional[str] = typer.Option(  # noqa: UP045
        None, "--grid", help="request shapes drawn from a grid: quick, helm-synthetic or a file"
    ),
    max_batch: Optional[int] = typer.Option(  # noqa: UP045
        None,
        "--max-batch",
        min=1,
        help="requests decoded together (default 64, or the engine's; per attention-DP rank "
        "where the engine counts so: tensorrt-llm, vllm)",
    ),
    token_budget: Optional[int] = typer.Option(  # noqa: UP045
        None,
        "--token-budget",
        min=1,
        help="tokens per step: decode tokens + prompt chunks (default 256, or the engine's; "
        "tensorrt-llm: sized for the longest prompt beside every running sequence; per "
        "attention-DP rank where the engine counts so: tensorrt-llm, vllm)",
    ),
    ep: int = typer.Option(1, "--ep", min=1, help="expert-parallel size (engine stacks)"),
    attention_dp: int = typer.Option(
        1, "--attention-dp", min=1, help="attention data-parallel groups (engine stacks)"
    ),
    draft_tokens: Optional[int] = typer.Option(  # noqa: UP045
        None, "--draft-tokens", min=1, help="speculative decoding / MTP: draft tokens per step"
    ),
    acceptance: Optional[float] = typer.Option(  # noqa: UP045
        None, "--acceptance", help="speculative decoding: acceptance rate of each draft token"
    ),
    kv_tokens: Optional[int] = typer.Option(  # noqa: UP045
        None, "--kv-tokens", min=1, help="KV cache capacity in tokens (default: memory planner)"
    ),
    engine_settings: list[str] = typer.Option(
        [],
        "--engine-setting",
        help="engine stacks: a scheduler flag as KEY=VALUE, e.g. admission=forecast, "
        "memory_fraction=0.82, recv_interval=30, cuda_graph_max_batch=256 (repeatable)",
    ),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, help="tensor-parallel size"),  # noqa: UP045
    weights: Optional[str] = typer.Option(  # noqa: UP045
        None, "--weights", help="bf16 | fp16 | fp8 | int8[-gN] | int4[-gN] | mxfp4"
    ),
    kv_cache: Optional[str] = typer.Option(None, "--kv-cache", help="bf16 | fp8 | int8"),  # noqa: UP045
    activations: Optional[str] = typer.Option(  # noqa: UP045
        None, "--activations", help="bf16 | fp16 | fp8 (fp8 tensor cores)"
    ),
    stack: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--stack",
        help="engine stack (vllm, sglang, tensorrt-llm: measured kernels and the engine's "
        "scheduler), or a reference stack's efficiencies (see `stacks`); default: ideal",
    ),
    dtype: str = typer.Option("bfloat16", "--dtype", help="float16 | bfloat16 | float32"),
    requests: Optional[int] = typer.Option(  # noqa: UP045
        None, "--requests", min=1, help=f"requests per load level (default {DEFAULT_REQUESTS})"
    ),
    duration: Optional[float] = typer.Option(  # noqa: UP045
        None, "--duration", min=0, help="seconds of arrivals per load level instead"
    ),
    seed: int = typer.Option(0, "--seed", help="arrivals and shape draws"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Simulate an ideal continuous-batching server (FCFS, chunked prefill, KV capacity) for a
    model and a workload; rows as measure writes them, summary as summarize prints it."""
    from idealized_runtime.core.files import atomic_writer
    from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
    from idealized_runtime.cost_model.serving.step_time import FittedStepTime
    from idealized_runtime.timing.summary import summaries_to_json, summarize
    from idealized_runtime.timing.summary_text import format_table

    if sum(bool(x) for x in (workload, rate, concurrency)) != 1:
        fail("give exactly one of --workload, --rate or --concurrency")
    if fit is None and (arch is None or hardware is None):
        fail("the roofline step times need --arch and --hardware (or give --fit)")
    if requests is not None and duration is not None:
        fail("give --requests or --duration, not both")
    if output.is_dir():
        fail(f"{output}: is a folder; -o names the JSONL file to write")
    try:
        layout = _Layout(tp, ep, attention_dp, draft_tokens, acceptance)
        engine = _engine_stack(stack, fit)
        settings = _engine_settings(engine_settings)
        levels = _levels(
            workload, rate, concurrency, prompt_tokens, output_tokens, grid, requests,
            duration, seed,
        )  # fmt: skip
        if arch is not None:
            _check_context(_architecture(arch), levels, workload, grid)
        if engine is not None:
            # An engine that sizes its budget sizes it for the longest prompt beside the most
            # clients (every running sequence under open-loop arrivals).
            longest = max((s.num_prompt_tokens for _, shapes, _, _ in levels for s in shapes),
                          default=None)  # fmt: skip
            clients = [c for _, _, c, _ in levels]
            running = None if None in clients else max(clients, default=None)
            step_time, model, config = _engine_setup(
                engine, str(arch), str(hardware), layout, (weights, kv_cache, activations),
                dtype, max_batch, token_budget, kv_tokens, settings, (longest, running),
            )  # fmt: skip
        else:
            if settings:
                raise InputError("--engine-setting needs an engine stack (--stack vllm, ...)")
            if layout.engine_only():
                raise InputError(
                    "--ep, --attention-dp and --draft-tokens need an engine stack "
                    "(--stack vllm, sglang or tensorrt-llm)"
                )
            step_time, model, capacity = _step_time(
                arch, hardware, fit, tp, dtype, kv_tokens, stack, (weights, kv_cache, activations)
            )
            config = ServerConfig(max_batch or 64, token_budget or 256, capacity)
        if save_fit is not None:
            if not isinstance(step_time, FittedStepTime):
                fail("--save-fit needs --fit")
            with atomic_writer(save_fit) as handle:
                json.dump(step_time.to_dict(), handle, indent=1)
        rows: list[dict[str, Any]] = []
        warnings: dict[str, str] = {}
        for label, shapes, clients, stop_after in levels:
            warning = _starvation(config, shapes, clients)
            if warning:
                warnings[label] = warning
            level_rows = simulate(
                shapes,
                step_time,
                config,
                concurrency=clients,
                model=model,
                load=label,
                stop_after_s=stop_after,
                think_time_s=think_time,
            )
            for row in level_rows:
                row["run_id"] = f"simulated-seed{seed}"
                row["hardware"] = hardware
            rows.extend(level_rows)
    except InputError as error:
        fail(str(error))
    with atomic_writer(output) as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
    summaries = summarize(rows)
    if as_json:
        payload = summaries_to_json(summaries)
        for summary in payload:  # the summaries summarize prints, a level's warning beside
            if summary["load"] in warnings:
                summary["warning"] = warnings[summary["load"]]
        typer.echo(json.dumps(payload, indent=1))
        return
    typer.echo(format_table(summaries))
    for label, warning in warnings.items():
        typer.echo(f"warning ({label}): {warning}")


def _check_context(
    architecture: Any, levels: list[Any], workload: Path | None, grid: str | None
) -> None:
    """InputError when any request is longer than the model's context: refused whole, as
    estimate and plan refuse it, where simulating it would answer a latency no engine gives (an
    engine refuses such a request before serving it)."""
    shapes = [shape for _, level, _, _ in levels for shape in level]
    limit = architecture.max_context
    over = [s for s in shapes if s.num_prompt_tokens + s.num_output_tokens > limit]
    if not over:
        return
    first = over[0]
    if workload is None and grid is None:  # one shape for every request
        architecture.check_context(first.num_prompt_tokens, first.num_output_tokens)
    if workload is not None:
        index = next(i for i, s in enumerate(shapes) if s is first)
        where = f"{workload}: {len(over)} of {len(shapes)} requests"
        which = f"request {index + 1} of the trace"
    else:
        drawn = {(s.num_prompt_tokens, s.num_output_tokens) for s in shapes}
        too_long = {(s.num_prompt_tokens, s.num_output_tokens) for s in over}
        where = f"grid {grid}: {len(too_long)} of the {len(drawn)} shapes drawn"
        which = "one"
    raise InputError(
        f"{where} exceed the context length of {architecture.name} ({limit} tokens), {which} "
        f"with {first.num_prompt_tokens} prompt + {first.num_output_tokens} output tokens; "
        "drop them or simulate a model with a longer context"
    )


def _starvation(config: Any, shapes: list[Any], clients: int | None) -> str | None:
    """The simulator's starvation warning for one load level (its longest prompt's new
    tokens beside its clients, or the whole batch under open-loop arrivals)."""
    from idealized_runtime.cost_model.serving.simulator import starvation_warning

    if not shapes:
        return None
    longest = max(s.num_prompt_tokens - s.cached_tokens for s in shapes)
    return starvation_warning(config, longest, clients)


@dataclass(frozen=True)
class _Layout:
    tp: int | None
    ep: int
    attention_dp: int
    draft_tokens: int | None
    acceptance: float | None

    def engine_only(self) -> bool:
        return self.ep > 1 or self.attention_dp > 1 or self.draft_tokens is not None


def _engine_stack(stack: str | None, fit: Path | None) -> Any:
    """The engine stack ``--stack`` names (None for a reference stack or none)."""
    from idealized_runtime.cost_model.hardware.engines.catalog import engine_names, get_engine

    if stack is None or stack not in engine_names():
        return None
    if fit is not None:
        raise InputError("--stack with an engine and --fit are two ways to time steps; give one")
    return get_engine(stack)


def _engine_setup(
    engine: Any,
    arch: str,
    hardware: str,
    layout: _Layout,
    precision_options: tuple[str | None, str | None, str | None],
    dtype: str,
    max_batch: int | None,
    token_budget: int | None,
    kv_tokens: int | None,
    settings: dict[str, Any],
    workload: tuple[int | None, int | None] = (None, None),
) -> tuple[Any, str, Any]:
    """Step times and server of a deployment on an engine stack (its defaults, overridden by
    the options given; ``workload``: the longest prompt and the most clients, which an
    engine that sizes its budget sizes it for)."""
    from pydantic import ValidationError

    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.core.types import Deployment, SpeculativeDecoding
    from idealized_runtime.cost_model.serving.engines import default_precision, engine_server

    if arch == "None" or hardware == "None":
        raise InputError("an engine stack needs --arch and --hardware")
    architecture = _architecture(arch)
    if (layout.draft_tokens is None) != (layout.acceptance is None):
        raise InputError("speculative decoding needs both --draft-tokens and --acceptance")
    try:
        speculative = (
            SpeculativeDecoding(draft_tokens=layout.draft_tokens, acceptance_rate=layout.acceptance)
            if layout.draft_tokens is not None
            else None
        )
        deployment = Deployment(
            architecture=architecture,
            hardware=get_hardware(hardware),
            tp=layout.tp or 1,
            ep=layout.ep,
            attention_dp=layout.attention_dp,
            precision=default_precision(architecture, dtype, *precision_options),
            speculative=speculative,
            stack=engine.name,
        )
    except ValidationError as error:
        message = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError(message) from None
    step_time, config = engine_server(
        engine, deployment, max_batch=max_batch, token_budget=token_budget, kv_tokens=kv_tokens,
        settings=settings, longest_prompt=workload[0], running=workload[1],
    )  # fmt: skip
    return step_time, architecture.name, config


def _engine_settings(items: list[str]) -> dict[str, Any]:
    """``--engine-setting KEY=VALUE`` pairs, numbers and booleans parsed."""
    settings: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--engine-setting needs KEY=VALUE, got {item!r}")
        value: Any = raw.strip()
        if value.lower() in ("true", "false"):
            value = value.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(value)
                    break
                except ValueError:
                    continue
        settings[key.strip()] = value
    return settings


def _step_time(
    arch: str | None,
    hardware: str | None,
    fit: Path | None,
    tp: int | None,
    dtype: str,
    kv_tokens: int | None,
    stack: str | None = None,
    precision_options: tuple[str | None, str | None, str | None] = (None, None, None),
) -> tuple[Any, str, int | None]:
    from idealized_runtime.core.types import DTYPE_BYTES, IDEAL
    from idealized_runtime.cost_model.serving.simulator import kv_capacity_tokens
    from idealized_runtime.cost_model.serving.step_time import HardwareStepTime, read_step_fit

    if dtype not in DTYPE_BYTES:
        raise InputError(f"--dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    if fit is not None:
        if stack is not None or any(precision_options):
            raise InputError(
                "--stack and the precision options apply to the roofline step times, not to --fit"
            )
        step_time = read_step_fit(fit)
        return step_time, arch or step_time.model, kv_tokens
    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.core.types import Deployment, Precision, parse_precision
    from idealized_runtime.cost_model.hardware.planner import plan_gpus

    architecture = _architecture(str(arch))
    accelerator = get_hardware(str(hardware))
    # As `estimate`: the checkpoint's own precision (quantization_config), else --dtype.
    default = architecture.precision or Precision.from_dtype(dtype)  # type: ignore[arg-type]
    efficiency, stack_name = IDEAL, None
    if stack is not None:
        from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

        chosen = get_stack(stack)
        efficiency, stack_name = chosen.efficiency, chosen.name
    precision = parse_precision(*precision_options, default=default)
    if tp is None:  # the fewest GPUs that hold the weights
        tp = plan_gpus(architecture, accelerator, context_tokens=1, precision=precision).tp
    deployment = Deployment(
        architecture=architecture,
        hardware=accelerator,
        tp=tp,
        precision=precision,
        efficiency=efficiency,
        stack=stack_name,
    )
    capacity = kv_tokens or kv_capacity_tokens(deployment)
    step_time = HardwareStepTime(deployment)
    return step_time, architecture.name, capacity


def _levels(
    workload: Path | None,
    rate: list[str],
    concurrency: list[str],
    prompt_tokens: int | None,
    output_tokens: int | None,
    grid: str | None,
    requests: int | None,
    duration: float | None,
    seed: int,
) -> list[tuple[str, list[Any], int | None, float | None]]:
    """(load label, request shapes, closed-loop clients or None, stop issuing after) per level."""
    import numpy as np

    from idealized_runtime.core.load_levels import parse_load_levels
    from idealized_runtime.cost_model.serving.workload import (
        RequestShape,
        poisson_arrivals,
        read_workload,
    )

    if workload is not None:
        if rate or concurrency or grid or prompt_tokens or output_tokens:
            raise InputError("a --workload sets arrivals and shapes; drop the other load options")
        return [("trace", read_workload(workload), None, None)]
    if grid is not None and (prompt_tokens or output_tokens):
        raise InputError("give --grid or --prompt-tokens/--output-tokens, not both")
    if grid is not None:
        from idealized_runtime.timing.grids import load_grid

        points = [(p.num_prompt_tokens, p.num_output_tokens) for p in load_grid(grid)]
    elif prompt_tokens and output_tokens:
        points = [(prompt_tokens, output_tokens)]
    else:
        raise InputError("give --prompt-tokens and --output-tokens, or --grid")

    def shapes(count: int, arrivals: Any = None) -> list[Any]:
        draws = np.random.default_rng(seed).integers(0, len(points), size=count)
        return [
            RequestShape(*points[d], None if arrivals is None else float(arrivals[i]))
            for i, d in enumerate(draws)
        ]

    levels = []
    for value in parse_load_levels(rate, "--rate", integer=False):
        count = requests or (
            max(1, round(value * duration)) if duration is not None else DEFAULT_REQUESTS
        )
        arrivals = poisson_arrivals(value, count, seed)
        levels.append((f"rate={float(value)}", shapes(count, arrivals), None, None))
    for value in parse_load_levels(concurrency, "--concurrency", integer=True):
        if duration is not None:  # clients keep sending until the duration is over
            count = requests or max(value, int(duration * 1000))
            levels.append((f"concurrency={value}", shapes(count), value, duration))
        else:
            levels.append(
                (f"concurrency={value}", shapes(requests or DEFAULT_REQUESTS), value, None)
            )
    return levels
