"""The league's columns as each migration created them: one function per table and the revision that made it.

A migration builds its table from these, and so does tables.py for every table whose columns no later revision
changed. These functions are history: once a migration that uses one is released, it never changes. A revision that
changes a table adds a new function (`adapters_0006`, say) and tables.py moves to it; the old one stays as it was,
so every revision still creates what it created when it was written.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

# An auto-incrementing 64-bit id on Postgres that is still SQLite's rowid alias there.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def table_revision(name: str, columns: Callable[[], list[sa.Column]],
                   indexes: dict[str, list[str]] | None = None) -> tuple[Callable[[], None], Callable[[], None]]:
    """(upgrade, downgrade) of a revision that adds one table, with `indexes` (name -> columns) on it."""
    indexes = indexes or {}

    def upgrade() -> None:
        op.create_table(name, *columns())
        for index, on in indexes.items():
            op.create_index(index, name, on)

    def downgrade() -> None:
        for index in reversed(indexes):
            op.drop_index(index, table_name=name)
        op.drop_table(name)

    return upgrade, downgrade


def _run_id(**key: bool) -> sa.Column:
    return sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), **key)


def _adapter(name: str, **key: bool) -> sa.Column:
    return sa.Column(name, sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), **key)


def _count(name: str, default: str | None = "0") -> sa.Column:
    return sa.Column(name, sa.BigInteger, nullable=False, server_default=default)


def _floats(*names: str) -> list[sa.Column]:
    return [sa.Column(name, sa.Float, nullable=False) for name in names]


def runs_0001() -> list[sa.Column]:
    return [sa.Column("run_id", sa.String(200), primary_key=True),
            sa.Column("mode", sa.String(32), nullable=False, server_default=""),
            sa.Column("config_yaml", sa.Text, nullable=False, server_default=""),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now())]


def adapters_0001() -> list[sa.Column]:
    return [sa.Column("adapter_id", sa.String(128), primary_key=True), _run_id(nullable=False),
            sa.Column("role", sa.String(16), nullable=False),
            sa.Column("status", sa.String(16), nullable=False, server_default="active"),
            sa.Column("rank", sa.Integer, nullable=False, server_default="0"), _count("created_step"),
            sa.Column("retired_step", sa.BigInteger, nullable=True), *_floats("mu", "sigma"),
            *[_count(name) for name in ("matches", "wins", "losses", "draws")],
            sa.Column("operator", sa.String(16), nullable=False, server_default=""),
            sa.Column("params_json", sa.Text, nullable=False, server_default="{}"), _count("seed"),
            sa.Column("parents_json", sa.Text, nullable=False, server_default="[]")]


def rating_history_0001() -> list[sa.Column]:
    return [_adapter("adapter_id", primary_key=True), sa.Column("step", sa.BigInteger, primary_key=True),
            *_floats("mu", "sigma"), _count("matches", None)]


def matches_0001() -> list[sa.Column]:
    return [sa.Column("id", BigId, primary_key=True, autoincrement=True),
            sa.Column("match_id", sa.String(400), nullable=False, unique=True), _run_id(nullable=False),
            _adapter("teacher_id", nullable=False), _adapter("student_id", nullable=False),
            sa.Column("task_type", sa.String(16), nullable=False), _count("step", None), *_floats("rho"),
            sa.Column("rhos_json", sa.Text, nullable=False), sa.Column("outcome", sa.String(400), nullable=False),
            sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now())]


def lineage_0001() -> list[sa.Column]:
    return [_adapter("parent_id", primary_key=True), _adapter("child_id", primary_key=True),
            _run_id(nullable=False), sa.Column("operator", sa.String(16), nullable=False), _count("step", None)]


def payoff_0001() -> list[sa.Column]:
    return [_run_id(primary_key=True), _adapter("teacher_id", primary_key=True),
            _adapter("student_id", primary_key=True), *_floats("weighted_sum", "weight"), _count("matches", None)]


def compute_0003() -> list[sa.Column]:
    return [_run_id(primary_key=True), sa.Column("step", sa.BigInteger, primary_key=True),
            sa.Column("adapter_id", sa.String(128), primary_key=True),  # "base": the bare base model; "": the run
            *[_count(name) for name in ("generated_tokens", "trained_tokens", "sandbox_jobs")]]


def evals_0004() -> list[sa.Column]:
    return [_run_id(primary_key=True),
            sa.Column("adapter_id", sa.String(128), primary_key=True),  # "": the bare base model
            sa.Column("version", sa.BigInteger, primary_key=True),
            sa.Column("benchmark", sa.String(64), primary_key=True), _count("step", None),
            sa.Column("label", sa.String(200), nullable=False, server_default=""),
            sa.Column("n_problems", sa.Integer, nullable=False), sa.Column("samples", sa.Integer, nullable=False),
            *_floats("pass_at_1"), sa.Column("pass_at_k_json", sa.Text, nullable=False, server_default="{}"),
            sa.Column("problems_json", sa.Text, nullable=False, server_default="[]"), *_floats("recorded_at")]


def step_summaries_0006() -> list[sa.Column]:
    return [_run_id(primary_key=True), sa.Column("step", sa.BigInteger, primary_key=True),
            sa.Column("summary_json", sa.Text, nullable=False), *_floats("recorded_at")]


def run_status_0007() -> list[sa.Column]:
    return [_run_id(primary_key=True), sa.Column("status", sa.String(16), nullable=False),
            *_floats("created_at", "updated_at")]


def phase_progress_0007() -> list[sa.Column]:
    return [_run_id(primary_key=True), sa.Column("step", sa.BigInteger, primary_key=True),
            sa.Column("phase", sa.String(32), primary_key=True), *_floats("seconds", "finished_at"),
            sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("error", sa.Text, nullable=True)]  # NULL: stored; text: failed on every delivery


def step_problems_0007() -> list[sa.Column]:
    return [_run_id(primary_key=True), sa.Column("step", sa.BigInteger, primary_key=True),
            sa.Column("problems_json", sa.Text, nullable=False), *_floats("recorded_at")]
