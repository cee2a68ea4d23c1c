"""CLI: ``stacks`` lists the reference stacks the hardware model is calibrated on."""

from __future__ import annotations

import json

import typer

from idealized_runtime.cli.app import app


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _error(stack_errors: dict, split: str, kind: str, stat: str = "median") -> str:
    return _percent(stack_errors.get(split, {}).get(kind, {}).get(stat))


@app.command("stacks")
def stacks(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (for scripts)."),
) -> None:
    """List the reference stacks: engines, GPUs, published sources and held-out errors."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, shipped_stacks

    found = shipped_stacks()
    if as_json:
        payload = [
            {**stack.to_json(), "default": name == DEFAULT_STACK} for name, stack in found.items()
        ]
        typer.echo(json.dumps(payload, indent=2))
        return
    header = (
        "stack",
        "engines",
        "GPUs",
        "figures",
        "sources",
        "decode in-sample",
        "decode by source",
        "decode by model",
        "TTFT by source",
        "TP ratio by source",
    )
    rows = []
    for name, stack in found.items():
        errors = stack.errors
        tp = errors.get("tp_speedup_leave_one_source_out", {})
        rows.append(
            (
                name + (" (default)" if name == DEFAULT_STACK else ""),
                ", ".join(stack.engines),
                ", ".join(stack.hardware),
                str(len(stack.rows)) if stack.rows else "grid",
                str(len(stack.sources)),
                _error(errors, "in_sample", "decode"),
                _error(errors, "leave_one_source_out", "decode"),
                _error(errors, "leave_one_model_out", "decode"),
                _error(errors, "leave_one_source_out", "ttft"),
                _percent(tp.get("median")),
            )
        )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        typer.echo("  ".join(cells).rstrip())
    typer.echo("errors: median |predicted / published - 1|, held out by source or by model")
    for name, stack in found.items():
        typer.echo(f"{name}: {stack.description}; sources: {', '.join(stack.sources)}")
