"""Run progress: where a run stands and what its steps proposed and answered, as the coordinator records them.

Revision ID: 0007
Revises: 0006

The dashboard read the coordinator's phase journal, its private tables, by SQL for a run's status, its
persisted phases and a step's proposals, verdicts, answers and outcomes: a second reader of tables the coordinator
owns. The coordinator now records them through the league's API (RecordRun, RecordPhases, RecordStepProblems) and the
league serves what it stored. A run recorded before this revision shows its per-step figures (0006) but no progress
or problems until `populora train --resume --run-id RUN` with the run's own step count records them again from its
journal (nothing is run again); the journal's tables are left as they are.
"""

from __future__ import annotations

from services.league.migrations import columns

revision, down_revision = "0007", "0006"

TABLES = [columns.table_revision("league_run_status", columns.run_status_0007),
          columns.table_revision("league_phase_progress", columns.phase_progress_0007),
          columns.table_revision("league_step_problems", columns.step_problems_0007)]


def upgrade() -> None:
    for up, _ in TABLES:
        up()


def downgrade() -> None:
    for _, down in reversed(TABLES):
        down()
