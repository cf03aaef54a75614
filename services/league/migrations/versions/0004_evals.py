"""Held-out evaluations (docs/eval.md): benchmark scores per run, adapter version and benchmark.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "league_evals",
        sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), primary_key=True),
        sa.Column("adapter_id", sa.String(128), primary_key=True),
        sa.Column("version", sa.BigInteger, primary_key=True),
        sa.Column("benchmark", sa.String(64), primary_key=True),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("label", sa.String(200), nullable=False, server_default=""),
        sa.Column("n_problems", sa.Integer, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("pass_at_1", sa.Float, nullable=False),
        sa.Column("pass_at_k_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("problems_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )
    op.create_index("ix_league_evals_run_step", "league_evals", ["run_id", "step"])


def downgrade() -> None:
    op.drop_index("ix_league_evals_run_step", table_name="league_evals")
    op.drop_table("league_evals")
