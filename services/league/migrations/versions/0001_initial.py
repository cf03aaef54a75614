"""League schema: runs, adapters, rating history, matches, lineage, payoff.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "league_runs",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("mode", sa.String(32), nullable=False, server_default=""),
        sa.Column("config_yaml", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "league_adapters",
        sa.Column("adapter_id", sa.String(128), primary_key=True),
        sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="active"),
        sa.Column("rank", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_step", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("retired_step", sa.BigInteger, nullable=True),
        sa.Column("mu", sa.Float, nullable=False),
        sa.Column("sigma", sa.Float, nullable=False),
        sa.Column("matches", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("wins", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("losses", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("draws", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("operator", sa.String(16), nullable=False, server_default=""),
        sa.Column("params_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("seed", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("parents_json", sa.Text, nullable=False, server_default="[]"),
    )
    op.create_index("ix_league_adapters_run_role", "league_adapters", ["run_id", "role"])
    op.create_table(
        "league_rating_history",
        sa.Column("adapter_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
        sa.Column("step", sa.BigInteger, primary_key=True),
        sa.Column("mu", sa.Float, nullable=False),
        sa.Column("sigma", sa.Float, nullable=False),
        sa.Column("matches", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "league_matches",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("match_id", sa.String(400), nullable=False, unique=True),
        sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), nullable=False),
        sa.Column("teacher_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), nullable=False),
        sa.Column("student_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), nullable=False),
        sa.Column("task_type", sa.String(16), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("rho", sa.Float, nullable=False),
        sa.Column("rhos_json", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(400), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_league_matches_run_id", "league_matches", ["run_id", "id"])
    op.create_index("ix_league_matches_teacher", "league_matches", ["teacher_id", "id"])
    op.create_index("ix_league_matches_student", "league_matches", ["student_id", "id"])
    op.create_table(
        "league_lineage",
        sa.Column("parent_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
        sa.Column("child_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
        sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), nullable=False),
        sa.Column("operator", sa.String(16), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_league_lineage_child", "league_lineage", ["child_id"])
    op.create_table(
        "league_payoff",
        sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), primary_key=True),
        sa.Column("teacher_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
        sa.Column("student_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
        sa.Column("weighted_sum", sa.Float, nullable=False),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("matches", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("league_payoff")
    op.drop_index("ix_league_lineage_child", table_name="league_lineage")
    op.drop_table("league_lineage")
    op.drop_index("ix_league_matches_student", table_name="league_matches")
    op.drop_index("ix_league_matches_teacher", table_name="league_matches")
    op.drop_index("ix_league_matches_run_id", table_name="league_matches")
    op.drop_table("league_matches")
    op.drop_table("league_rating_history")
    op.drop_index("ix_league_adapters_run_role", table_name="league_adapters")
    op.drop_table("league_adapters")
    op.drop_table("league_runs")
