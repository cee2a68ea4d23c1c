"""CLI: ``monitor`` (probe OpenAI-compatible endpoints round after round and store each round);
a thin layer over ``idealized_runtime.monitor``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail

if TYPE_CHECKING:
    from idealized_runtime.monitor.config import MonitorConfig
    from idealized_runtime.monitor.store import RoundStore

DEFAULT_KEY_ENV = "IDEALIZED_RUNTIME_API_KEY"
EXIT_INTERRUPTED = 130


def default_state_dir(config: Path) -> Path:
    return Path("monitor-state") / config.stem


@app.command("monitor")
def monitor_command(
    config: Path = typer.Argument(..., help="monitoring YAML file (see examples/monitor.yaml)"),
    to: Optional[str] = typer.Option(  # noqa: UP045  (typer needs Optional on 3.10)
        None, "--to", help="store rounds in this service (e.g. http://127.0.0.1:8000)"
    ),
    api_key_env: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--api-key-env",
        help=f"environment variable of the service's API key (default {DEFAULT_KEY_ENV})",
    ),
    database: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--database",
        help="store rounds in this database (default: the service's local SQLite database)",
    ),
    state: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--state", help="state folder (default monitor-state/<config file stem>)"
    ),
    once: bool = typer.Option(False, "--once", help="run one round and exit (cron, timers)"),
    rounds: Optional[int] = typer.Option(  # noqa: UP045
        None, "--rounds", min=1, help="stop once this many rounds exist (default: run on)"
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="a line per round"),
) -> None:
    """Probe every endpoint of CONFIG round after round (TTFT, ITL, output speed, denoised
    runtime against the idealized one, errors, dollars) and store each round; a line per shift
    flagged (and the file's on_flag hook); resumable. SIGTERM or Ctrl-C stop it cleanly."""
    from idealized_runtime.monitor.config import load_config
    from idealized_runtime.monitor.run import run_monitor

    settings = load_config(config)
    if to is not None and database is not None:
        fail("--to and --database exclude one another")
    store = _store(settings, to, api_key_env, database)
    folder = state or default_state_dir(config)

    def say(line: str) -> None:
        if progress:
            typer.echo(line, err=True)

    try:
        result = run_monitor(settings, folder, store, once=once, max_rounds=rounds, say=say)
    except KeyboardInterrupt:
        typer.echo(f"interrupted; rerun the same command to resume (state {folder})", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        store.close()
    notes = [f"{count} {what}" for count, what in
             ((result.degraded, "degraded"), (result.failed, "failed"),
              (result.flags, "shift(s) flagged")) if count]  # fmt: skip
    typer.echo(
        f"{result.rounds} round(s) run, {result.stored} stored in {store.name}"
        + (f" ({', '.join(notes)})" if notes else "")
        + f"; state {folder}",
        err=True,
    )
    if result.refused:
        fail(f"{len(result.refused)} round(s) refused by the store; first: {result.refused[0]}", 1)
    if result.waiting:
        fail(f"{result.waiting} round(s) wait to be stored; the next run sends them", 1)


def _store(
    settings: MonitorConfig, to: str | None, key_env: str | None, database: str | None
) -> RoundStore:
    """The store the options (else the file, else the local database) name; a service that
    refuses the key is one error line before any round."""
    from idealized_runtime.monitor.store import DatabaseStore, ServiceStore

    if to is None and database is None:
        if settings.service is not None:
            to, key_env = settings.service.url, key_env or settings.service.api_key_env
        elif settings.database is not None:
            database = settings.database
    if to is None:
        from idealized_runtime.api.settings import default_database_url, normalize_database_url

        return DatabaseStore(normalize_database_url(database or default_database_url()))
    if not to.startswith(("http://", "https://")):
        fail(f"--to must be the service's http(s):// URL, got {to!r}")
    key_env = key_env or DEFAULT_KEY_ENV
    key = os.environ.get(key_env)
    if not key:
        fail(f"--to needs the service's API key in the environment variable {key_env}")
    store = ServiceStore(to, key)
    if not store.check_key():
        store.close()
        fail(f"the service at {to} refused the API key in {key_env}")
    return store
