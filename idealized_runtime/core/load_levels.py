"""Load levels as users type them: ``--rate 2,8 --rate 32``, ``--concurrency 1,4,16``.

One parser for every command that sweeps load (``measure`` against a server, ``simulate``
against the ideal batching model), so both accept and reject the same text with the same message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, overload

from idealized_runtime.core.errors import InputError


@overload
def parse_load_levels(
    values: str | Iterable[str], option: str, *, integer: Literal[True]
) -> list[int]: ...


@overload
def parse_load_levels(
    values: str | Iterable[str], option: str, *, integer: Literal[False]
) -> list[float]: ...


def parse_load_levels(
    values: str | Iterable[str], option: str, *, integer: bool
) -> list[int] | list[float]:
    """Comma-separated positive numbers (integers if ``integer``) from one option value or from
    each value of a repeated option, in order, duplicates dropped. InputError names the option
    and the first bad part."""
    texts = [values] if isinstance(values, str) else list(values)
    levels: list[float] = []
    for text in texts:
        for part in text.split(","):
            try:
                value: float | None = int(part) if integer else float(part)
            except ValueError:
                value = None
            if value is None or not math.isfinite(value) or value <= 0:
                kind, example = ("integers", "1,4,16") if integer else ("numbers", "0.5,2,8")
                raise InputError(
                    f"{option} takes comma-separated positive {kind} (e.g. {option} {example}), "
                    f"got {part.strip()!r}"
                )
            levels.append(value)
    return list(dict.fromkeys(levels))  # type: ignore[return-value]
