"""Service settings, read from the environment once per process.

Everything has a default so that ``idealized-runtime serve`` works with no configuration: a
SQLite file under ``$IDEALIZED_RUNTIME_HOME`` (default ``~/.local/share/idealized-runtime``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from idealized_runtime.core.errors import InputError

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_BATCH_ROWS = 1_000_000
DEFAULT_MAX_UPLOAD_ROWS = 500_000
# A HELM archive: bytes decompressed in all (a .tar.gz passes every member through the one
# compressed stream) and entries; an archive beyond either is refused where it is reached.
DEFAULT_MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_ARCHIVE_MEMBERS = 10_000
# The longest string (or other JSON token) a JSON body may hold, in bytes: refused where it is
# read, before it is held.
DEFAULT_MAX_STRING_BYTES = 1 << 20
# Expensive reads (plans, batch and hardware-model estimates, comparisons): computations at once
# per server process (one more is refused with 503 and Retry-After), and per-request bounds.
DEFAULT_MAX_CONCURRENT_COMPUTATIONS = 2
DEFAULT_COMPUTE_RETRY_AFTER_S = 5
# A plan evaluates each deployment at each concurrency level: the OpenAPI document's example
# (Llama-3.3-70B on H100 and B200, 8192/1024 tokens, the default formats, KV caches and levels)
# counts 71,280 before the memory check leaves 42,636, about 4 s of one core. Its verification
# simulates at most 12,288 requests with the defaults (three per client at 2,048 clients: fewer
# show only the start-up burst; six where the start-up queue still drains after three).
DEFAULT_MAX_PLAN_EVALUATIONS = 100_000
DEFAULT_MAX_SIMULATED_REQUESTS = 12_288
# Candidates a plan's verification may simulate in turn, each within the bound above: the
# library's default (``PlanSettings.verify_candidates``); its own bound, 100, would let one
# request simulate 100 times the bound.
DEFAULT_MAX_VERIFY_CANDIDATES = 8
DEFAULT_MAX_CACHE_ENTRIES = 1024


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"{name} must be a positive integer, got {raw!r}")
    return value


def data_home() -> Path:
    """Where the default SQLite database lives."""
    configured = os.environ.get("IDEALIZED_RUNTIME_HOME")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "idealized-runtime"


def default_database_url() -> str:
    return f"sqlite:///{data_home() / 'idealized-runtime.sqlite3'}"


def normalize_database_url(url: str) -> str:
    """Accept the URLs people paste: ``postgres://`` and ``postgresql://`` mean psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


@dataclass(frozen=True)
class Settings:
    database_url: str = field(default_factory=default_database_url)
    # Reads (GET) are public unless this is set; writes always need a key.
    reads_require_key: bool = False
    # Request bodies above this many bytes are refused with 413 while they stream in.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS
    max_upload_rows: int = DEFAULT_MAX_UPLOAD_ROWS
    max_archive_bytes: int = DEFAULT_MAX_ARCHIVE_BYTES
    max_archive_members: int = DEFAULT_MAX_ARCHIVE_MEMBERS
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES
    max_concurrent_computations: int = DEFAULT_MAX_CONCURRENT_COMPUTATIONS
    compute_retry_after_s: int = DEFAULT_COMPUTE_RETRY_AFTER_S
    # Plans run in worker processes (off: in the server's threads).
    compute_in_processes: bool = True
    max_plan_evaluations: int = DEFAULT_MAX_PLAN_EVALUATIONS
    max_simulated_requests: int = DEFAULT_MAX_SIMULATED_REQUESTS
    max_verify_candidates: int = DEFAULT_MAX_VERIFY_CANDIDATES
    # Entries of each in-process cache (fits, hardware, architectures, GPU counts).
    max_cache_entries: int = DEFAULT_MAX_CACHE_ENTRIES
    # Seconds a cached "current fit of a model" is trusted before re-reading the database; fits
    # written by this process invalidate it at once, this bounds staleness across workers.
    fit_cache_ttl_s: float = 5.0

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @classmethod
    def from_env(cls) -> Settings:
        url = os.environ.get("DATABASE_URL") or default_database_url()
        return cls(
            database_url=normalize_database_url(url),
            reads_require_key=_flag(os.environ.get("IDEALIZED_RUNTIME_READS_REQUIRE_KEY")),
            max_body_bytes=_int("IDEALIZED_RUNTIME_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            max_batch_rows=_int("IDEALIZED_RUNTIME_MAX_BATCH_ROWS", DEFAULT_MAX_BATCH_ROWS),
            max_upload_rows=_int("IDEALIZED_RUNTIME_MAX_UPLOAD_ROWS", DEFAULT_MAX_UPLOAD_ROWS),
            max_archive_bytes=_int(
                "IDEALIZED_RUNTIME_MAX_ARCHIVE_BYTES", DEFAULT_MAX_ARCHIVE_BYTES
            ),
            max_archive_members=_int(
                "IDEALIZED_RUNTIME_MAX_ARCHIVE_MEMBERS", DEFAULT_MAX_ARCHIVE_MEMBERS
            ),
            max_string_bytes=_int("IDEALIZED_RUNTIME_MAX_STRING_BYTES", DEFAULT_MAX_STRING_BYTES),
            max_concurrent_computations=_int(
                "IDEALIZED_RUNTIME_MAX_CONCURRENT_COMPUTATIONS", DEFAULT_MAX_CONCURRENT_COMPUTATIONS
            ),
            compute_in_processes=_flag(
                os.environ.get("IDEALIZED_RUNTIME_COMPUTE_IN_PROCESSES", "1")
            ),
            compute_retry_after_s=_int(
                "IDEALIZED_RUNTIME_COMPUTE_RETRY_AFTER_S", DEFAULT_COMPUTE_RETRY_AFTER_S
            ),
            max_plan_evaluations=_int(
                "IDEALIZED_RUNTIME_MAX_PLAN_EVALUATIONS", DEFAULT_MAX_PLAN_EVALUATIONS
            ),
            max_simulated_requests=_int(
                "IDEALIZED_RUNTIME_MAX_SIMULATED_REQUESTS", DEFAULT_MAX_SIMULATED_REQUESTS
            ),
            max_verify_candidates=_int(
                "IDEALIZED_RUNTIME_MAX_VERIFY_CANDIDATES", DEFAULT_MAX_VERIFY_CANDIDATES
            ),
            max_cache_entries=_int(
                "IDEALIZED_RUNTIME_MAX_CACHE_ENTRIES", DEFAULT_MAX_CACHE_ENTRIES
            ),
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings.from_env()
