"""CLI: ``estimate`` one request's runtime, GPUs, GPU-seconds, energy and dollars.

Two modes, one command:

- ``--fit FIT.json --model M``: from a fit of measured timings (profiled);
- ``--arch NAME --hardware KIND``: from the hardware model, with no profile at all: calibrated
  (the shipped A100 Megatron-LM calibration, the HELM reference stack; the default) or the
  ideal roofline (``--ideal``). With ``--fit`` as well, a fit for the architecture wins
  (profiled), else the hardware model answers and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from idealized_runtime.cli import app
from idealized_runtime.cli.common import fail
from idealized_runtime.core.errors import InputError

if TYPE_CHECKING:  # the cost model and catalog load only when an estimate runs
    from cost_model.serving import Estimate
    from idealized_runtime.core.types import FittedCostModel

SOURCE_TEXT = {
    "profiled": "profiled (fit of measured timings)",
    "calibrated": "calibrated (hardware model, shipped {calibration} efficiencies)",
    "analytic": "analytic (ideal roofline, no overheads)",
}


def _read_fits(path: Path) -> dict[str, FittedCostModel]:
    from cost_model.fit_files import read_fit_file

    return read_fit_file(path)


def _print(estimate: Estimate, calibration: str) -> None:
    lines = [
        ("source", SOURCE_TEXT[estimate.source].format(calibration=calibration)),
        ("model", estimate.model),
        ("hardware", estimate.hardware or "unknown"),
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
    arch: str | None = typer.Option(None, "--arch", help="Architecture (hardware model)."),
    hardware: str | None = typer.Option(None, "--hardware", help="Accelerator, e.g. h100-sxm."),
    batch: int = typer.Option(1, "--batch", help="Sequences decoded together (hardware model)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (default: fewest)."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="float16 | bfloat16 | float32"),
    ideal: bool = typer.Option(False, "--ideal", help="Ideal roofline, no calibration."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (for scripts)."),
) -> None:
    """Estimate one request: runtime, alpha, beta, GPUs, GPU-seconds, energy and dollars."""
    from idealized_runtime.core.catalog import UnknownNameError

    try:
        result, calibration = _estimate(
            prompt_tokens, output_tokens, fit, model, arch, hardware, batch, tp, dtype, ideal
        )
    except (InputError, UnknownNameError) as error:
        fail(str(error))
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "calibration": calibration or None}))
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
) -> tuple[Estimate, str]:
    from cost_model.serving import Estimate, estimate_from_architecture, estimate_from_fit
    from idealized_runtime.core.catalog import get_architecture, get_hardware
    from idealized_runtime.core.types import DTYPE_BYTES, MAX_TOKENS

    if not 1 <= prompt_tokens <= MAX_TOKENS:
        raise InputError(f"--prompt-tokens must be from 1 to {MAX_TOKENS}, got {prompt_tokens}")
    if not 0 <= output_tokens <= MAX_TOKENS:
        # 0 output tokens: a prompt-only request (HELM's language modeling), alpha(p) alone.
        raise InputError(f"--output-tokens must be from 0 to {MAX_TOKENS}, got {output_tokens}")
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}")
    fits = _read_fits(fit_path) if fit_path is not None else {}
    hw = get_hardware(hardware_name) if hardware_name else None

    if arch_name is None:
        if fit_path is None or model is None:
            raise InputError("give --fit FIT.json --model M, or --arch NAME --hardware KIND")
        if model not in fits:
            known = ", ".join(sorted(fits)) or "none"
            raise InputError(f"{fit_path}: no fit for model {model!r}; known: {known}")
        if batch != 1 or tp is not None:
            raise InputError("--batch and --tp apply to the hardware model (--arch) only")
        return estimate_from_fit(fits[model], prompt_tokens, output_tokens, hardware=hw), ""

    architecture = get_architecture(arch_name)
    if hw is None:
        raise InputError("--arch needs --hardware (e.g. h100-sxm, a100-80gb)")
    profiled = fits.get(model or arch_name)
    if profiled is not None and batch == 1:
        stack = profiled.stack
        if stack is None or stack.hardware in (hw.name, "unknown"):
            result = estimate_from_fit(profiled, prompt_tokens, output_tokens, hardware=hw)
            return result, ""
    notes = []
    if fit_path is not None:
        notes.append(f"no batch-1 fit of {model or arch_name} on {hw.name} in {fit_path}")
    if ideal:
        from cost_model.roofline import IDEAL

        efficiency, source, calibration = IDEAL, "analytic", ""
    else:
        from cost_model.calibration import shipped_calibration

        shipped = shipped_calibration()
        efficiency, source, calibration = shipped.efficiency, "calibrated", shipped.name
    result = estimate_from_architecture(
        architecture,
        hw,
        prompt_tokens,
        output_tokens,
        batch_size=batch,
        tp=tp,
        dtype=dtype,  # type: ignore[arg-type]
        efficiency=efficiency,
        source=source,
    )
    if notes:
        result = Estimate(**{**result.__dict__, "notes": (*result.notes, *notes)})
    return result, calibration
