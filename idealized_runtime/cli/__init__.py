"""The ``idealized-runtime`` command line: a thin layer over the library.

Each command group lives in its own module and registers itself on ``app`` (``cli.app``). User
errors (``InputError``, unknown names, ``typer.BadParameter``) end as one readable line and exit
code 2.
"""

from __future__ import annotations

import sys

import typer

try:  # recent typer vendors its own click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer on top of click
    from click import exceptions as click_exceptions

from idealized_runtime.cli.app import app
from idealized_runtime.core.errors import InputError

__all__ = ["app", "main"]


def _register_commands() -> None:
    # Imported here so that one broken optional part does not take the whole CLI down silently:
    # a missing module is an error at start-up, as it should be.
    from idealized_runtime.cli import (  # noqa: F401  (modules register on import)
        estimate,
        fitting,
        importing,
        measure,
        monitor,
        plan,
        profile,
        report,
        service,
        simulate,
        stacks,
    )


def main() -> None:
    _register_commands()
    try:
        # standalone_mode=False: we, not click, turn usage errors into one readable line.
        exit_code = app(standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as error:
        typer.echo(error.format_message())
        sys.exit(0)
    except click_exceptions.UsageError as error:
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
        typer.echo(f"error: {error.format_message()}{hint}", err=True)
        sys.exit(2)
    except (InputError, KeyError) as error:
        # The catalog (pydantic types) loads only in commands that use it: look its error up.
        catalog = sys.modules.get("idealized_runtime.core.catalog")
        if not isinstance(error, InputError) and not (
            catalog is not None and isinstance(error, catalog.UnknownNameError)
        ):
            raise
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except typer.Abort:  # Ctrl-C at a prompt, or a command that chose to abort (typer's own class)
        typer.echo("aborted", err=True)
        sys.exit(130)
    except click_exceptions.ClickException as error:
        typer.echo(f"error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    sys.exit(exit_code if isinstance(exit_code, int) else 0)
