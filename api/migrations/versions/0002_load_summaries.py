"""Load summaries: throughput, latency percentiles and goodput per model and load level.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 09:05:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "load_summaries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("load", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("requests_per_s", sa.Float(), nullable=False),
        sa.Column("goodput_requests_per_s", sa.Float(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("model", "load", "source"),
    )
    op.create_index("ix_load_summaries_model", "load_summaries", ["model"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_load_summaries_model", table_name="load_summaries")
    op.drop_table("load_summaries")
