"""A server of our own for the tests that measure it: started with the settings a test needs,
its memory read from /proc (the peak resident set, VmHWM, reset before each measurement), and
request bodies of any size generated on the fly rather than held in the test's memory."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.servers import create_api_key, serving_api

MIB = 1 << 20


@dataclass(frozen=True)
class LiveServer:
    base_url: str
    key: str
    pid: int
    home: Path
    tmp: Path  # the server's TMPDIR

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=120.0, **kwargs)  # type: ignore[arg-type]


@contextmanager
def live_server(home: Path, **settings: str) -> Iterator[LiveServer]:
    """`idealized-runtime serve` on SQLite in ``home`` with ``settings`` (environment)."""
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {"IDEALIZED_RUNTIME_HOME": str(home), "DATABASE_URL": "", "TMPDIR": str(tmp), **settings}
    key = create_api_key("memory", env)
    with serving_api(env, log_path=home / "server.log") as (url, process):
        yield LiveServer(url, key, process.pid, home, tmp)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


@dataclass
class MemoryUse:
    before_mib: float  # resident when the measurement started
    peak_mib: float  # the highest resident set since

    @property
    def growth_mib(self) -> float:
        return self.peak_mib - self.before_mib


@contextmanager
def peak_memory(pid: int) -> Iterator[MemoryUse]:
    """The server's resident memory before and at its peak during the block. Linux resets the
    peak (VmHWM) to the current resident set when "5" is written to clear_refs."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    use = MemoryUse(_status_kib(pid, "VmRSS") / 1024, 0.0)
    yield use
    use.peak_mib = _status_kib(pid, "VmHWM") / 1024


@contextmanager
def peak_disk(folder: Path, every_s: float = 0.005) -> Iterator[list[int]]:
    """Sample the bytes of the files under ``folder`` while the block runs; the list holds the
    largest total seen."""
    seen = [0]
    done = threading.Event()

    def total() -> int:
        size = 0
        for root, _dirs, files in os.walk(folder):
            for name in files:
                with contextlib.suppress(OSError):  # removed meanwhile
                    size += os.path.getsize(os.path.join(root, name))
        return size

    def sample() -> None:
        while not done.is_set():
            seen[0] = max(seen[0], total())
            time.sleep(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()
        seen[0] = max(seen[0], total())


def generated(
    total_bytes: int, head: bytes = b"", piece: bytes = b" ", chunk_bytes: int = MIB
) -> Iterator[bytes]:
    """``head`` then ``piece`` repeated up to ``total_bytes``, in chunks of about
    ``chunk_bytes``: a body of any size, one chunk held at a time."""
    yield head
    sent = len(head)
    block = piece * max(1, chunk_bytes // len(piece))
    while sent < total_bytes:
        part = block[: total_bytes - sent]
        sent += len(part)
        yield part
