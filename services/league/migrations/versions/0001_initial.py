"""League schema: runs, adapters, rating history, matches, lineage, payoff.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from services.league.migrations import columns

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

def upgrade() -> None:
    op.create_table("league_runs", *columns.runs_0001())
    op.create_table("league_adapters", *columns.adapters_0001())
    op.create_index("ix_league_adapters_run_role", "league_adapters", ["run_id", "role"])
    op.create_table("league_rating_history", *columns.rating_history_0001())
    op.create_table("league_matches", *columns.matches_0001())
    op.create_index("ix_league_matches_run_id", "league_matches", ["run_id", "id"])
    op.create_index("ix_league_matches_teacher", "league_matches", ["teacher_id", "id"])
    op.create_index("ix_league_matches_student", "league_matches", ["student_id", "id"])
    op.create_table("league_lineage", *columns.lineage_0001())
    op.create_index("ix_league_lineage_child", "league_lineage", ["child_id"])
    op.create_table("league_payoff", *columns.payoff_0001())


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
