"""Errors that mean "the user's input is wrong": the CLI prints them as one line and exits 2,
the REST API answers them with a 4xx and the message as detail."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input, located as precisely as we can (file, row, column)."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.message, self.path, self.row, self.column = message, path, row, column
        where = [
            part
            for part in (
                path,
                f"row {row}" if row is not None else None,
                f"column {column!r}" if column is not None else None,
            )
            if part
        ]
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
