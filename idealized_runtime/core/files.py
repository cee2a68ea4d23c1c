"""File reading with one-line errors; writing that never leaves a half-written output: atomic
replace, durable appends."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from idealized_runtime.core.errors import InputError


def read_text_file(path: Path, what: str) -> str:
    """The text of a user's file (a BOM dropped); InputError naming ``what`` and the file when it
    cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise InputError(f"cannot read the {what}: {reason}", path=str(path)) from None


@contextlib.contextmanager
def atomic_writer(
    path: str | Path, mode: str = "w", newline: str | None = None, *, durable: bool = True
) -> Iterator[IO]:
    """Write to a temporary file beside ``path``, rename over it only if the block succeeds.

    ``durable=False`` skips the fsync before the rename: still never a partial file, but after
    a power loss the output may be missing. For outputs derived from inputs that can be re-run
    (a conversion), where the fsync would be a sizeable share of the run."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    # mkstemp creates 0600; give the result the permissions a plain open() would have.
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    try:
        kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": newline}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def append_line_durably(handle: IO[str], line: str) -> None:
    """Append one complete line and push it to disk, so a killed run loses at most the line in
    flight (readers must ignore a trailing partial line)."""
    handle.write(line if line.endswith("\n") else line + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def truncate_partial_line(path: Path) -> bytes:
    """Cut off a trailing partial line (a run killed mid-write) so that the next append starts a
    clean line; return the complete lines that remain (empty if the file does not exist)."""
    if not path.exists():
        return b""
    with path.open("rb+") as handle:
        data = handle.read()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            handle.truncate(keep)
    return data[:keep]
