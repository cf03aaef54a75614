"""Compute accounting (spec 14): generated tokens, trained tokens and sandbox jobs per run, step and adapter.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from services.league.migrations import columns

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("league_compute", *columns.compute_0003())


def downgrade() -> None:
    op.drop_table("league_compute")
