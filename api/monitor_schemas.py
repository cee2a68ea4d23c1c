"""Request and response bodies of ``/v1/monitor``: monitoring rounds and their time series.

They compose the domain types: a round in is a ``MonitorRound`` (``core.rounds``) read strictly,
a series out is a ``ProviderSeries`` (``trends.series``) with its window's medians and spread.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from idealized_runtime.api.schemas import MODEL_NAME_PATTERN, MeasurementIn
from idealized_runtime.core.rounds import MonitorRound, ProbeShape, RoundPoint
from idealized_runtime.core.types import LoadSummary, Name
from idealized_runtime.trends.series import Change, WindowSummary

MAX_ROUND_MEASUREMENTS = 100_000


class MonitorRoundIn(MonitorRound):
    """A round as the monitor sends it."""

    model_config = ConfigDict(allow_inf_nan=False, title="MonitorRound")
    model: Name = Field(pattern=MODEL_NAME_PATTERN)
    measurements: Annotated[list[MeasurementIn], Field(max_length=MAX_ROUND_MEASUREMENTS)] = Field(
        default_factory=list
    )


class MonitorRoundOut(RoundPoint):
    id: int
    shapes: list[ProbeShape]
    summary: LoadSummary | None
    measurement_set_id: int | None = Field(
        description="the round's measurements (null for a round without a successful request)"
    )
    created_at: datetime


class MonitorSeriesOut(BaseModel):
    """One provider's model: its rounds in the window, the shifts flagged in it, and the
    window's medians and spread."""

    provider: str
    model: str
    reference: str | None = Field(description="what the idealized runtime was computed on")
    points: list[RoundPoint]
    changes: list[Change]
    window: WindowSummary


class MonitorSeriesList(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    start: AwareDatetime | None = Field(alias="from")
    end: AwareDatetime | None = Field(alias="to")
    items: list[MonitorSeriesOut]
