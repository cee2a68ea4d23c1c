"""The leaderboard grouped by architecture, as lines to print: one line per architecture with
a single name, else a head line for the architecture and one line per name under it.

Every figure is printed once, on the line of what it belongs to. The head line carries the
architecture's figures (parameters, accelerators, hardware, stack, idealized runtime, cost);
a name's line carries what was measured under that name (denoised and raw runtime, accuracy,
scenarios, frontier counts) and its idealized runtime only where it differs from the head's.
The terminal table, the Markdown and the HTML report all print these lines.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from idealized_runtime.leaderboard.groups import ModelGroup
from idealized_runtime.leaderboard.rows import ModelRow

# model: the only name of its architecture; group: the head of several names; alias: one of them
LineKind = Literal["model", "group", "alias"]
# Which figures a column holds: the shape's (parameters), the architecture's fit, or what was
# measured under a name.
FigureSide = Literal["shape", "architecture", "measured"]

T = TypeVar("T")


@dataclass(frozen=True)
class BoardLine:
    kind: LineKind
    label: str  # the architecture on a group's head line, else the model's name
    row: ModelRow  # whose figures the line prints
    group: ModelGroup

    def shows(self, side: FigureSide) -> bool:
        """Whether the line prints the figures of ``side`` (others are left blank)."""
        if self.kind == "model":
            return True
        if self.kind == "group":
            return side != "measured"
        return side == "measured" or (
            side == "architecture" and self.group.differs_from_headline(self.row)
        )


def group_lines(group: ModelGroup) -> list[BoardLine]:
    if not group.has_aliases:
        return [BoardLine("model", group.headline.model, group.headline, group)]
    head = BoardLine("group", group.key, group.headline, group)
    return [head, *(BoardLine("alias", row.model, row, group) for row in group.members)]


def board_lines(groups: Iterable[ModelGroup]) -> list[BoardLine]:
    return [line for group in groups for line in group_lines(group)]


# Figures measured under a name: a group's head line sorts by their range over its names.
MEASURED_FIGURES: dict[str, Callable[[ModelRow], float | None]] = {
    "denoised_runtime_s": lambda row: row.denoised_runtime_s,
    "raw_runtime_s": lambda row: row.raw_runtime_s,
    "accuracy": lambda row: row.accuracy,
    "num_scenarios": lambda row: row.num_scenarios,
    "frontier_idealized": lambda row: row.frontier_count["idealized"],
    "frontier_raw": lambda row: row.frontier_count["raw"],
}


def measured_spans(group: ModelGroup) -> dict[str, tuple[float, float] | None]:
    """Figure -> (lowest, highest) over the group's names; None where no name has it."""
    spans: dict[str, tuple[float, float] | None] = {}
    for name, figure in MEASURED_FIGURES.items():
        values = [value for value in map(figure, group.members) if value is not None]
        spans[name] = (min(values), max(values)) if values else None
    return spans


def merge_aliases(
    entries: Iterable[tuple[str, Hashable, T]], group_keys: Mapping[str, str]
) -> list[tuple[list[str], T]]:
    """(model, figures, item) -> one (models, item) per group and figures: names of one
    architecture with the same figures become one entry listing them all (first seen first)."""
    merged: dict[tuple[str, Hashable], tuple[list[str], T]] = {}
    for model, figures, item in entries:
        models, _ = merged.setdefault((group_keys.get(model, model), figures), ([], item))
        models.append(model)
    return list(merged.values())


def names_label(models: Sequence[str]) -> str:
    return ", ".join(models)
