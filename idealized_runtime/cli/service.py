"""CLI of the REST service: ``serve``, ``db upgrade``, ``db seed``, ``apikey create``.

The database is ``$DATABASE_URL`` (PostgreSQL: ``postgresql+psycopg://user:pass@host/db``), else
a SQLite file under ``$IDEALIZED_RUNTIME_HOME`` (default ``~/.local/share/idealized-runtime``).
"""

from __future__ import annotations

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail

db_app = typer.Typer(help="Database maintenance (migrations, seed data).", no_args_is_help=True)
apikey_app = typer.Typer(help="API keys for the REST service's writes.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(apikey_app, name="apikey")


def _prepare_database() -> None:
    """Migrate to the newest schema and add the shipped architectures and hardware."""
    from sqlalchemy.exc import OperationalError

    from idealized_runtime.api.db import get_database, unreachable
    from idealized_runtime.api.migrate import upgrade
    from idealized_runtime.api.seed import seed_catalog

    database = get_database()
    try:
        upgrade(database.engine)
        with database.write_sessions() as session:
            seed_catalog(session)
    except OperationalError as error:
        raise unreachable(database.engine.url, error) from None


def _check_can_listen(host: str, port: int) -> None:
    """Fail with one line (not uvicorn's traceback) when the address is taken or invalid."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror}")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            fail(f"cannot listen on {host}:{port}: {error.strerror} (choose another --port)")


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on"),
    port: int = typer.Option(8000, min=1, max=65535),
    workers: int = typer.Option(1, min=1, max=64, help="Server processes"),
    log_level: str = typer.Option("warning", help="uvicorn log level"),
) -> None:
    """Migrate the database, then serve the REST API (OpenAPI docs at /docs)."""
    import uvicorn

    _check_can_listen(host, port)
    _prepare_database()
    uvicorn.run(
        "idealized_runtime.api.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
    )


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the schema migrations (and add missing shipped architectures and hardware)."""
    from idealized_runtime.api.db import get_database
    from idealized_runtime.api.migrate import current_revision

    _prepare_database()
    typer.echo(f"database at revision {current_revision(get_database().engine)}")


@db_app.command("seed")
def db_seed() -> None:
    """Load the bundled HELM reference: A100 profiles, HELM's fits, scenario accuracies."""
    from idealized_runtime.api.db import get_database
    from idealized_runtime.api.seed import seed_reference

    _prepare_database()
    with get_database().write_sessions() as session:
        report = seed_reference(session)
    typer.echo(
        f"seeded: {report.architectures} architectures, {report.hardware} hardware, "
        f"{report.measurements} measurements, {report.fits} fits, "
        f"{report.capability_scores} capability scores"
    )


@apikey_app.command("create")
def apikey_create(
    name: str = typer.Option("default", help="A label to recognise the key by"),
) -> None:
    """Create an API key and print it once (only its hash is stored)."""
    from idealized_runtime.api.db import get_database
    from idealized_runtime.api.security import create_api_key

    if not 1 <= len(name) <= 200:
        fail("--name must have 1 to 200 characters")
    _prepare_database()
    with get_database().write_sessions() as session:
        key = create_api_key(session, name)
    typer.echo(key.key)
