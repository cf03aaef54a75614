"""Held-out evaluations (docs/eval.md): benchmark scores per run, adapter version and benchmark.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

from services.league.migrations import columns

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("league_evals", *columns.evals_0004())
    op.create_index("ix_league_evals_run_step", "league_evals", ["run_id", "step"])


def downgrade() -> None:
    op.drop_index("ix_league_evals_run_step", table_name="league_evals")
    op.drop_table("league_evals")
