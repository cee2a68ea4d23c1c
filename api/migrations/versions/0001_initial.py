"""Initial schema: catalog, measurements, fits, capability scores, API keys, idempotency.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-21 23:47:19.810045
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("key_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("prefix"),
    )
    op.create_table(
        "architectures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("family", sa.String(length=200), nullable=False),
        sa.Column("num_parameters", sa.BigInteger(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("architectures", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_architectures_family"), ["family"], unique=False)

    op.create_table(
        "capability_scores",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("scenario", sa.String(length=200), nullable=False),
        sa.Column("metric", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("model", "scenario", "metric"),
    )
    with op.batch_alter_table("capability_scores", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_capability_scores_model"), ["model"], unique=False)

    op.create_table(
        "hardware",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("vendor", sa.String(length=200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("hardware", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_hardware_vendor"), ["vendor"], unique=False)

    op.create_table(
        "stacks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("runner", sa.String(length=200), nullable=False),
        sa.Column("hardware", sa.String(length=200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("fingerprint"),
    )
    op.create_table(
        "idempotency_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("api_key_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("path", sa.String(length=500), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response_body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["api_key_id"], ["api_keys.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("api_key_id", "key"),
    )
    op.create_table(
        "measurement_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=True),
        sa.Column("row_count", sa.Integer(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["created_by"], ["api_keys.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["stack_id"],
            ["stacks.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "fits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("measurement_set_id", sa.Integer(), nullable=True),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("n_points", sa.Integer(), nullable=True),
        sa.Column("r2", sa.Float(), nullable=True),
        sa.Column("mape", sa.Float(), nullable=True),
        sa.Column("max_error", sa.Float(), nullable=True),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["measurement_set_id"], ["measurement_sets.id"], ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("fits", schema=None) as batch_op:
        batch_op.create_index("ix_fits_model_method", ["model", "method"], unique=False)

    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("set_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("num_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("num_output_tokens", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("runtime_s", sa.Float(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("std_s", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["set_id"], ["measurement_sets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.create_index("ix_measurements_set_model", ["set_id", "model"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.drop_index("ix_measurements_set_model")

    op.drop_table("measurements")
    with op.batch_alter_table("fits", schema=None) as batch_op:
        batch_op.drop_index("ix_fits_model_method")

    op.drop_table("fits")
    op.drop_table("measurement_sets")
    op.drop_table("idempotency_records")
    op.drop_table("stacks")
    with op.batch_alter_table("hardware", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_hardware_vendor"))

    op.drop_table("hardware")
    with op.batch_alter_table("capability_scores", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_capability_scores_model"))

    op.drop_table("capability_scores")
    with op.batch_alter_table("architectures", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_architectures_family"))

    op.drop_table("architectures")
    op.drop_table("api_keys")
