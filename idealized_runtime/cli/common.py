"""Shared CLI helpers."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """One readable line on stderr and a non-zero exit."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
