"""The ``idealized-runtime`` command line: a thin layer over the library.

Each command group lives in its own module and registers itself on ``app``. User errors
(``InputError``, unknown names, ``typer.BadParameter``) end as one readable line and exit code 2.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand, TyperGroup

try:  # recent typer vendors its own click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer on top of click
    from click import exceptions as click_exceptions

from idealized_runtime.core.errors import InputError

if TYPE_CHECKING:
    from typer._click.core import Context
    from typer.core import TyperOption


def _help_flag_off_by_default(option: TyperOption | None) -> TyperOption | None:
    # typer checks each parameter's value with a pydantic adapter unless the value is already a
    # bool; an absent --help is None, so `version` and `CMD --help` would import pydantic
    # (~0.15 s) only to turn None into None. A False default skips that.
    if option is not None and option.default is None:
        option.default = False
    return option


class _Group(TyperGroup):
    """The command group, whose unused --help costs no pydantic import."""

    def get_help_option(self, ctx: Context) -> TyperOption | None:
        return _help_flag_off_by_default(super().get_help_option(ctx))


class _Command(TyperCommand):
    """A command without parameters of its own (``version``) that starts without pydantic."""

    def get_help_option(self, ctx: Context) -> TyperOption | None:
        return _help_flag_off_by_default(super().get_help_option(ctx))


app = typer.Typer(
    cls=_Group,
    name="idealized-runtime",
    help="Idealized and denoised inference runtimes of LLMs: profile, fit, convert, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: typer's rich help loads rich's markdown, syntax and traceback modules
    # (markdown-it, pygments, attrs), which doubles the start-up of every `--help`.
    rich_markup_mode=None,
)


@app.command(cls=_Command)
def version() -> None:
    """Print the version."""
    from idealized_runtime import __version__

    typer.echo(__version__)


def _register_commands() -> None:
    # Imported here so that one broken optional part does not take the whole CLI down silently:
    # a missing module is an error at start-up, as it should be.
    from idealized_runtime.cli import (  # noqa: F401  (modules register on import)
        estimate,
        fitting,
        importing,
        measure,
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
