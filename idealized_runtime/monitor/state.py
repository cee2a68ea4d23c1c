"""The monitor's state folder: what each round measured, its finished records and which of them
the store has, so that a monitor killed at any moment resumes where it stopped and loses and
repeats nothing.

    monitor.json                       the monitor's id (every round id starts with it)
    lock                               held by the running monitor (one at a time per folder)
    calibration/<endpoint>.json        how prompts of exact sizes are written (kept across rounds)
    rounds/<round>/started.json        when the round began (the next one is due an interval on)
    rounds/<round>/<endpoint>.jsonl    the requests measured (appended and fsynced one by one)
    rounds/<round>/<endpoint>.round.json   the finished round (written atomically, once)
    rounds/<round>/<endpoint>.stored   the store has the round (written after it said so)

A round is done for an endpoint once its record exists; a record is never rewritten, so what
is stored again after a crash is the same round, which the store recognises by its id. Each
file is written atomically (``core.files``), so a kill leaves either the old state or the new.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.rounds import MonitorRound

STATE_FORMAT = "idealized-runtime/monitor"
ROUND_DIGITS = 6


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


@contextlib.contextmanager
def exclusive(folder: str | Path) -> Iterator[None]:
    """Hold a state folder's lock while a monitor runs on it: a second monitor on the same
    folder (a timer firing while the last round still runs) is an InputError, not a round
    probed twice. The system releases the lock when the process ends, however it ends."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / "lock", "a+", encoding="utf-8")  # noqa: SIM115
    except OSError as error:
        raise InputError(
            f"cannot use the state folder: {error.strerror or error}", path=str(folder)
        ) from None
    with handle:
        try:
            import fcntl
        except ImportError:  # no advisory locks on this system
            yield
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(
                "another monitor is running on this state folder", path=str(folder)
            ) from None
        yield


class MonitorState:
    """One monitor's folder (see the module docstring)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        try:
            (self.folder / "rounds").mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(
                f"cannot use the state folder: {error.strerror or error}", path=str(self.folder)
            ) from None
        self.monitor_id = self._monitor_id()
        self._pending: set[tuple[int, str]] = set()
        self._done: dict[int, set[str]] = {}
        for number in self.rounds():
            names = os.listdir(self.round_dir(number))
            done = {
                name.removesuffix(".round.json") for name in names if name.endswith(".round.json")
            }
            stored = {name.removesuffix(".stored") for name in names if name.endswith(".stored")}
            self._done[number] = done
            self._pending |= {(number, slug) for slug in done - stored}

    def _monitor_id(self) -> str:
        path = self.folder / "monitor.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {
                "format": STATE_FORMAT,
                "monitor_id": "m" + uuid.uuid4().hex[:12],
                "created_at": _utc_now().isoformat(),
            }
            with atomic_writer(path) as handle:
                json.dump(data, handle, indent=1)
        except (OSError, ValueError) as error:
            raise InputError(f"not a monitor's state: {error}", path=str(path)) from None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise InputError("not a monitor's state file", path=str(path))
        return str(data["monitor_id"])

    # --- where things are ------------------------------------------------------------------

    def round_dir(self, number: int) -> Path:
        return self.folder / "rounds" / f"{number:0{ROUND_DIGITS}d}"

    def rows_path(self, number: int, slug: str) -> Path:
        return self.round_dir(number) / f"{slug}.jsonl"

    def calibration_path(self, slug: str) -> Path:
        return self.folder / "calibration" / f"{slug}.json"

    def round_id(self, number: int, slug: str) -> str:
        return f"{self.monitor_id}:{number:0{ROUND_DIGITS}d}:{slug}"

    # --- rounds ----------------------------------------------------------------------------

    def rounds(self) -> list[int]:
        """Round numbers with a folder, in order."""
        folder = self.folder / "rounds"
        return sorted(int(name) for name in os.listdir(folder) if name.isdigit())

    def next_round(self, slugs: list[str]) -> int:
        """The round to run: the last one if an endpoint has no record in it, else the next."""
        numbers = self.rounds()
        if not numbers:
            return 0
        last = numbers[-1]
        return last if set(slugs) - self._done.get(last, set()) else last + 1

    def started_at(self, number: int) -> datetime | None:
        """When round ``number`` began, if it did."""
        try:
            data = json.loads((self.round_dir(number) / "started.json").read_text("utf-8"))
            return datetime.fromisoformat(data["started_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def start_round(self, number: int) -> datetime:
        """Round ``number``'s start, recorded the first time it is asked for."""
        started = self.started_at(number)
        if started is None:
            started = _utc_now()
            with atomic_writer(self.round_dir(number) / "started.json") as handle:
                json.dump({"started_at": started.isoformat()}, handle)
        return started

    def endpoint_started_at(self, number: int, slug: str) -> datetime:
        """When the endpoint's probe of this round began (recorded once: a resumed probe keeps
        its first start)."""
        path = self.round_dir(number) / f"{slug}.started"
        try:
            return datetime.fromisoformat(path.read_text("utf-8").strip())
        except (OSError, ValueError):
            started = _utc_now()
            with atomic_writer(path) as handle:
                handle.write(started.isoformat())
            return started

    # --- records ---------------------------------------------------------------------------

    def has_record(self, number: int, slug: str) -> bool:
        return slug in self._done.get(number, set())

    def record(self, number: int, slug: str) -> MonitorRound:
        path = self.round_dir(number) / f"{slug}.round.json"
        return MonitorRound.model_validate_json(path.read_bytes())

    def write_record(self, number: int, slug: str, monitor_round: MonitorRound) -> None:
        """The finished round, once: from here on it is what gets stored."""
        with atomic_writer(self.round_dir(number) / f"{slug}.round.json") as handle:
            handle.write(monitor_round.model_dump_json())
        self._done.setdefault(number, set()).add(slug)
        self._pending.add((number, slug))

    def pending(self) -> list[tuple[int, str]]:
        """Finished rounds the store does not have yet, oldest first."""
        return sorted(self._pending)

    def mark_stored(self, number: int, slug: str) -> None:
        with atomic_writer(self.round_dir(number) / f"{slug}.stored") as handle:
            handle.write(_utc_now().isoformat())
        self._pending.discard((number, slug))
