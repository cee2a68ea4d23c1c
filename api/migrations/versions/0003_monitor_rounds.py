"""Monitoring rounds: one row per round of one provider's model, its statistics in columns.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATISTICS = (
    "ttft_s",
    "itl_s",
    "output_tokens_per_s",
    "denoised_runtime_s",
    "idealized_runtime_s",
    "discrepancy",
)


def upgrade() -> None:
    op.create_table(
        "monitor_rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("round_id", sa.String(length=200), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("failed_requests", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.Float(), nullable=True) for name in STATISTICS),
        sa.Column("error_rate", sa.Float(), nullable=False),
        sa.Column("usd", sa.Float(), nullable=True),
        sa.Column("reference", sa.String(length=200), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("measurement_set_id", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["measurement_set_id"], ["measurement_sets.id"], ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["created_by"], ["api_keys.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("round_id"),
    )
    op.create_index(
        "ix_monitor_rounds_series", "monitor_rounds", ["provider", "model", "started_at"]
    )
    op.create_index("ix_monitor_rounds_started_at", "monitor_rounds", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_monitor_rounds_started_at", table_name="monitor_rounds")
    op.drop_index("ix_monitor_rounds_series", table_name="monitor_rounds")
    op.drop_table("monitor_rounds")
