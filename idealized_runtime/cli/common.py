"""Shared CLI helpers."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from rich.console import Console


@cache
def stderr_console() -> Console:
    """Progress and notes for people, on stderr (rich loads only when a command prints)."""
    from rich.console import Console

    return Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """One readable line on stderr and a non-zero exit."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def require_folder(path: Path, option: str, what: str) -> None:
    """Fail in one line, before any work, when ``path`` (a folder to write in) is a file."""
    if path.exists() and not path.is_dir():
        fail(f"{path}: is a file; {option} names the folder to write {what} in")
