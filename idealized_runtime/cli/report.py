"""CLI: ``demo``, ``bench``, ``report`` and ``leaderboard``; thin layers over
``idealized_runtime.demo``, ``idealized_runtime.bench``, ``idealized_runtime.leaderboard`` and
``idealized_runtime.report``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail, require_folder, stderr_console
from idealized_runtime.core.errors import InputError

SUMMARY_ROWS = 15  # models (architectures) in the terminal's leaderboard


def parse_stacks(value: str | None) -> tuple[str, ...]:
    """``--stacks NAME,NAME``: reference stack names, the first the ratios' baseline; unknown
    names are one ``error:`` line (exit 2). Empty: no comparison."""
    if value is None:
        return ()
    from idealized_runtime.leaderboard.stack_comparison import resolve_stacks

    return resolve_stacks(value.split(","))


SOURCE_HELP = "database URL or bench results folder (default: the bundled HELM data)"
WITH_HELM_HELP = "add the HELM reference models to a results folder"
STACKS_HELP = (
    "compare the models under reference stacks side by side: NAME,NAME (see 'stacks'; the "
    "first is the ratios' baseline), e.g. helm-megatron-2022,pytorch-compiled"
)


CURRENT_MODELS_HELP = (
    "add the board of today's models: 'flagship' (the catalog's flagship configs) or NAME,NAME "
    "(catalog architectures)"
)
CURRENT_GPU_HELP = "GPU of today's models (see data/hardware.yaml; default h100-sxm)"
CURRENT_STACK_HELP = "reference stack of today's models (see 'stacks'; default pytorch-compiled)"
CURRENT_SERVING_HELP = (
    "today's models at plan's best deployment under the standard SLO (1k/1k tokens, TTFT <= 2 s, "
    "TPOT <= 50 ms): shipped (the shipped figures, default), live (plan each model now: seconds "
    "to a minute each) or none"
)
PRICES_HELP = (
    "price table (YAML or CSV: provider, model, input/output_usd_per_mtok, architecture) to set "
    "providers' dollars beside the idealized ones"
)

if TYPE_CHECKING:
    from idealized_runtime.leaderboard.current_models import CurrentModelsSpec
    from idealized_runtime.leaderboard.rows import LeaderboardInputs


def current_models_spec(
    models: str | None,
    gpu: str | None,
    stack: str | None,
    prices: Path | None,
    serving: str | None = None,
) -> CurrentModelsSpec | None:
    """The board of today's models the options ask for: any of them adds it (the flagship
    configs unless ``models`` names others; ``none`` leaves it out). Bad names or a bad price
    table are one ``error:`` line, before anything is read or written."""
    if models is None and gpu is None and stack is None and prices is None and serving is None:
        return None
    if models is not None and models.strip() == "none":
        return None
    from idealized_runtime.core.prices import read_price_table
    from idealized_runtime.leaderboard.current_models import (
        DEFAULT_GPU,
        CurrentModelsSpec,
        parse_model_list,
    )

    spec = CurrentModelsSpec(
        models=parse_model_list(models or "flagship"),
        hardware=gpu or DEFAULT_GPU,
        prices=read_price_table(prices) if prices is not None else None,
        serving=serving or "shipped",  # type: ignore[arg-type]  (resolved() checks it)
    )
    if stack is not None:
        spec = CurrentModelsSpec(spec.models, spec.hardware, stack, spec.prices, spec.serving)
    return spec.resolved()


def leaderboard_inputs(source: str | None, with_helm: bool) -> LeaderboardInputs:
    """Inputs from ``--from``: the bundled HELM data (None), a database URL or a bench results
    folder."""
    from idealized_runtime.report import inputs

    if source is None:
        return inputs.bundled_helm_inputs()
    if "://" in source:
        from idealized_runtime.api.report_database import database_report_inputs

        return database_report_inputs(source)
    if Path(source).is_dir():
        return inputs.results_dir_inputs(source, with_helm=with_helm)
    fail(f"--from {source!r} is neither a database URL nor a results folder")


@app.command("demo")
def demo_command(
    workdir: Path = typer.Option(
        Path("idealized-runtime-demo"), "--workdir", help="folder for every output (resumable)"
    ),
    database_url: Optional[str] = typer.Option(  # noqa: UP045  (typer needs Optional on 3.10)
        None, "--database-url", help="service database (default: SQLite file in --workdir)"
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress bars"),
    current_models: str = typer.Option(
        "flagship", "--current-models", help=CURRENT_MODELS_HELP + "; none to leave it out"
    ),
    current_gpu: Optional[str] = typer.Option(None, "--current-gpu", help=CURRENT_GPU_HELP),  # noqa: UP045
    current_stack: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-stack", help=CURRENT_STACK_HELP
    ),
    current_serving: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-serving", help=CURRENT_SERVING_HELP
    ),
    prices: Optional[Path] = typer.Option(None, "--prices", help=PRICES_HELP),  # noqa: UP045
) -> None:
    """Offline demo: profile, serve, measure and fit a tiny model, load HELM's reference data,
    store everything and write the leaderboard report (with today's models)."""
    from rich.console import Console

    from idealized_runtime.demo import DEMO_ARCHITECTURE, run_demo
    from idealized_runtime.report.terminal import current_models_table, price_table, summary_table

    require_folder(workdir, "--workdir", "the demo's files")
    spec = current_models_spec(current_models, current_gpu, current_stack, prices, current_serving)
    out = Console(width=None if sys.stdout.isatty() else 160)
    steps = iter(range(1, 100))
    result = run_demo(
        workdir,
        database_url,
        progress=progress,
        say=lambda text: stderr_console().print(f"[bold cyan]step {next(steps)}[/] {text}"),
        current_models=spec,
    )
    out.print(summary_table(result.board, limit=SUMMARY_ROWS, highlight={DEMO_ARCHITECTURE}))
    if result.board.current_models is not None:
        out.print(current_models_table(result.board))
        if result.board.current_models.prices:
            out.print(price_table(result.board))
    from idealized_runtime.api.report_database import redact

    out.print(f"demo finished in {result.elapsed_s:.1f} s; database {redact(result.database_url)}")
    out.print(f"report: {result.report.html.resolve()}")


@app.command("bench")
def bench_command(
    config: Path = typer.Argument(..., help="benchmark YAML file (see examples/bench.yaml)"),
    output: Optional[Path] = typer.Option(  # noqa: UP045
        None, "-o", "--output", help="results folder (default: bench-results/<config file stem>)"
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress bars"),
) -> None:
    """Profile / measure and fit every model of a benchmark file; rerun to resume."""
    from rich.console import Console
    from rich.table import Table

    from idealized_runtime.bench.config import load_config
    from idealized_runtime.bench.run import default_results_dir, run_bench

    settings = load_config(config)
    results_dir = output or default_results_dir(config)
    require_folder(results_dir, "-o", "the results")
    started = time.perf_counter()
    result = run_bench(settings, results_dir, config_path=config, progress=progress)
    table = Table(title=f"bench {config}")
    for column in ("item", "status", "fits"):
        table.add_column(column)
    for item in result.items:
        status = "done (earlier run)" if item.skipped else item.status
        fits = ", ".join(
            f"{method} MAPE {fit.quality.mape:.1%}" if fit.quality else method
            for method, fit in item.fits.items()
        )
        table.add_row(item.name, status, fits or (item.error or ""))
    Console().print(table)
    notes = stderr_console()
    if settings.estimates:
        notes.print(f"{len(settings.estimates)} hardware-model estimate(s): estimates.json")
    notes.print(f"results: {results_dir} ({time.perf_counter() - started:.1f} s)")
    if result.failed:
        first = result.failed[0]
        fail(
            f"{len(result.failed)} of {len(result.items)} item(s) failed; first: {first.name}: "
            f"{first.error}; results kept in {results_dir}, rerun to resume",
            code=1,
        )


@app.command("report")
def report_command(
    source: Optional[str] = typer.Option(None, "--from", help=SOURCE_HELP),  # noqa: UP045
    output: Path = typer.Option(..., "-o", "--output", help="folder for index.html, .md, .csv"),
    with_helm: bool = typer.Option(True, "--with-helm/--no-helm", help=WITH_HELM_HELP),
    slo: Optional[str] = typer.Option(  # noqa: UP045
        None, "--slo", help="latency targets drawn on the load curves: ttft=S,tpot=S,e2e=S"
    ),
    stacks: Optional[str] = typer.Option(None, "--stacks", help=STACKS_HELP),  # noqa: UP045
    current_models: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-models", help=CURRENT_MODELS_HELP
    ),
    current_gpu: Optional[str] = typer.Option(None, "--current-gpu", help=CURRENT_GPU_HELP),  # noqa: UP045
    current_stack: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-stack", help=CURRENT_STACK_HELP
    ),
    current_serving: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-serving", help=CURRENT_SERVING_HELP
    ),
    prices: Optional[Path] = typer.Option(None, "--prices", help=PRICES_HELP),  # noqa: UP045
    window: str = typer.Option(
        "72h",
        "--window",
        help="monitoring trends: medians and spread over this window before the newest round "
        "(30m, 72h, 7d or all)",
    ),
    min_baseline_rounds: Optional[int] = typer.Option(  # noqa: UP045
        None,
        "--min-baseline-rounds",
        min=3,
        help="monitoring trends: rounds of a level before its shifts are flagged (default 20; "
        "as the monitoring file's changes.min_baseline_rounds)",
    ),
) -> None:
    """Write the leaderboard report: self-contained HTML, Markdown and CSV (and load.html with
    latency-throughput curves when the source holds load levels, trends.html with providers'
    trends when a database holds monitoring rounds)."""
    from idealized_runtime.report import load as load_report
    from idealized_runtime.report.trends import parse_window
    from idealized_runtime.timing.summary import parse_slo

    require_folder(output, "-o", "the report")
    targets = parse_slo(slo) if slo is not None else None
    trend_window = parse_window(window)
    compared = parse_stacks(stacks)  # an unknown name fails before anything is read or written
    current = current_models_spec(
        current_models, current_gpu, current_stack, prices, current_serving
    )
    from idealized_runtime.leaderboard.build import build_leaderboard
    from idealized_runtime.report.render import write_report
    from idealized_runtime.report.trends import write_trends_report

    curves: list = []
    series: list = []
    if source is not None and "://" in source:
        from idealized_runtime.api.report_database import database_curves, database_trends

        series = database_trends(source)
        if min_baseline_rounds is not None:
            from idealized_runtime.trends.changes import ChangeSettings
            from idealized_runtime.trends.series import build_series

            settings = ChangeSettings(
                min_baseline_rounds=min_baseline_rounds,
                baseline_rounds=max(ChangeSettings().baseline_rounds, min_baseline_rounds),
            )
            series = build_series([p for item in series for p in item.points], settings)
        try:
            loaded = leaderboard_inputs(source, with_helm)
        except InputError:
            if not series:
                raise
            # A monitor's database: the trends alone.
            typer.echo(f"trends: {write_trends_report(series, output, trend_window)}")
            return
        curves = database_curves(source)
    elif source is not None and Path(source).is_dir():
        curves = load_report.results_dir_curves(source, targets)
        if curves and not (Path(source) / "manifest.json").is_file():
            # Only load levels (measure/summarize outputs): the load page alone.
            path = load_report.write_load_report(curves, output, targets)
            typer.echo(f"load curves: {path}")
            return
        loaded = leaderboard_inputs(source, with_helm)
    else:
        loaded = leaderboard_inputs(source, with_helm)
    files = write_report(build_leaderboard(loaded, stacks=compared, current_models=current), output)
    typer.echo(f"report: {files.html}")
    if series:
        typer.echo(f"trends: {write_trends_report(series, output, trend_window)}")
    if curves:
        typer.echo(f"load curves: {load_report.write_load_report(curves, output, targets)}")


@app.command("leaderboard")
def leaderboard_command(
    source: Optional[str] = typer.Option(None, "--from", help=SOURCE_HELP),  # noqa: UP045
    with_helm: bool = typer.Option(True, "--with-helm/--no-helm", help=WITH_HELM_HELP),
    stacks: Optional[str] = typer.Option(None, "--stacks", help=STACKS_HELP),  # noqa: UP045
    limit: int = typer.Option(SUMMARY_ROWS, "--limit", min=1, help="models in the summary table"),
    as_json: bool = typer.Option(False, "--json", help="print the whole board as JSON"),
    current_models: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-models", help=CURRENT_MODELS_HELP
    ),
    current_gpu: Optional[str] = typer.Option(None, "--current-gpu", help=CURRENT_GPU_HELP),  # noqa: UP045
    current_stack: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-stack", help=CURRENT_STACK_HELP
    ),
    current_serving: Optional[str] = typer.Option(  # noqa: UP045
        None, "--current-serving", help=CURRENT_SERVING_HELP
    ),
    current_sort: str = typer.Option(
        "idealized",
        "--current-sort",
        help="order of today's models, best first: idealized, gpus, gpu-seconds, usd, "
        "usd-per-mtok, tokens-per-s, ratio, parameters, slo-tokens-per-gpu, slo-usd-per-mtok",
    ),
    prices: Optional[Path] = typer.Option(None, "--prices", help=PRICES_HELP),  # noqa: UP045
) -> None:
    """Print the leaderboard (fastest idealized runtime first), with --stacks the same models
    side by side under reference stacks, with --current-models today's models; `report` writes
    it all as HTML/Markdown/CSV."""
    import json

    from rich.console import Console

    from idealized_runtime.leaderboard.build import build_leaderboard, leaderboard_payload
    from idealized_runtime.leaderboard.current_models import SORT_KEYS
    from idealized_runtime.report.terminal import (
        current_models_table,
        price_table,
        stack_table,
        summary_table,
    )

    compared = parse_stacks(stacks)
    if current_sort not in SORT_KEYS:
        fail(f"--current-sort must be one of {', '.join(SORT_KEYS)}, got {current_sort!r}")
    current = current_models_spec(
        current_models, current_gpu, current_stack, prices, current_serving
    )
    board = build_leaderboard(
        leaderboard_inputs(source, with_helm), stacks=compared, current_models=current
    )
    if as_json:
        payload = leaderboard_payload(board)
        typer.echo(json.dumps(payload, default=_json_value, indent=1))
        return
    out = Console(width=None if sys.stdout.isatty() else 160)
    out.print(summary_table(board, limit=limit))
    if board.stack_comparison is not None:
        out.print(stack_table(board))
    if board.current_models is not None:
        out.print(current_models_table(board, sort=current_sort))
        if board.current_models.prices:
            out.print(price_table(board))


def _json_value(value: object) -> object:
    """JSON for the payload's pydantic rows and timestamps."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if hasattr(value, "isoformat"):
        return value.isoformat()  # type: ignore[attr-defined]
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
