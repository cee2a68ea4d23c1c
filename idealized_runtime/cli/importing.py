"""CLI: ``import-helm`` (HELM runs) and ``import-results`` (other load generators' result
files): one row per request."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from idealized_runtime.cli.app import app
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


@app.command("import-results")
def import_results(
    files: list[Path] = typer.Argument(
        ..., help="Result files of guidellm, aiperf, genai-perf, vllm bench serve or llmperf."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Requests, .csv/.jsonl/.parquet."),
    format: str = typer.Option(
        "auto", "--format", help="auto | guidellm | aiperf | genai-perf | vllm | llmperf"
    ),
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="Model name for every row (for files that name none)."
    ),
    load: Optional[str] = typer.Option(  # noqa: UP045
        None, "--load", help='Load label for every row, e.g. "concurrency=8".'
    ),
    skip_errors: bool = typer.Option(False, "--skip-errors", help="Leave failed requests out."),
) -> None:
    """One row per request of other load generators' results (model, tokens, runtime_s, TTFT,
    ITL, TPOT, load, ok/error): input for fit --method denoised, convert and summarize."""
    from idealized_runtime.timing.importers.peers import FORMATS, write_results
    from idealized_runtime.timing.importers.peers import import_results as read_results

    if format != "auto" and format not in FORMATS:
        fail(f"unknown format {format!r}; choose auto or one of {', '.join(FORMATS)}")
    try:
        frame = read_results(files, format, model=model, load=load, skip_errors=skip_errors)
        write_results(frame, output)
    except InputError as error:
        fail(str(error))
    except OSError as error:
        reason = "it is a folder" if output.is_dir() else (error.strerror or str(error))
        fail(f"{output}: cannot write ({reason})")
    failed = int((~frame["ok"]).sum())
    sources = ", ".join(sorted(set(frame["source"])))
    note = f" ({failed} failed, marked ok=false)" if failed else ""
    typer.echo(f"wrote {len(frame)} requests{note} from {sources} to {output}", err=True)
