"""The progress bar of a measurement run: a rich bar on stderr with a live error count."""

from __future__ import annotations

import contextlib


class ProgressBar(contextlib.AbstractContextManager):
    """A rich progress bar on stderr with a live error count; a no-op when disabled."""

    def __init__(self, enabled: bool, total: int) -> None:
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("measuring"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("[red]{task.fields[errors]} errors"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task("measure", total=total, errors=0)

    def __enter__(self) -> ProgressBar:
        if self._progress is not None:
            self._progress.start()
        return self

    def advance(self, errors: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, errors=errors)

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
