"""The REST service under test: the real CLI (`idealized-runtime serve`) in a subprocess on
127.0.0.1, against SQLite and, when ``DATABASE_URL_TEST`` is set, PostgreSQL.

Every test module gets its own database (SQLite: a temporary file; PostgreSQL: a fresh schema
selected with ``search_path``), so pytest-xdist workers never share tables."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import cli_command, create_api_key, serving_api

POSTGRES_URL = os.environ.get("DATABASE_URL_TEST", "")
BACKENDS = [
    "sqlite",
    pytest.param(
        "postgres",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(not POSTGRES_URL, reason="DATABASE_URL_TEST not set"),
        ],
    ),
]


@dataclass(frozen=True)
class Service:
    backend: str
    base_url: str
    key: str
    env: dict[str, str]

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def refused(
        self, client: httpx.Client, path: str, content: str | bytes, content_type: str
    ) -> Any:
        """POST ``content`` that the service must refuse as unprocessable (422): its detail."""
        response = client.post(
            path, content=content, headers={**self.auth, "content-type": content_type}
        )
        assert response.status_code == 422, response.text
        return response.json()["detail"]

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=60.0, **kwargs)  # type: ignore[arg-type]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli_command(*args),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def set_count(client: httpx.Client) -> int:
    """How many measurement sets are stored: a refused write must leave it as it was."""
    return client.get("/v1/measurement-sets", params={"limit": 1}).json()["total"]


def _postgres_schema_url(schema: str) -> str:
    separator = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"


def _psql(statement: str) -> None:
    import psycopg

    url = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement)


@pytest.fixture(scope="module", params=BACKENDS)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """A migrated, seeded server with an API key, for the whole test module."""
    home = tmp_path_factory.mktemp("ir-home")
    env = {"IDEALIZED_RUNTIME_HOME": str(home), "DATABASE_URL": ""}
    schema = None
    if request.param == "postgres":
        schema = f"ir_test_{uuid.uuid4().hex[:12]}"
        _psql(f"CREATE SCHEMA {schema}")
        env["DATABASE_URL"] = _postgres_schema_url(schema)
    env.update(getattr(request.module, "SERVER_ENV", {}))
    try:
        seed = subprocess.run(
            cli_command("db", "seed"), env={**os.environ, **env}, capture_output=True, text=True
        )
        assert seed.returncode == 0, seed.stderr
        key = create_api_key("tests", env)
        with serving_api(env, log_path=Path(home) / "server.log") as (base_url, _):
            yield Service(request.param, base_url, key, env)
    finally:
        if schema is not None:
            _psql(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as http:
        yield http
