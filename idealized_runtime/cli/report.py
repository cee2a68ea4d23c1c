"""CLI: placeholder until its owner fills it in."""

from idealized_runtime.cli import app  # noqa: F401
