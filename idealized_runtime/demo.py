"""The offline demo: the whole path profile -> measurements -> fit -> measure -> store ->
compare -> report on a tiny model, on this machine's CPU, with the bundled HELM data.

Steps (each resumable; a second run reuses what the first wrote):
1. profile ``tiny-llama`` with the local runner on the quick grid and fit it (default + helm);
2. serve it behind its own OpenAI-compatible endpoint (``serve-model`` on 127.0.0.1, a free
   port), time it as a black box on the quick grid and fit the timings (denoised);
3. fit the bundled A100 reference profiles (helm + default), import HELM's idealized and
   denoised tables and its per-scenario accuracies;
4. store everything in the service database (SQLite file in the work folder by default);
5. write the leaderboard report from the database, with the board of today's models (the
   catalog's flagship configs on an H100 under a reference stack, beside HELM's 2022 stack).
Steps 1-2 are a ``bench`` run (results folder ``<workdir>/bench``), the same code path as
``idealized-runtime bench``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from idealized_runtime.bench.config import ApiModelSpec, BenchConfig, LocalModelSpec, item_key
from idealized_runtime.bench.manifest import MANIFEST_NAME
from idealized_runtime.bench.run import BenchResult, read_fits, run_bench
from idealized_runtime.core.catalog import (
    MEGATRON_A100_STACK,
    architectures,
    hardware_catalog,
    megatron_a100_measurements,
)
from idealized_runtime.core.errors import InputError
from idealized_runtime.leaderboard.build import Leaderboard, build_leaderboard
from idealized_runtime.leaderboard.current_models import CurrentModelsSpec
from idealized_runtime.processes import LOOPBACK, ServerStartError, free_port, running_server
from idealized_runtime.report.render import ReportFiles, write_report

DEMO_ARCHITECTURE = "tiny-llama"
DEMO_GRID = "quick"
PROFILE_REPEATS = 3
MEASURE_REPEATS = 2
SERVER_START_TIMEOUT_S = 90.0
HELM_REFERENCE_SET = "helm-a100-megatron-2022"
Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    workdir: Path
    database_url: str
    bench: tuple[BenchResult, ...]
    board: Leaderboard
    report: ReportFiles
    elapsed_s: float


def default_database_url(workdir: Path) -> str:
    return f"sqlite:///{(workdir / 'demo.sqlite3').resolve()}"


@contextlib.contextmanager
def local_endpoint(architecture: str, log_path: Path) -> Iterator[str]:
    """``serve-model`` in a subprocess on a free loopback port; yields its base URL and stops
    the process (by its PID) on exit."""
    port = free_port()
    command = [sys.executable, "-m", "idealized_runtime", "serve-model", "--arch", architecture]
    command += ["--host", LOOPBACK, "--port", str(port)]
    health_url = f"http://{LOOPBACK}:{port}/health"
    try:
        with running_server(
            command, health_url, timeout_s=SERVER_START_TIMEOUT_S, log_path=log_path
        ):
            yield f"http://{LOOPBACK}:{port}/v1"
    except ServerStartError as error:
        raise InputError(f"serve-model: {error}") from None


def _item_done(results_dir: Path, key: str) -> bool:
    manifest = results_dir / MANIFEST_NAME
    if not manifest.is_file():
        return False
    items = json.loads(manifest.read_text(encoding="utf-8")).get("items", [])
    return any(i["name"] == key and i["status"] == "done" for i in items)


def run_local_model(results_dir: Path, *, progress: bool, say: Say) -> list[BenchResult]:
    """Steps 1-2: profile and fit the demo model, then time it through its own endpoint."""
    local = LocalModelSpec(architecture=DEMO_ARCHITECTURE, repeats=PROFILE_REPEATS)
    say(f"profiling {DEMO_ARCHITECTURE} on the local runner ({DEMO_GRID} grid) and fitting it")
    results = [_checked(run_bench(BenchConfig(models=[local]), results_dir, progress=progress))]
    api_key = item_key(ApiModelSpec(base_url="http://127.0.0.1/v1", model=DEMO_ARCHITECTURE))
    if _item_done(results_dir, api_key):
        say("black-box timings already measured and fitted (resumed)")
        return results
    say(f"serving {DEMO_ARCHITECTURE} (serve-model) and timing it as a black box")
    with local_endpoint(DEMO_ARCHITECTURE, results_dir / "serve-model.log") as base_url:
        api = ApiModelSpec(
            base_url=base_url,
            model=DEMO_ARCHITECTURE,
            grid=DEMO_GRID,
            repeats=MEASURE_REPEATS,
            timeout_s=60.0,
        )
        config = BenchConfig(grid=DEMO_GRID, models=[api])
        results.append(_checked(run_bench(config, results_dir, progress=progress)))
    return results


def _checked(result: BenchResult) -> BenchResult:
    if result.failed:
        item = result.failed[0]
        raise InputError(f"demo step {item.name} failed: {item.error}")
    return result


def store_helm_reference(database_url: str, *, say: Say) -> None:
    """Step 3-4 for the bundled data: A100 profiles (fitted helm + default), HELM's tables and
    scenario results, the architectures and hardware catalog."""
    from idealized_runtime.api import report_database as database
    from idealized_runtime.core.scenarios import helm_scenario_results
    from idealized_runtime.report.inputs import a100_reference_profiles, helm_reference_models

    say("fitting the bundled A100 reference profiles (helm, default); loading HELM's tables")
    profiles = a100_reference_profiles()
    helm_models = helm_reference_models()
    imported = [
        fit for model in helm_models for fit in (model.idealized_fit, model.denoised_fit) if fit
    ]
    catalog = list(architectures().values())
    say("storing the HELM reference data in the service database")
    with database.write_session(database_url) as session:
        database.store_catalog(session, catalog, list(hardware_catalog().values()))
        database.store_measurement_set(
            session,
            name=HELM_REFERENCE_SET,
            source="import",
            measurements=megatron_a100_measurements(),
            fits=[fit for profile in profiles for fit in profile.fits],
            stack=MEGATRON_A100_STACK,
            metadata={"source": "stanford-crfm/helm-efficiency megatron_a100_runtimes.csv"},
        )
        database.store_imported_fits(session, imported)
        database.store_scenario_results(session, helm_scenario_results())


def store_bench_results(database_url: str, results_dir: Path, *, say: Say) -> None:
    """Step 4 for our own runs: each finished bench item's timings and fits."""
    from idealized_runtime.api import report_database as database
    from idealized_runtime.cost_model.fitting.measurements_io import read_measurements

    manifest = json.loads((results_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    say("storing the demo's profiles, timings and fits in the service database")
    with database.write_session(database_url) as session:
        for item in manifest["items"]:
            if item["status"] != "done":
                continue
            item_dir = results_dir / item["dir"]
            local = item["kind"] == "local"
            data = item_dir / ("measurements.csv" if local else "timings.jsonl")
            fits = read_fits(item_dir)
            database.store_measurement_set(
                session,
                name=f"{results_dir.resolve().parent.name}/{item['name']}",
                source="local_profile" if local else "api_timing",
                measurements=read_measurements(data),
                fits=fits,
                stack=fits[0].stack if fits else None,
                metadata={"bench_item": item["name"], "results_dir": str(results_dir)},
            )


def run_demo(
    workdir: str | Path,
    database_url: str | None = None,
    *,
    progress: bool = True,
    say: Say = print,
    current_models: CurrentModelsSpec | None = CurrentModelsSpec(),
) -> DemoResult:
    """Run (or resume) the demo in ``workdir`` and write its report to ``workdir/report``; with
    ``current_models`` (the flagship configs on an H100 by default) the board of today's models
    is in it."""
    from idealized_runtime.api import report_database as database
    from idealized_runtime.api.report_database import database_report_inputs

    started = time.perf_counter()
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    url = database_url or default_database_url(root)
    results_dir = root / "bench"
    with database.write_session(url):  # fails fast on an unusable database, before profiling
        pass
    bench = run_local_model(results_dir, progress=progress, say=say)
    store_helm_reference(url, say=say)
    store_bench_results(url, results_dir, say=say)
    say("building the leaderboard from the database and writing the report")
    board = build_leaderboard(database_report_inputs(url), current_models=current_models)
    report = write_report(board, root / "report")
    return DemoResult(root, url, tuple(bench), board, report, time.perf_counter() - started)
