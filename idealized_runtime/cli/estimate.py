"""CLI: ``estimate`` one request's runtime, GPUs, GPU-seconds, energy and dollars.

Two modes, one command:

- ``--fit FIT.json --model M``: from a fit of measured timings (profiled);
- ``--arch NAME --hardware KIND``: from the hardware model, with no profile at all: calibrated
  on a reference stack (``--stack NAME``; default: the best-calibrated modern stack, see
  ``idealized-runtime stacks``; ``helm-megatron-2022`` is HELM's 2022 stack) or the ideal
  roofline (``--ideal``), or on an engine stack (``--stack vllm|sglang|tensorrt-llm``: the
  request's steps on the engine's measured kernels). With ``--fit`` as well, a fit for the
  architecture wins (profiled), else the hardware model answers and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail
from idealized_runtime.core.errors import InputError

if TYPE_CHECKING:  # the cost model and catalog load only when an estimate runs
    from idealized_runtime.core.types import FittedCostModel
    from idealized_runtime.cost_model.hardware.estimate import Estimate

SOURCE_TEXT = {
    "profiled": "profiled (fit of measured timings)",
    "calibrated": "calibrated (hardware model, reference stack {calibration})",
    "analytic": "analytic (ideal roofline, no overheads)",
    "engine": "engine stack {calibration} (its measured kernels and scheduler)",
}


def _read_fits(path: Path) -> dict[str, FittedCostModel]:
    from idealized_runtime.cost_model.fitting.fit_files import read_fit_file

    return read_fit_file(path)


def _print(estimate: Estimate, calibration: str) -> None:
    lines = [
        ("source", SOURCE_TEXT[estimate.source].format(calibration=calibration)),
        ("model", estimate.model),
        ("hardware", estimate.hardware or "unknown"),
        *([("precision", estimate.precision)] if estimate.precision else []),
        (
            "request",
            f"{estimate.num_prompt_tokens} prompt + {estimate.num_output_tokens} output tokens"
            + (f", batch {estimate.batch_size}" if estimate.batch_size > 1 else ""),
        ),
        ("runtime", f"{estimate.runtime_s:.4f} s"),
        ("alpha(p)", f"{estimate.alpha_s:.4f} s  (prompt + first output token)"),
        ("beta", f"{estimate.beta_s * 1e3:.3f} ms per further output token"),
        ("throughput", f"{estimate.output_tokens_per_s:,.1f} output tokens/s"),
        ("GPUs", f"{estimate.num_gpus} (tensor-parallel {estimate.tp})"),
    ]
    costs = estimate.costs
    if costs:
        lines += [
            ("GPU-seconds", f"{costs['gpu_seconds']:.4f}"),
            ("energy", f"{costs['energy_j']:.1f} J  (board power x GPUs x runtime)"),
            ("dollars", f"${costs['cost_usd']:.6f}  (indicative hourly price)"),
        ]
    lines += [("note", note) for note in estimate.notes]
    width = max(len(name) for name, _ in lines)
    for name, value in lines:
        typer.echo(f"{name:<{width}}  {value}")


@app.command("estimate")
def estimate(
    prompt_tokens: int = typer.Option(..., "--prompt-tokens", "-p", help="Prompt tokens p."),
    output_tokens: int = typer.Option(..., "--output-tokens", "-o", help="Output tokens o."),
    fit: Path | None = typer.Option(None, "--fit", help="Fit file (native or HELM JSON)."),
    model: str | None = typer.Option(None, "--model", help="Model name in the fit file."),
    arch: str | None = typer.Option(None, "--arch", help="Catalog name or HF config.json."),
    hardware: str | None = typer.Option(None, "--hardware", help="Accelerator, e.g. h100-sxm."),
    batch: int = typer.Option(1, "--batch", help="Sequences decoded together (hardware model)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (default: fewest)."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="float16 | bfloat16 | float32"),
    weights: str | None = typer.Option(
        None,
        "--weights",
        help="bf16 | fp16 | fp8 | int8[-gN] | int4[-gN] | mxfp4 (default: the checkpoint's, "
        "else --dtype).",
    ),
    kv_cache: str | None = typer.Option(None, "--kv-cache", help="bf16 | fp16 | fp8 | int8"),
    activations: str | None = typer.Option(
        None, "--activations", help="bf16 | fp16 | fp8 (fp8: fp8 tensor cores, fp8 weights)"
    ),
    ideal: bool = typer.Option(False, "--ideal", help="Ideal roofline, no calibration."),
    stack: str | None = typer.Option(
        None,
        "--stack",
        help="Engine stack (vllm, sglang, tensorrt-llm) or reference stack (see 'stacks'); "
        "default: best-calibrated modern.",
    ),
    token_budget: int | None = typer.Option(
        None,
        "--token-budget",
        help="Engine stacks: tokens per step (default the engine's; tensorrt-llm: sized for "
        "the prompts). An engine that does not chunk prompts refuses a longer one.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (for scripts)."),
) -> None:
    """Estimate one request: runtime, alpha, beta, GPUs, GPU-seconds, energy and dollars."""
    from idealized_runtime.core.catalog import UnknownNameError

    try:
        result, calibration = _estimate(
            prompt_tokens,
            output_tokens,
            fit,
            model,
            arch,
            hardware,
            batch,
            tp,
            dtype,
            ideal,
            (weights, kv_cache, activations),
            stack,
            token_budget,
        )
    except (InputError, UnknownNameError) as error:
        fail(str(error))
    if as_json:
        payload = {**result.to_dict(), "calibration": calibration or None}
        typer.echo(json.dumps({**payload, "stack": calibration or None}))
    else:
        _print(result, calibration)


def _estimate(
    prompt_tokens: int,
    output_tokens: int,
    fit_path: Path | None,
    model: str | None,
    arch_name: str | None,
    hardware_name: str | None,
    batch: int,
    tp: int | None,
    dtype: str,
    ideal: bool,
    precision_options: tuple[str | None, str | None, str | None] = (None, None, None),
    stack_name: str | None = None,
    token_budget: int | None = None,
) -> tuple[Estimate, str]:
    from idealized_runtime.core.architectures import load_architecture
    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.core.types import DTYPE_BYTES, MAX_TOKENS, Precision, parse_precision
    from idealized_runtime.cost_model.hardware.estimate import (
        Estimate,
        estimate_from_fit,
        hardware_model_estimate,
        split_stack,
    )

    if not 1 <= prompt_tokens <= MAX_TOKENS:
        raise InputError(f"--prompt-tokens must be from 1 to {MAX_TOKENS}, got {prompt_tokens}")
    if not 0 <= output_tokens <= MAX_TOKENS:
        # 0 output tokens: a prompt-only request (HELM's language modeling), alpha(p) alone.
        raise InputError(f"--output-tokens must be from 0 to {MAX_TOKENS}, got {output_tokens}")
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}")
    # An unknown stack fails first, whatever else is wrong.
    reference_stack, engine = split_stack(stack_name)
    if token_budget is not None and engine is None:
        raise InputError("--token-budget applies to an engine stack (vllm, sglang, tensorrt-llm)")
    if stack_name is not None:
        if arch_name is None:
            raise InputError("--stack applies to the hardware model (--arch) only")
        if ideal:
            raise InputError("--stack and --ideal exclude one another")
    fits = _read_fits(fit_path) if fit_path is not None else {}
    hw = get_hardware(hardware_name) if hardware_name else None

    if arch_name is None:
        if fit_path is None or model is None:
            raise InputError("give --fit FIT.json --model M, or --arch NAME --hardware KIND")
        if model not in fits:
            known = ", ".join(sorted(fits)) or "none"
            raise InputError(f"{fit_path}: no fit for model {model!r}; known: {known}")
        if batch != 1 or tp is not None or any(precision_options):
            raise InputError(
                "--batch, --tp, --weights, --kv-cache and --activations apply to the hardware "
                "model (--arch) only"
            )
        return estimate_from_fit(fits[model], prompt_tokens, output_tokens, hardware=hw), ""

    architecture = load_architecture(arch_name)
    if hw is None:
        raise InputError("--arch needs --hardware (e.g. h100-sxm, a100-80gb)")
    default = architecture.precision
    if default is None or dtype != "bfloat16":
        default = Precision.from_dtype(dtype)  # type: ignore[arg-type]
    precision = parse_precision(*precision_options, default=default)
    label = model or architecture.name
    profiled = fits.get(label)
    if profiled is not None and batch == 1 and not any(precision_options):
        stack = profiled.stack
        if stack is None or stack.hardware in (hw.name, "unknown"):
            result = estimate_from_fit(profiled, prompt_tokens, output_tokens, hardware=hw)
            return result, ""
    notes = []
    if fit_path is not None:
        notes.append(f"no batch-1 fit of {label} on {hw.name} in {fit_path}")
    result, calibration = hardware_model_estimate(
        architecture,
        hw,
        prompt_tokens,
        output_tokens,
        batch_size=batch,
        tp=tp,
        precision=precision,
        ideal=ideal,
        stack=reference_stack,
        engine=engine,
        token_budget=token_budget,
    )
    if notes:
        result = Estimate(**{**result.__dict__, "notes": (*result.notes, *notes)})
    return result, calibration
