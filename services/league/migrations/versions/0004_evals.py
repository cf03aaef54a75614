"""Held-out evaluations (docs/eval.md): benchmark scores per run, adapter version and benchmark.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from services.league.migrations import columns

revision, down_revision = "0004", "0003"
upgrade, downgrade = columns.table_revision("league_evals", columns.evals_0004,
                                            {"ix_league_evals_run_step": ["run_id", "step"]})
