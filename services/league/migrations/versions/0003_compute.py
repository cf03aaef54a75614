"""Compute accounting (spec 14): generated tokens, trained tokens and sandbox jobs per run, step and adapter.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from services.league.migrations import columns

revision, down_revision = "0003", "0002"
upgrade, downgrade = columns.table_revision("league_compute", columns.compute_0003)
