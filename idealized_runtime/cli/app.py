"""The command group every command module registers on, and the ``version`` command."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand, TyperGroup

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
