"""CLI errors of the service commands: one line, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import cli_command


def test_serve_on_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            cli_command("serve", "--port", str(port)),
            env={**os.environ, "IDEALIZED_RUNTIME_HOME": str(tmp_path), "DATABASE_URL": ""},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: cannot listen on 127.0.0.1:")
    assert result.stderr.strip().count("\n") == 0


def test_an_exit_inside_a_command_keeps_its_code_without_a_second_traceback() -> None:
    # main() named a class the vendored click lacks (Abort): any SystemExit or unexpected error
    # from a command turned into an AttributeError traceback.
    script = (
        "import sys, typer\n"
        "from idealized_runtime.cli import app, main\n"
        "@app.command('exit-three')\n"
        "def exit_three() -> None:\n"
        "    sys.exit(3)\n"
        "sys.argv = ['idealized-runtime', 'exit-three']\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 3, result.stderr
    assert "AttributeError" not in result.stderr


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"DATABASE_URL": "notaurl"}, "error: the database URL is not a URL; give sqlite:///"),
        # another database than the two the service runs on; the password never printed
        (
            {"DATABASE_URL": "mysql://user:secret@127.0.0.1/db"},
            "error: the database URL 'mysql://user:***@127.0.0.1/db' names mysql",
        ),
        # psycopg's reason has a hint on a second line: the first is the reason
        (
            {"DATABASE_URL": "postgresql://user:secret@127.0.0.1:1/db"},
            "error: cannot use the database postgresql+psycopg://user:***@127.0.0.1:1/db: ",
        ),
        (
            {"IDEALIZED_RUNTIME_MAX_SIMULATED_REQUESTS": "abc"},
            "error: IDEALIZED_RUNTIME_MAX_SIMULATED_REQUESTS must be a positive integer, got 'abc'",
        ),
    ],
)
@pytest.mark.parametrize("command", [("db", "upgrade"), ("apikey", "create")])
def test_bad_service_settings_are_one_line(
    tmp_path: Path, environment: dict[str, str], message: str, command: tuple[str, ...]
) -> None:
    """They tracebacked (sqlalchemy's ArgumentError, a missing MySQL driver, int('abc'))."""
    home = tmp_path / "home"
    result = subprocess.run(
        cli_command(*command),
        env={**os.environ, "IDEALIZED_RUNTIME_HOME": str(home), "DATABASE_URL": "",
             **environment},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(message) and result.stderr.strip().count("\n") == 0
    assert "secret" not in result.stderr and not result.stdout  # no key printed
    assert not home.exists()  # nothing written
