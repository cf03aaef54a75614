"""Read paths of the dashboard and the leaderboard: a run's lineage by step, and room on the pages of the rows
every match report rewrites.

Revision ID: 0002
Revises: 0001

- `ix_league_lineage_run`: the run-wide lineage (tree, evolution events) reads one run's edges by step; the
  table's keys start with parent and child, so without it that read scanned every run's edges.
- Postgres only: `league_adapters` and `league_payoff` are rewritten by every match report (mu, sigma, counters;
  payoff cells). With fill factor 50 each page keeps room for new row versions, so the updates are HOT (no index
  entries, dead versions pruned on the page as it is read) and the tables stay the size of their live rows instead
  of growing until autovacuum; autovacuum is also asked to visit them after 2% of their rows changed, not 20%.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

HOT_TABLES = ("league_adapters", "league_payoff")


def upgrade() -> None:
    op.create_index("ix_league_lineage_run", "league_lineage", ["run_id", "step"])
    if op.get_bind().dialect.name == "postgresql":
        for table in HOT_TABLES:
            op.execute(f"ALTER TABLE {table} SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02, "
                       "autovacuum_analyze_scale_factor = 0.05)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in HOT_TABLES:
            op.execute(f"ALTER TABLE {table} RESET (fillfactor, autovacuum_vacuum_scale_factor, "
                       "autovacuum_analyze_scale_factor)")
    op.drop_index("ix_league_lineage_run", table_name="league_lineage")
