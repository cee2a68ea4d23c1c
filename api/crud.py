"""Database reads and writes. Functions take a Session and domain objects; the routers own the
HTTP side (status codes, idempotency) and commit the transaction."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, delete, func, insert, select
from sqlalchemy.orm import Session

from idealized_runtime.api.models import (
    ArchitectureRow,
    CapabilityScoreRow,
    FitRow,
    HardwareRow,
    IdempotencyRecordRow,
    LoadSummaryRow,
    MeasurementRow,
    MeasurementSetRow,
    StackRow,
)
from idealized_runtime.api.schemas import (
    CapabilityScore,
    CapabilityScoreOut,
    FitOut,
    HardwareOut,
    LoadSummaryOut,
    MeasurementOut,
    MeasurementSetOut,
    Metric,
    ModelOut,
)
from idealized_runtime.api.uploads import MeasurementColumns
from idealized_runtime.core.types import (
    Architecture,
    FittedCostModel,
    Hardware,
    LoadSummary,
    Measurement,
    Provenance,
)

IDEALIZED_METHODS = ("helm", "default")
METRIC_METHODS: dict[str, tuple[str, ...]] = {
    "idealized": IDEALIZED_METHODS,
    "denoised": ("denoised",),
}


def _page(session: Session, query: Select, limit: int, offset: int) -> tuple[list[Any], int]:
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    rows = session.execute(query.limit(limit).offset(offset)).scalars().all()
    return list(rows), int(total)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# --- architectures and hardware ----------------------------------------------------------------


def model_out(row: ArchitectureRow) -> ModelOut:
    return ModelOut(
        **row.spec, id=row.id, total_parameters=row.num_parameters, created_at=row.created_at
    )


def hardware_out(row: HardwareRow) -> HardwareOut:
    return HardwareOut(**row.spec, id=row.id, created_at=row.created_at)


MAX_BIGINT = 2**63 - 1


def add_architecture(session: Session, architecture: Architecture) -> ArchitectureRow:
    num_parameters = architecture.num_parameters()
    if num_parameters > MAX_BIGINT:  # the same 422 on every backend (errors._overflow)
        raise OverflowError(f"{num_parameters} parameters")
    row = ArchitectureRow(
        name=architecture.name,
        family=architecture.family,
        num_parameters=num_parameters,
        spec=architecture.model_dump(mode="json"),
    )
    session.add(row)
    session.flush()
    return row


def add_hardware(session: Session, hardware: Hardware) -> HardwareRow:
    row = HardwareRow(
        name=hardware.name, vendor=hardware.vendor, spec=hardware.model_dump(mode="json")
    )
    session.add(row)
    session.flush()
    return row


def list_architectures(
    session: Session, *, family: str | None, name_prefix: str | None, limit: int, offset: int
) -> tuple[list[ArchitectureRow], int]:
    query = select(ArchitectureRow).order_by(ArchitectureRow.name)
    if family is not None:
        query = query.where(ArchitectureRow.family == family)
    if name_prefix:
        query = query.where(ArchitectureRow.name.like(_escape_like(name_prefix) + "%", escape="\\"))
    return _page(session, query, limit, offset)


def list_hardware(
    session: Session, *, vendor: str | None, name_prefix: str | None, limit: int, offset: int
) -> tuple[list[HardwareRow], int]:
    query = select(HardwareRow).order_by(HardwareRow.name)
    if vendor is not None:
        query = query.where(HardwareRow.vendor == vendor)
    if name_prefix:
        query = query.where(HardwareRow.name.like(_escape_like(name_prefix) + "%", escape="\\"))
    return _page(session, query, limit, offset)


def get_architecture(session: Session, name: str) -> ArchitectureRow | None:
    return session.execute(
        select(ArchitectureRow).where(ArchitectureRow.name == name)
    ).scalar_one_or_none()


def get_hardware(session: Session, name: str) -> HardwareRow | None:
    return session.execute(select(HardwareRow).where(HardwareRow.name == name)).scalar_one_or_none()


def all_architectures(session: Session) -> dict[str, Architecture]:
    rows = session.execute(select(ArchitectureRow)).scalars()
    return {row.name: Architecture(**row.spec) for row in rows}


def all_hardware(session: Session) -> dict[str, Hardware]:
    rows = session.execute(select(HardwareRow)).scalars()
    return {row.name: Hardware(**row.spec) for row in rows}


# --- stacks and measurements -------------------------------------------------------------------


def stack_row(session: Session, stack: Provenance) -> StackRow:
    """The row of ``stack``, created if new (identical stacks share one row)."""
    spec = stack.model_dump(mode="json")
    fingerprint = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    row = session.execute(
        select(StackRow).where(StackRow.fingerprint == fingerprint)
    ).scalar_one_or_none()
    if row is None:
        row = StackRow(
            fingerprint=fingerprint, runner=stack.runner, hardware=stack.hardware, spec=spec
        )
        session.add(row)
        session.flush()
    return row


def measurement_set_out(row: MeasurementSetRow) -> MeasurementSetOut:
    return MeasurementSetOut(
        id=row.id,
        name=row.name,
        source=row.source,  # type: ignore[arg-type]
        metadata=row.metadata_,
        stack=Provenance(**row.stack.spec) if row.stack else None,
        row_count=row.row_count,
        models=list(row.models.get("names", [])),
        created_at=row.created_at,
    )


# Rows per INSERT statement: an upload of 10^5+ rows is not one list of dicts in memory.
INSERT_BATCH_ROWS = 10_000


def create_measurement_set(
    session: Session,
    *,
    name: str | None,
    source: str,
    metadata: dict[str, Any],
    stack: Provenance | None,
    measurements: MeasurementColumns | Sequence[Measurement],
    created_by: int | None,
) -> MeasurementSetRow:
    """Insert the set and all its rows (executemany per batch); the caller commits or rolls
    back."""
    if not isinstance(measurements, MeasurementColumns):
        measurements = MeasurementColumns(max(len(measurements), 1)).extend(measurements)
    row = MeasurementSetRow(
        name=name or f"set-{uuid.uuid4().hex[:12]}",
        source=source,
        metadata_=metadata,
        stack=stack_row(session, stack) if stack is not None else None,
        row_count=len(measurements),
        models={"names": measurements.models},
        created_by=created_by,
    )
    session.add(row)
    session.flush()
    batch: list[dict[str, Any]] = []
    for record in measurements.records():
        record["set_id"] = row.id
        batch.append(record)
        if len(batch) == INSERT_BATCH_ROWS:
            session.execute(insert(MeasurementRow), batch)
            batch = []
    if batch:
        session.execute(insert(MeasurementRow), batch)
    return row


def list_measurement_sets(
    session: Session, *, source: str | None, model: str | None, limit: int, offset: int
) -> tuple[list[MeasurementSetRow], int]:
    query = select(MeasurementSetRow).order_by(MeasurementSetRow.id)
    if source is not None:
        query = query.where(MeasurementSetRow.source == source)
    if model is not None:
        query = query.where(
            MeasurementSetRow.id.in_(
                select(MeasurementRow.set_id).where(MeasurementRow.model == model).distinct()
            )
        )
    return _page(session, query, limit, offset)


def get_measurement_set(session: Session, set_id: int) -> MeasurementSetRow | None:
    return session.get(MeasurementSetRow, set_id)


def delete_measurement_set(session: Session, set_id: int) -> bool:
    # Delete rows explicitly: do not rely on ON DELETE CASCADE being enforced by every backend.
    session.execute(delete(MeasurementRow).where(MeasurementRow.set_id == set_id))
    result = session.execute(delete(MeasurementSetRow).where(MeasurementSetRow.id == set_id))
    return bool(result.rowcount)


def measurement_out(row: MeasurementRow) -> MeasurementOut:
    # The row's columns carry the schema's fields under the same names.
    return MeasurementOut.model_validate(row, from_attributes=True)


def list_measurements(
    session: Session, set_id: int, *, model: str | None, limit: int, offset: int
) -> tuple[list[MeasurementRow], int]:
    query = select(MeasurementRow).where(MeasurementRow.set_id == set_id)
    if model is not None:
        query = query.where(MeasurementRow.model == model)
    return _page(session, query.order_by(MeasurementRow.id), limit, offset)


def set_measurements(
    session: Session, set_id: int, models: Sequence[str] | None = None
) -> list[Measurement]:
    query = select(
        MeasurementRow.model,
        MeasurementRow.num_prompt_tokens,
        MeasurementRow.num_output_tokens,
        MeasurementRow.batch_size,
        MeasurementRow.runtime_s,
        MeasurementRow.ttft_s,
        MeasurementRow.std_s,
    ).where(MeasurementRow.set_id == set_id)
    if models:
        query = query.where(MeasurementRow.model.in_(list(models)))
    # The selected columns are named as Measurement's fields.
    return [Measurement(**r._mapping) for r in session.execute(query.order_by(MeasurementRow.id))]


# --- fits --------------------------------------------------------------------------------------


def fit_model(row: FitRow) -> FittedCostModel:
    return FittedCostModel(**row.parameters)


def fit_out(row: FitRow) -> FitOut:
    return FitOut(
        **row.parameters,
        id=row.id,
        source=row.source,  # type: ignore[arg-type]
        measurement_set_id=row.measurement_set_id,
    )


def add_fit(
    session: Session, fit: FittedCostModel, *, source: str, measurement_set_id: int | None
) -> FitRow:
    quality = fit.quality
    row = FitRow(
        model=fit.model,
        method=fit.method,
        measurement_set_id=measurement_set_id,
        source=source,
        n_points=quality.n_points if quality else None,
        r2=quality.r2 if quality else None,
        mape=quality.mape if quality else None,
        max_error=quality.max_error if quality else None,
        parameters=fit.model_dump(mode="json"),
        created_at=fit.created_at,
    )
    session.add(row)
    session.flush()
    return row


def list_fits(
    session: Session,
    *,
    model: str | None,
    method: str | None,
    measurement_set_id: int | None,
    limit: int,
    offset: int,
) -> tuple[list[FitRow], int]:
    query = select(FitRow).order_by(FitRow.id)
    if model is not None:
        query = query.where(FitRow.model == model)
    if method is not None:
        query = query.where(FitRow.method == method)
    if measurement_set_id is not None:
        query = query.where(FitRow.measurement_set_id == measurement_set_id)
    return _page(session, query, limit, offset)


def get_fit(session: Session, fit_id: int) -> FitRow | None:
    return session.get(FitRow, fit_id)


def current_fit(session: Session, model: str, metric: Metric) -> FitRow | None:
    """The newest fit of ``model`` for ``metric`` (idealized: helm/default; denoised)."""
    return session.execute(
        select(FitRow)
        .where(FitRow.model == model, FitRow.method.in_(METRIC_METHODS[metric]))
        .order_by(FitRow.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def current_fits(session: Session, metric: Metric) -> dict[str, FitRow]:
    """The newest fit of every model for ``metric``."""
    latest = (
        select(func.max(FitRow.id))
        .where(FitRow.method.in_(METRIC_METHODS[metric]))
        .group_by(FitRow.model)
    )
    rows = session.execute(select(FitRow).where(FitRow.id.in_(latest))).scalars()
    return {row.model: row for row in rows}


# --- capability scores -------------------------------------------------------------------------


def upsert_capability_scores(session: Session, scores: Sequence[CapabilityScore]) -> int:
    """Insert or replace (model, scenario, metric) values; returns how many were written."""
    keys = {(s.model, s.scenario, s.metric): s.value for s in scores}
    models = sorted({model for model, _, _ in keys})
    existing = {
        (row.model, row.scenario, row.metric): row
        for row in session.execute(
            select(CapabilityScoreRow).where(CapabilityScoreRow.model.in_(models))
        ).scalars()
    }
    for key, value in keys.items():
        if key in existing:
            existing[key].value = value
        else:
            session.add(
                CapabilityScoreRow(model=key[0], scenario=key[1], metric=key[2], value=value)
            )
    session.flush()
    return len(keys)


def list_capability_scores(
    session: Session,
    *,
    model: str | None,
    scenario: str | None,
    metric: str | None,
    limit: int,
    offset: int,
) -> tuple[list[CapabilityScoreOut], int]:
    query = select(CapabilityScoreRow).order_by(CapabilityScoreRow.id)
    if model is not None:
        query = query.where(CapabilityScoreRow.model == model)
    if scenario is not None:
        query = query.where(CapabilityScoreRow.scenario == scenario)
    if metric is not None:
        query = query.where(CapabilityScoreRow.metric == metric)
    rows, total = _page(session, query, limit, offset)
    return [
        CapabilityScoreOut(
            id=r.id, model=r.model, scenario=r.scenario, metric=r.metric, value=r.value
        )
        for r in rows
    ], total


def all_capability_scores(session: Session) -> list[CapabilityScoreRow]:
    return list(session.execute(select(CapabilityScoreRow)).scalars())


# --- idempotency -------------------------------------------------------------------------------


def get_idempotency_record(
    session: Session, api_key_id: int, key: str
) -> IdempotencyRecordRow | None:
    return session.execute(
        select(IdempotencyRecordRow).where(
            IdempotencyRecordRow.api_key_id == api_key_id, IdempotencyRecordRow.key == key
        )
    ).scalar_one_or_none()


# --- load summaries ----------------------------------------------------------------------------


def load_summary_out(row: LoadSummaryRow) -> LoadSummaryOut:
    return LoadSummaryOut(
        **LoadSummary.model_validate(row.summary).model_dump(),
        id=row.id,
        source=row.source,
        created_at=row.created_at,
    )


def upsert_load_summaries(
    session: Session, summaries: Sequence[LoadSummary], source: str
) -> list[LoadSummaryRow]:
    """Insert or replace the (model, load, source) rows; the rows written, in input order."""
    latest = {(s.model, s.load): s for s in summaries}
    models = sorted({model for model, _ in latest})
    existing = {
        (row.model, row.load): row
        for row in session.execute(
            select(LoadSummaryRow).where(
                LoadSummaryRow.model.in_(models), LoadSummaryRow.source == source
            )
        ).scalars()
    }
    rows = []
    for key, summary in latest.items():
        row = existing.get(key) or LoadSummaryRow(model=key[0], load=key[1], source=source)
        row.requests_per_s = summary.requests_per_s
        row.goodput_requests_per_s = summary.goodput_requests_per_s
        row.summary = summary.model_dump(mode="json")
        if key not in existing:
            session.add(row)
        rows.append(row)
    session.flush()
    return rows


def list_load_summaries(
    session: Session, *, model: str | None, source: str | None, limit: int, offset: int
) -> tuple[list[LoadSummaryOut], int]:
    query = select(LoadSummaryRow).order_by(LoadSummaryRow.model, LoadSummaryRow.id)
    if model is not None:
        query = query.where(LoadSummaryRow.model == model)
    if source is not None:
        query = query.where(LoadSummaryRow.source == source)
    rows, total = _page(session, query, limit, offset)
    return [load_summary_out(row) for row in rows], total


def all_load_summaries(session: Session) -> list[LoadSummaryOut]:
    rows = session.execute(select(LoadSummaryRow).order_by(LoadSummaryRow.id)).scalars()
    return [load_summary_out(row) for row in rows]
