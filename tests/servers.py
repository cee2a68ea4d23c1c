"""Start real servers (our own or third-party) as subprocesses on loopback for end-to-end tests.

The process handling is the library's (``idealized_runtime.processes``), re-exported here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from idealized_runtime.processes import ServerStartError, free_port, running_server

__all__ = [
    "REPO_ROOT",
    "SHARED_REFERENCE",
    "ServerStartError",
    "assert_refused_in_one_line",
    "cli_command",
    "create_api_key",
    "free_port",
    "run_cli",
    "running_server",
    "serving_api",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference" / "helm_efficiency"


def cli_command(*args: str) -> list[str]:
    """The installed CLI, run with this interpreter (works inside a venv without PATH)."""
    return [sys.executable, "-m", "idealized_runtime", *args]


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to its end; its exit code, stdout and stderr, as text."""
    return subprocess.run(
        cli_command(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
    )


def assert_refused_in_one_line(result: subprocess.CompletedProcess[str], expected: str) -> None:
    """The CLI's answer to bad input: exit code 2 and one readable ``error:`` line naming it."""
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:") and expected in result.stderr, result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr


def create_api_key(name: str, env: Mapping[str, str]) -> str:
    """A new API key from ``apikey create`` in the service's environment ``env``."""
    made = subprocess.run(
        cli_command("apikey", "create", "--name", name),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


@contextmanager
def serving_api(
    env: dict[str, str], log_path: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``idealized-runtime serve`` on a free loopback port with ``env``: its base URL and
    process, once /v1/health answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running_server(
        cli_command("serve", "--port", str(port)), f"{url}/v1/health", env=env, log_path=log_path
    ) as process:
        yield url, process
