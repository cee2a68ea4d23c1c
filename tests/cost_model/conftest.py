"""Shared data for the cost-model tests: the paper's A100 grid."""

from __future__ import annotations

import pytest

from idealized_runtime.core import catalog
from idealized_runtime.core.types import Measurement


@pytest.fixture(scope="session")
def a100_grid() -> list[Measurement]:
    return catalog.megatron_a100_measurements()
