"""Start real servers (our own or third-party) as subprocesses on loopback for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference" / "helm_efficiency"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli_command(*args: str) -> list[str]:
    """The installed CLI, run with this interpreter (works inside a venv without PATH)."""
    return [sys.executable, "-m", "idealized_runtime", *args]


@contextlib.contextmanager
def running_server(
    command: Sequence[str],
    health_url: str,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
    log_path: Path | None = None,
) -> Iterator[subprocess.Popen]:
    """Start ``command``, wait until ``health_url`` answers 200, yield, then stop it by PID."""
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        list(command), env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                detail = log_path.read_text(errors="replace")[-2000:] if log_path else ""
                raise RuntimeError(f"server exited with {process.returncode}: {detail}")
            try:
                if httpx.get(health_url, timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{health_url} not healthy after {timeout_s}s")
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log_path:
            log.close()
