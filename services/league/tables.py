"""SQLAlchemy table definitions of the league database (runs, adapters, ratings, matches, lineage, payoff, compute,
held-out evaluations, step summaries, run progress and step problems).

The schema itself is created by the Alembic migrations in `migrations/`; each table here is built from the columns
of the revision that last changed it (`migrations/columns.py`), so queries and migrations cannot disagree.
"""

from __future__ import annotations

import sqlalchemy as sa

from services.league.migrations import columns

metadata = sa.MetaData()

runs = sa.Table("league_runs", metadata, *columns.runs_0001())
adapters = sa.Table("league_adapters", metadata, *columns.adapters_0001(),
                    sa.Index("ix_league_adapters_run_role", "run_id", "role"))
rating_history = sa.Table("league_rating_history", metadata, *columns.rating_history_0001())
matches = sa.Table("league_matches", metadata, *columns.matches_0001(),
                   sa.Index("ix_league_matches_run_id", "run_id", "id"),
                   sa.Index("ix_league_matches_teacher", "teacher_id", "id"),
                   sa.Index("ix_league_matches_student", "student_id", "id"))
lineage = sa.Table("league_lineage", metadata, *columns.lineage_0001(),
                   sa.Index("ix_league_lineage_child", "child_id"),
                   sa.Index("ix_league_lineage_run", "run_id", "step"))
payoff = sa.Table("league_payoff", metadata, *columns.payoff_0001())
compute = sa.Table("league_compute", metadata, *columns.compute_0003())
evals = sa.Table("league_evals", metadata, *columns.evals_0004(),
                 sa.Index("ix_league_evals_run_step", "run_id", "step"))
step_summaries = sa.Table("league_step_summaries", metadata, *columns.step_summaries_0006())
run_status = sa.Table("league_run_status", metadata, *columns.run_status_0007())
phase_progress = sa.Table("league_phase_progress", metadata, *columns.phase_progress_0007())
step_problems = sa.Table("league_step_problems", metadata, *columns.step_problems_0007())
