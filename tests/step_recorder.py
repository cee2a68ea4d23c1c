"""A step time for simulator tests that records every step's work."""

from __future__ import annotations

import numpy as np

from idealized_runtime.cost_model.serving.step_time import StepWork


class StepRecorder:
    """1 ms plus 1 us per token a step; every step's work kept in ``steps``."""

    def __init__(self) -> None:
        self.steps: list[StepWork] = []

    def seconds(self, work: StepWork) -> np.ndarray:
        self.steps.append(work)
        return 1e-3 + 1e-6 * work.tokens
