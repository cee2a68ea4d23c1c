"""CLI: ``import-helm`` (HELM runs -> one row per request)."""

from __future__ import annotations

from pathlib import Path

import typer

from idealized_runtime.cli import app
from idealized_runtime.cli.common import fail
from idealized_runtime.core.errors import InputError


@app.command("import-helm")
def import_helm(
    runs: list[Path] = typer.Argument(..., help="HELM run folder(s), suite(s) or runs/ root."),
    output: Path = typer.Option(..., "-o", "--output", help="Requests, .csv/.jsonl/.parquet."),
) -> None:
    """One row per HELM request (model, tokens, runtime_s, run, scenario, instance, trial,
    perturbation, HELM's idealized/denoised runtimes): input for convert, fit and uploads."""
    from idealized_runtime.timing.importers.helm import find_runs, import_helm, write_rows

    try:
        frame = import_helm(runs)
        write_rows(frame, output)
    except InputError as error:
        fail(str(error))
    except OSError as error:
        fail(f"{output}: cannot write ({error.strerror or error})")
    count = len(find_runs(runs))
    typer.echo(f"wrote {len(frame)} requests of {count} run(s) to {output}", err=True)
