"""JSON objects without a repeated key: JSON leaves a key given twice undefined, and Python's
parser keeps the last one silently. ``unique_members`` is the ``object_pairs_hook`` that
refuses it (``RepeatedKey``), for every reader of JSON that users send."""

from __future__ import annotations

from typing import Any


class RepeatedKey(ValueError):
    """A key given twice in one JSON object."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice in one object")
        self.key = key


def unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members (``json.loads(..., object_pairs_hook=unique_members)``);
    RepeatedKey when a key repeats."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKey(key)
        found[key] = value
    return found
