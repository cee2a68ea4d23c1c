"""Errors that mean "the user's input is wrong": the CLI prints them as one line and exits 2,
the REST API answers them with a 4xx and the message as detail."""

from __future__ import annotations

from typing import Any


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


def plain(value: Any) -> Any:
    """``value`` with numpy scalars turned into Python ones, for messages users read: an error
    says ``got 0``, not ``got np.int64(0)``. (Duck-typed, so core needs no numpy import.)"""
    if (
        type(value).__module__ == "numpy"
        and hasattr(value, "item")
        and getattr(value, "ndim", 1) == 0
    ):
        return value.item()
    return value
