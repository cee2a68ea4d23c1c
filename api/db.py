"""Engine and sessions.

SQLite is configured for a multi-threaded server: WAL (readers never block the writer), foreign
keys on, a busy timeout, and write transactions that start with ``BEGIN IMMEDIATE`` so that two
writers queue on the busy timeout instead of failing when one upgrades a read lock. Read
sessions keep SQLite's deferred BEGIN, so reads stay concurrent.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from idealized_runtime.api.settings import Settings, get_settings
from idealized_runtime.core.errors import InputError

SQLITE_BUSY_TIMEOUT_MS = 30_000
_WRITE_OPTION = "ir_write_transaction"


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy (the "begin" hook below) emit BEGIN, not the sqlite3 module.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable with WAL except on power loss
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


# The databases the service is built and tested on.
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
URL_FORMS = "sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DATABASE"


def parse_database_url(text: str) -> URL:
    """The parsed URL; InputError (without the password) for one that is not a URL, names a
    database the service does not run on, or a driver that is not installed."""
    try:
        url = make_url(text)
    except ArgumentError:
        raise InputError(f"the database URL is not a URL; give {URL_FORMS}") from None
    backend = url.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise InputError(
            f"the database URL {redact(url)!r} names {backend}, which the service does not run "
            f"on; give {URL_FORMS}"
        )
    try:
        url.get_dialect()
    except ArgumentError as error:  # an unknown or missing driver
        raise InputError(f"not a usable database URL {redact(url)!r}: {error}") from None
    return url


def redact(url: str | URL) -> str:
    """The URL without its password, for messages and the report."""
    return make_url(url).render_as_string(hide_password=True)


def unreachable(url: str | URL, error: OperationalError) -> InputError:
    """The error of a database that refused the connection or the statement: its reason's first
    line (psycopg adds a hint on a second)."""
    reason = str(error.orig or error).strip().splitlines()
    return InputError(f"cannot use the database {redact(url)}: {reason[0] if reason else error}")


def make_engine(database_url: str) -> Engine:
    url = parse_database_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1e3}
        )
        _configure_sqlite(engine)
        return engine
    # The server runs sync endpoints on a thread pool of 40: let most of them hold a connection.
    return create_engine(url, pool_size=10, max_overflow=30, pool_pre_ping=True, pool_timeout=60)


class Database:
    """One engine with a read and a write session factory."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engine = make_engine(settings.database_url)
        self.read_sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.write_sessions = sessionmaker(
            self.engine.execution_options(**{_WRITE_OPTION: True}), expire_on_commit=False
        )

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def dispose(self) -> None:
        self.engine.dispose()


@lru_cache(maxsize=1)
def get_database() -> Database:
    return Database(get_settings())


def read_session() -> Iterator[Session]:
    """FastAPI dependency: a session for reads."""
    with get_database().read_sessions() as session:
        yield session


def write_session() -> Iterator[Session]:
    """FastAPI dependency: a session whose transaction may write (commit it explicitly)."""
    with get_database().write_sessions() as session:
        yield session
