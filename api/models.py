"""Database tables (SQLAlchemy 2 typed ORM).

Domain objects (``idealized_runtime.core.types``) are stored whole as JSON in a ``spec`` or
``parameters`` column, with the fields that are filtered or joined on copied into their own
columns; the JSON is what the API returns, so the database never drifts from the domain types.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from idealized_runtime.core.types import utc_now

NAME_LENGTH = 200


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend: SQLite stores no offset and gives naive
    values back, which would serialise without a zone."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        datetime: UTCDateTime(),
    }


class ArchitectureRow(Base):
    __tablename__ = "architectures"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    family: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    num_parameters: Mapped[int] = mapped_column(BigInteger)  # above 2^31 for large models
    spec: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class HardwareRow(Base):
    __tablename__ = "hardware"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    vendor: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    spec: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class StackRow(Base):
    """A hardware/software stack; identical stacks share a row (``fingerprint``)."""

    __tablename__ = "stacks"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    runner: Mapped[str] = mapped_column(String(NAME_LENGTH))
    hardware: Mapped[str] = mapped_column(String(NAME_LENGTH))
    spec: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class ApiKeyRow(Base):
    """An API key: only its lookup prefix and the sha256 of the whole key are stored."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    key_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class MeasurementSetRow(Base):
    __tablename__ = "measurement_sets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    source: Mapped[str] = mapped_column(String(32))  # local_profile | api_timing | import
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    stack_id: Mapped[int | None] = mapped_column(ForeignKey("stacks.id"), default=None)
    row_count: Mapped[int] = mapped_column(Integer)
    models: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"names": [...]}: models in the set
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utc_now)

    stack: Mapped[StackRow | None] = relationship(lazy="joined")


class MeasurementRow(Base):
    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_set_model", "set_id", "model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    set_id: Mapped[int] = mapped_column(ForeignKey("measurement_sets.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(NAME_LENGTH))
    num_prompt_tokens: Mapped[int] = mapped_column(Integer)
    num_output_tokens: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer, default=1)
    runtime_s: Mapped[float] = mapped_column(Float)
    ttft_s: Mapped[float | None] = mapped_column(Float, default=None)
    std_s: Mapped[float | None] = mapped_column(Float, default=None)


class FitRow(Base):
    __tablename__ = "fits"
    __table_args__ = (Index("ix_fits_model_method", "model", "method"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(NAME_LENGTH))
    method: Mapped[str] = mapped_column(String(16))  # helm | default | denoised
    measurement_set_id: Mapped[int | None] = mapped_column(
        ForeignKey("measurement_sets.id", ondelete="SET NULL"), default=None
    )
    source: Mapped[str] = mapped_column(String(32))  # fitted | import
    # Quality figures in columns so that they can be sorted and filtered on.
    n_points: Mapped[int | None] = mapped_column(Integer, default=None)
    r2: Mapped[float | None] = mapped_column(Float, default=None)
    mape: Mapped[float | None] = mapped_column(Float, default=None)
    max_error: Mapped[float | None] = mapped_column(Float, default=None)
    parameters: Mapped[dict[str, Any]]  # the FittedCostModel, as JSON
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class CapabilityScoreRow(Base):
    __tablename__ = "capability_scores"
    __table_args__ = (UniqueConstraint("model", "scenario", "metric"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    scenario: Mapped[str] = mapped_column(String(NAME_LENGTH))
    metric: Mapped[str] = mapped_column(String(NAME_LENGTH))
    value: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class IdempotencyRecordRow(Base):
    """The response to a write made with an ``Idempotency-Key``, stored in the same transaction
    as the write itself: a retry finds it and gets the same answer."""

    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("api_key_id", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(NAME_LENGTH))
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(500))
    request_sha256: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response_body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class LoadSummaryRow(Base):
    """What users saw from a model at one load level (a LoadSummary, whole in ``summary``);
    one row per (model, load, source): a new upload replaces it."""

    __tablename__ = "load_summaries"
    __table_args__ = (UniqueConstraint("model", "load", "source"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    load: Mapped[str] = mapped_column(String(NAME_LENGTH))
    source: Mapped[str] = mapped_column(String(NAME_LENGTH))  # measured, simulated, a label
    requests_per_s: Mapped[float] = mapped_column(Float)
    goodput_requests_per_s: Mapped[float] = mapped_column(Float)
    summary: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class MonitorRoundRow(Base):
    """One monitoring round of one provider's model (a ``RoundPoint`` in columns, the probe's
    shapes and load summary in ``details``); its measurements are a measurement set. The
    ``round_id`` is the round's identity: storing it again stores nothing."""

    __tablename__ = "monitor_rounds"
    __table_args__ = (
        Index("ix_monitor_rounds_series", "provider", "model", "started_at"),
        Index("ix_monitor_rounds_started_at", "started_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    round_id: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    # sha256 of the round as stored: a second store of the same id must be the same round.
    fingerprint: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(NAME_LENGTH))
    round_index: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(16))  # ok | failed
    error: Mapped[str | None] = mapped_column(String(500), default=None)
    requests: Mapped[int] = mapped_column(Integer)
    failed_requests: Mapped[int] = mapped_column(Integer)
    ttft_s: Mapped[float | None] = mapped_column(Float, default=None)
    itl_s: Mapped[float | None] = mapped_column(Float, default=None)
    output_tokens_per_s: Mapped[float | None] = mapped_column(Float, default=None)
    denoised_runtime_s: Mapped[float | None] = mapped_column(Float, default=None)
    idealized_runtime_s: Mapped[float | None] = mapped_column(Float, default=None)
    discrepancy: Mapped[float | None] = mapped_column(Float, default=None)
    error_rate: Mapped[float] = mapped_column(Float)
    usd: Mapped[float | None] = mapped_column(Float, default=None)
    reference: Mapped[str | None] = mapped_column(String(NAME_LENGTH), default=None)
    details: Mapped[dict[str, Any]]  # {"shapes": [...], "summary": LoadSummary | null}
    measurement_set_id: Mapped[int | None] = mapped_column(
        ForeignKey("measurement_sets.id", ondelete="SET NULL"), default=None
    )
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
