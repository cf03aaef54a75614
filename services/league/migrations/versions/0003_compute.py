"""Compute accounting (spec 14): generated tokens, trained tokens and sandbox jobs per run, step and adapter.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "league_compute",
        sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), primary_key=True),
        sa.Column("step", sa.BigInteger, primary_key=True),
        sa.Column("adapter_id", sa.String(128), primary_key=True),
        sa.Column("generated_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("trained_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("sandbox_jobs", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("league_compute")
