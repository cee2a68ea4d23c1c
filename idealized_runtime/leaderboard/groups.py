"""One entry per architecture: the names a model is listed under, grouped.

The names of one architecture (HELM's provider names mapped to one profiled shape, the shape's
own name, a label given to it) form one ``ModelGroup``, which shows the figures of the
architecture once (``headline``) and keeps what was measured under each name with that name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from idealized_runtime.leaderboard.rows import ModelRow


def _architecture_figures(row: ModelRow) -> tuple[object, ...]:
    """What a row shares with the other names of its architecture when they run the same fit:
    the idealized runtime and what it was computed on (cost follows from these)."""
    return (row.idealized_runtime_s, row.stack, row.hardware, row.num_gpus)


@dataclass(frozen=True)
class ModelGroup:
    """One leaderboard entry: an architecture and every name the board lists it under (HELM's
    provider names mapped to one profiled shape, the shape's own name, a label given to it).

    The names share what belongs to the architecture, shown once from ``headline``:
    parameters, accelerators, hardware, and the idealized runtime with its stack and cost. What
    was measured under a name (denoised and raw runtime, accuracy, scenarios, frontier counts)
    stays with that name, and so does an idealized runtime that differs from the headline's
    (a fit of its own)."""

    key: str  # the architecture's name, or the model's own name when its shape is unknown
    headline: ModelRow
    members: tuple[ModelRow, ...]  # every name, in board order

    @property
    def label(self) -> str:
        """What the entry is called: the architecture for several names, else the name."""
        return self.key if self.has_aliases else self.headline.model

    @property
    def has_aliases(self) -> bool:
        return len(self.members) > 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(row.model for row in self.members)

    def differs_from_headline(self, row: ModelRow) -> bool:
        """Whether ``row`` has an idealized runtime of its own (another fit, stack or GPU); a
        name without one takes the architecture's."""
        if row.idealized_runtime_s is None:
            return False
        return _architecture_figures(row) != _architecture_figures(self.headline)


def group_models(rows: Sequence[ModelRow]) -> tuple[ModelGroup, ...]:
    """Rows grouped by architecture, groups in the order of their first name, each row told its
    group (``group``, ``also_listed_as``, ``group_headline``)."""
    by_key: dict[str, list[ModelRow]] = {}
    for row in rows:
        by_key.setdefault(row.architecture or row.model, []).append(row)
    groups = []
    for key, members in by_key.items():
        headline = _headline(key, members)
        marked = tuple(
            row.model_copy(
                update={
                    "group": key,
                    "also_listed_as": [m.model for m in members if m.model != row.model],
                    "group_headline": row.model == headline.model,
                }
            )
            for row in members
        )
        groups.append(ModelGroup(key, next(r for r in marked if r.group_headline), marked))
    return tuple(groups)


def _headline(key: str, members: Sequence[ModelRow]) -> ModelRow:
    """The name whose architecture figures the group shows: those most of its names share, so
    that the fewest names need a line of their own; a tie goes to the architecture's own name
    (its profile), then to the name listed first."""
    counts = Counter(
        _architecture_figures(row) for row in members if row.idealized_runtime_s is not None
    )
    if counts:
        most = max(counts.values())
        members = [
            row
            for row in members
            if row.idealized_runtime_s is not None and counts[_architecture_figures(row)] == most
        ]
    return next((row for row in members if row.model == key), members[0])


def ranked_groups(groups: Iterable[ModelGroup]) -> list[ModelGroup]:
    """Fastest idealized runtime first, groups without one last (board order among ties)."""
    return sorted(
        groups,
        key=lambda g: (g.headline.idealized_runtime_s is None, g.headline.idealized_runtime_s or 0),
    )
