"""Step summaries: what each step of a run did, as the coordinator summarised it from the step's records.

Revision ID: 0006
Revises: 0005

The dashboard's per-step figures (seconds per phase, valid and solve rates, rejections, outcomes, compute, evolution)
were derived by the league from the coordinator's phase journal, a second reading of a layout the coordinator owns.
The coordinator now sends each step's summary (RecordStepSummary) and the league serves what it stored.
"""

from __future__ import annotations

from services.league.migrations import columns

revision, down_revision = "0006", "0005"
upgrade, downgrade = columns.table_revision("league_step_summaries", columns.step_summaries_0006)
