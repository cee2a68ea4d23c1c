"""CLI: ``stacks`` lists the stacks estimates and simulations run on: the reference stacks the
hardware model is calibrated on, and the engine stacks (measured kernels and the engine's
scheduler), from ``cost_model.hardware.listing``."""

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
    """List the stacks: reference stacks (engines, GPUs, published sources, held-out errors)
    and engine stacks (GPUs, kernel versions and errors, scheduler defaults)."""
    from idealized_runtime.cost_model.hardware.listing import ENGINE, REFERENCE, stack_listing

    listing = stack_listing()
    if as_json:
        typer.echo(json.dumps(listing, indent=2))
        return
    references = [s for s in listing if s["kind"] == REFERENCE]
    engines = [s for s in listing if s["kind"] == ENGINE]
    header = (
        "stack", "engines", "GPUs", "figures", "sources", "decode in-sample", "decode by source",
        "decode by model", "TTFT by source", "TP ratio by source",
    )  # fmt: skip
    rows = []
    for stack in references:
        errors = stack["errors"]
        tp = errors.get("tp_speedup_leave_one_source_out", {})
        rows.append(
            (
                stack["name"] + (" (default)" if stack["default"] else ""),
                ", ".join(stack["engines"]),
                ", ".join(stack["hardware"]),
                str(len(stack["rows"])) if stack["rows"] else "grid",
                str(len(stack["sources"])),
                _error(errors, "in_sample", "decode"),
                _error(errors, "leave_one_source_out", "decode"),
                _error(errors, "leave_one_model_out", "decode"),
                _error(errors, "leave_one_source_out", "ttft"),
                _percent(tp.get("median")),
            )
        )
    _table(header, rows)
    typer.echo("errors: median |predicted / published - 1|, held out by source or by model")
    for stack in references:
        typer.echo(
            f"{stack['name']}: {stack['description']}; sources: {', '.join(stack['sources'])}"
        )
    typer.echo("")
    engine_header = (
        "engine stack", "GPUs", "kernels", "token budget", "chunked prefill", "admission",
        "kernel fits (median)",
    )  # fmt: skip
    engine_rows = []
    for engine in engines:
        scheduler, kernels = engine["scheduler"], engine["kernels"]
        medians = [
            e["median"] for k in kernels.values() for e in k["errors"].values() if "median" in e
        ]
        budget = f"{scheduler['token_budget']} ({scheduler['budget_setting']})"
        by_gpu = {
            gpu: values["token_budget"]
            for gpu, values in sorted(engine.get("scheduler_by_gpu", {}).items())
            if "token_budget" in values
        }
        if by_gpu:
            sizes = sorted(set(by_gpu.values()))
            budget += "; " + ", ".join(
                f"{b} on {', '.join(g for g, v in by_gpu.items() if v == b)}" for b in sizes
            )
        if scheduler.get("sized_budget") and not scheduler["chunked_prefill"]:
            budget += ", sized for the prompts"
        engine_rows.append(
            (
                engine["name"],
                ", ".join(engine["hardware"]),
                ", ".join(sorted({k["version"] for k in kernels.values()})),
                budget,
                "yes" if scheduler["chunked_prefill"] else "no",
                scheduler["admission"],
                _percent(sorted(medians)[len(medians) // 2] if medians else None),
            )
        )
    _table(engine_header, engine_rows)
    typer.echo("kernel fits: median over operations of the held-out median |error|")
    for engine in engines:
        typer.echo(f"{engine['name']}: {engine['description']}")
    both = sorted({s["name"] for s in references} & {s["name"] for s in engines})
    if both:
        typer.echo(
            f"--stack {', '.join(both)}: the engine stack (the reference stack of that name is "
            "the hardware model calibrated on its published figures)"
        )


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        typer.echo("  ".join(cells).rstrip())
