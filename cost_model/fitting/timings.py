"""Timings of one model as numpy columns: what every fitting method starts from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Measurement


@dataclass(frozen=True)
class ModelTimings:
    """Requests of one model: prompt and output token counts, runtime, and time to first token
    (NaN where not measured). Float arrays, so that design matrices need no conversion.

    A request with 0 output tokens is timed as one with 1 (HELM's rule: both cost alpha(p)),
    so output counts are stored as max(o, 1): every fitting method sees o >= 1."""

    model: str
    num_prompt_tokens: NDArray[np.float64]
    num_output_tokens: NDArray[np.float64]
    runtime_s: NDArray[np.float64]
    ttft_s: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.runtime_s.shape[0])

    @property
    def prompt_sizes(self) -> NDArray[np.float64]:
        return np.unique(self.num_prompt_tokens)

    def subset(self, rows: NDArray[np.bool_] | NDArray[np.intp]) -> ModelTimings:
        return ModelTimings(
            self.model,
            self.num_prompt_tokens[rows],
            self.num_output_tokens[rows],
            self.runtime_s[rows],
            self.ttft_s[rows],
        )

    @classmethod
    def from_arrays(
        cls,
        model: str,
        num_prompt_tokens: ArrayLike,
        num_output_tokens: ArrayLike,
        runtime_s: ArrayLike,
        ttft_s: ArrayLike | None = None,
    ) -> ModelTimings:
        runtime = np.asarray(runtime_s, dtype=np.float64)
        ttft = (
            np.full_like(runtime, np.nan)
            if ttft_s is None
            else np.asarray(ttft_s, dtype=np.float64)
        )
        return cls(
            model,
            np.asarray(num_prompt_tokens, dtype=np.float64),
            np.maximum(np.asarray(num_output_tokens, dtype=np.float64), 1.0),
            runtime,
            ttft,
        )


def group_by_model(measurements: Sequence[Measurement]) -> dict[str, ModelTimings]:
    """Split measurements per model (first-appearance order). Batched and unbatched timings
    are different quantities, so one model must not mix batch sizes."""
    if not measurements:
        raise InputError("no measurements to fit")
    columns: dict[str, list[tuple[float, float, float, float]]] = {}
    batch_sizes: dict[str, set[int]] = {}
    for m in measurements:
        ttft = np.nan if m.ttft_s is None else m.ttft_s
        columns.setdefault(m.model, []).append(
            (m.num_prompt_tokens, max(m.num_output_tokens, 1), m.runtime_s, ttft)
        )
        batch_sizes.setdefault(m.model, set()).add(m.batch_size)
    groups: dict[str, ModelTimings] = {}
    for model, rows in columns.items():
        if len(batch_sizes[model]) > 1:
            sizes = ", ".join(str(b) for b in sorted(batch_sizes[model]))
            raise InputError(
                f"model {model!r} mixes batch sizes ({sizes}): fit one batch size at a time",
                column="batch_size",
            )
        array = np.asarray(rows, dtype=np.float64)
        groups[model] = ModelTimings(model, array[:, 0], array[:, 1], array[:, 2], array[:, 3])
    return groups


def decode_context_tokens(
    num_prompt_tokens: NDArray[np.float64], num_output_tokens: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Cached tokens read over the o - 1 decode steps: sum of (p + i - 1) for i = 1..o-1."""
    steps = num_output_tokens - 1.0
    return steps * num_prompt_tokens + steps * (steps - 1.0) / 2.0
