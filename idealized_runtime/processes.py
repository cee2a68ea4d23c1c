"""Child servers on loopback: a free port, and a server process that is waited for and stopped.

Used by the demo (``serve-model`` as a black box), ``profile --tp`` (the torchrun rendezvous),
benchmarks and the end-to-end tests, so that all of them start and stop servers the same way.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

LOOPBACK = "127.0.0.1"


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy in time; the message says which."""


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _last_log_line(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return "no output captured"
    lines = log_path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def wait_until_healthy(
    process: subprocess.Popen, health_url: str, timeout_s: float, log_path: Path | None = None
) -> None:
    """Poll ``health_url`` until it answers 200; fail early if the process dies."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise ServerStartError(
                f"server exited with code {process.returncode}: {_last_log_line(log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(health_url, timeout=1.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise ServerStartError(f"{health_url} did not answer within {timeout_s:.0f}s")
        time.sleep(0.1)


def stop_process(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``: only the process we started, by its PID."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def running_server(
    command: Sequence[str],
    health_url: str,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
    log_path: Path | None = None,
) -> Iterator[subprocess.Popen]:
    """Start ``command``, wait until ``health_url`` answers 200, yield the process, stop it."""
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_path, "wb")) if log_path else subprocess.DEVNULL
        process = subprocess.Popen(
            list(command), env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
        )
        stack.callback(stop_process, process)
        wait_until_healthy(process, health_url, timeout_s, log_path)
        yield process
