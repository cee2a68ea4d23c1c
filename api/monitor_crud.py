"""Database reads and writes of monitoring rounds, in ``api.crud``'s style: functions take a
Session and domain objects; the router owns the HTTP side and commits.

A round is stored whole or not at all, in the caller's one transaction: its measurements as a
measurement set named ``monitor:<round_id>`` (source ``api_timing``), then its row. The round's
id is its identity: storing the same round again stores nothing, another round under a stored
id is a ``RoundConflict``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.models import MonitorRoundRow
from idealized_runtime.api.monitor_schemas import MonitorRoundOut
from idealized_runtime.core.rounds import MonitorRound, RoundPoint
from idealized_runtime.core.types import LoadSummary

SET_PREFIX = "monitor:"


class RoundConflict(Exception):
    """Another round is stored under this round id."""


def round_fingerprint(monitor_round: MonitorRound) -> str:
    """sha256 of the round's content (what a second store of its id must equal)."""
    content = MonitorRound.model_validate(monitor_round.model_dump()).model_dump(mode="json")
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def get_round(session: Session, round_id: str) -> MonitorRoundRow | None:
    return session.execute(
        select(MonitorRoundRow).where(MonitorRoundRow.round_id == round_id)
    ).scalar_one_or_none()


def store_round(
    session: Session, monitor_round: MonitorRound, created_by: int | None = None
) -> tuple[MonitorRoundRow, bool]:
    """The round's row and whether this call stored it (False: the same round was there)."""
    fingerprint = round_fingerprint(monitor_round)
    existing = get_round(session, monitor_round.round_id)
    if existing is not None:
        if existing.fingerprint != fingerprint:
            raise RoundConflict(
                f"round {monitor_round.round_id!r} is stored with other content; a round's "
                "id names one round"
            )
        return existing, False
    set_id = None
    if monitor_round.measurements:
        measurement_set = crud.create_measurement_set(
            session,
            name=SET_PREFIX + monitor_round.round_id,
            source="api_timing",
            metadata={
                "monitor_round": monitor_round.round_id,
                "provider": monitor_round.provider,
                "started_at": monitor_round.started_at.isoformat(),
            },
            stack=None,
            measurements=monitor_round.measurements,
            created_by=created_by,
        )
        set_id = measurement_set.id
    point = monitor_round.point().model_dump(exclude={"round_id", "provider", "model"})
    row = MonitorRoundRow(
        round_id=monitor_round.round_id,
        fingerprint=fingerprint,
        provider=monitor_round.provider,
        model=monitor_round.model,
        details={
            "shapes": [shape.model_dump() for shape in monitor_round.shapes],
            "summary": monitor_round.summary.model_dump(mode="json")
            if monitor_round.summary
            else None,
        },
        measurement_set_id=set_id,
        created_by=created_by,
        **point,
    )
    session.add(row)
    session.flush()
    return row, True


def round_point(row: MonitorRoundRow) -> RoundPoint:
    # The row's columns carry the point's fields under the same names (validated as they are read).
    return RoundPoint.model_validate(row, from_attributes=True)


def round_out(row: MonitorRoundRow) -> MonitorRoundOut:
    summary = row.details.get("summary")
    return MonitorRoundOut(
        **round_point(row).model_dump(),
        id=row.id,
        shapes=row.details.get("shapes", []),
        summary=LoadSummary.model_validate(summary) if summary else None,
        measurement_set_id=row.measurement_set_id,
        created_at=row.created_at,
    )


def _rounds(
    provider: str | None,
    model: str | None,
    start: datetime | None = None,
    end: datetime | None = None,
    status: str | None = None,
) -> Select:
    query = select(MonitorRoundRow)
    if provider is not None:
        query = query.where(MonitorRoundRow.provider == provider)
    if model is not None:
        query = query.where(MonitorRoundRow.model == model)
    if start is not None:
        query = query.where(MonitorRoundRow.started_at >= start)
    if end is not None:
        query = query.where(MonitorRoundRow.started_at <= end)
    if status is not None:
        query = query.where(MonitorRoundRow.status == status)
    return query


def list_rounds(
    session: Session,
    *,
    provider: str | None,
    model: str | None,
    start: datetime | None,
    end: datetime | None,
    status: str | None,
    limit: int,
    offset: int,
) -> tuple[list[MonitorRoundOut], int]:
    """Rounds in time order (then by id)."""
    query = _rounds(provider, model, start, end, status).order_by(
        MonitorRoundRow.started_at, MonitorRoundRow.id
    )
    rows, total = crud._page(session, query, limit, offset)
    return [round_out(row) for row in rows], total


def round_points(
    session: Session, *, provider: str | None = None, model: str | None = None
) -> list[RoundPoint]:
    """Every round of the series that match (all their history: shifts need the baseline
    before a window)."""
    query = _rounds(provider, model).order_by(MonitorRoundRow.started_at, MonitorRoundRow.id)
    return [round_point(row) for row in session.execute(query).scalars()]


def recent_round_points(session: Session, since: datetime) -> list[RoundPoint]:
    """The rounds of every series started at or after ``since``, in time order."""
    query = _rounds(None, None, start=since).order_by(
        MonitorRoundRow.started_at, MonitorRoundRow.id
    )
    return [round_point(row) for row in session.execute(query).scalars()]


def stored_round_ids(session: Session, round_ids: Sequence[str]) -> set[str]:
    """Which of ``round_ids`` are stored."""
    if not round_ids:
        return set()
    query = select(MonitorRoundRow.round_id).where(MonitorRoundRow.round_id.in_(list(round_ids)))
    return set(session.execute(query).scalars())
