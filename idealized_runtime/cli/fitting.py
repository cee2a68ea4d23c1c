"""CLI: ``fit`` (timings -> fit file) and ``convert`` (request log -> idealized runtimes)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail
from idealized_runtime.core.errors import InputError

if TYPE_CHECKING:
    from idealized_runtime.core.types import FittedCostModel

# The cost model (numpy, pandas, pyarrow, scikit-learn) and the domain types (pydantic) are
# imported inside the commands, so that `--help` and the other commands start without them.
# Same names as core.types.FitMethod (tests/cost_model/test_frames.py checks they agree).
FIT_METHODS = ("helm", "default", "denoised")
FIT_FORMATS = ("native", "helm")


def _summary(fits: dict[str, FittedCostModel]) -> Any:
    from rich.table import Table

    table = Table(title="fits")
    for column in ("model", "method", "beta (ms/token)", "alpha range (s)", "R^2", "MAPE", "max"):
        table.add_column(column, justify="left" if column in ("model", "method") else "right")
    for model, fit in fits.items():
        quality = fit.quality
        table.add_row(
            model,
            fit.method,
            f"{fit.beta_s * 1e3:.3f}",
            f"{min(fit.prompt_runtimes_s):.4f}-{max(fit.prompt_runtimes_s):.4f}",
            f"{quality.r2:.4f}" if quality else "",
            f"{quality.mape:.2%}" if quality else "",
            f"{quality.max_error:.2%}" if quality else "",
        )
    return table


def _cannot_write(output: Path, error: OSError) -> str:
    reason = "it is a folder" if output.is_dir() else (error.strerror or str(error))
    return f"{output}: cannot write ({reason})"


@app.command("fit")
def fit(
    measurements: Path = typer.Argument(
        ..., help="Timings, .csv, .jsonl or .parquet (or a guidellm, aiperf, ... result file)."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Fit file to write (.json)."),
    method: str = typer.Option("default", "--method", help="helm | default | denoised"),
    format: str = typer.Option("native", "--format", help="native | helm (HELM's JSON table)"),
    helm_rounding: bool = typer.Option(
        False,
        "--helm-rounding",
        help="With --method helm: round to the millisecond as HELM's tables do (reproduces "
        "HELM's table from its grid exactly).",
    ),
) -> None:
    """Fit runtime(p, o) per model to timings and write a fit file."""
    if method not in FIT_METHODS:
        fail(f"unknown method {method!r}; choose one of {', '.join(FIT_METHODS)}")
    if format not in FIT_FORMATS:
        fail(f"unknown format {format!r}; choose one of {', '.join(FIT_FORMATS)}")
    if helm_rounding and method != "helm":
        fail(f"--helm-rounding applies to --method helm, not {method!r}")
    from rich.console import Console

    from idealized_runtime.cost_model.fitting.fit_files import write_fit_file
    from idealized_runtime.cost_model.fitting.measurements_io import read_measurements
    from idealized_runtime.cost_model.fitting.methods import (
        HELM_TABLE_DECIMALS,
        check_method,
        fit_measurements,
    )
    from idealized_runtime.timing.importers import peers

    try:
        chosen = check_method(method)
        # Other load generators' result files (guidellm, aiperf, ...) are imported on the way.
        source = (
            peers.import_results([measurements])
            if peers.is_result_file(measurements)
            else measurements
        )
        decimals = HELM_TABLE_DECIMALS if helm_rounding else None
        fits = fit_measurements(read_measurements(source), chosen, helm_decimals=decimals)
        write_fit_file(fits, output, format=format)  # type: ignore[arg-type]
    except InputError as error:
        fail(str(error) if error.path else f"{measurements}: {error}")
    except OSError as error:  # the output: a folder, a read-only place, a full disk
        fail(_cannot_write(output, error))
    out = Console()
    if not out.is_terminal:  # piped or captured: do not squeeze the table to 80 columns
        out = Console(width=160)
    out.print(_summary(fits))
    typer.echo(f"wrote {len(fits)} fit(s) to {output}", err=True)
    from idealized_runtime.local_runner.timing_quality import profile_warning

    warning = profile_warning(measurements)  # a profile the profiler found noisy
    if warning is not None:
        typer.echo(warning, err=True)


@app.command("convert")
def convert(
    requests: Path = typer.Argument(..., help="Requests, .csv, .jsonl or .parquet."),
    fit: list[Path] = typer.Option(..., "--fit", help="Fit file(s): native or HELM JSON."),
    output: Path = typer.Option(..., "-o", "--output", help="Output, .csv, .jsonl or .parquet."),
    skip_unknown: bool = typer.Option(False, "--skip-unknown", help="Drop unfitted models."),
) -> None:
    """Add idealized_runtime_s, denoised_runtime_s and runtime_discrepancy_s columns.

    Input columns: model, num_prompt_tokens, num_output_tokens (runtime_s optional: the
    discrepancy). Works chunk by chunk: memory stays flat on logs of any size. A request whose
    prompt is beyond its fit's profiled range is counted in one warning line."""
    from idealized_runtime.cost_model.fitting.convert import convert_file
    from idealized_runtime.cost_model.fitting.file_rows import file_format
    from idealized_runtime.cost_model.fitting.fit_files import read_fit_file

    try:
        file_format(output)
        fits = [read_fit_file(path) for path in fit]
        summary = convert_file(requests, fits, output, skip_unknown=skip_unknown)
    except InputError as error:
        fail(str(error))
    except OSError as error:
        fail(_cannot_write(output, error))
    notes = [f"wrote {summary.rows} rows to {output}"]
    if summary.dropped_unknown_rows:
        shown = ", ".join(summary.unknown_models[:5])
        notes.append(f"dropped {summary.dropped_unknown_rows} rows of unfitted models {shown}")
    if summary.skipped_failed:
        notes.append(f"skipped {summary.skipped_failed} failed requests")
    typer.echo("; ".join(notes), err=True)
    warning = summary.extrapolated.line()
    if warning is not None:
        typer.echo(warning, err=True)
