"""SQLAlchemy table definitions of the league database (runs, adapters, ratings, matches, lineage, payoff, compute,
held-out evaluations).

The schema itself is created by the Alembic migrations in `migrations/`; these definitions mirror them for queries.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# An auto-incrementing 64-bit id on Postgres that is still SQLite's rowid alias there.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

runs = sa.Table(
    "league_runs", metadata,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("mode", sa.String(32), nullable=False, server_default=""),
    sa.Column("config_yaml", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

adapters = sa.Table(
    "league_adapters", metadata,
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
    sa.Index("ix_league_adapters_run_role", "run_id", "role"),
)

rating_history = sa.Table(
    "league_rating_history", metadata,
    sa.Column("adapter_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
    sa.Column("step", sa.BigInteger, primary_key=True),
    sa.Column("mu", sa.Float, nullable=False),
    sa.Column("sigma", sa.Float, nullable=False),
    sa.Column("matches", sa.BigInteger, nullable=False),
)

matches = sa.Table(
    "league_matches", metadata,
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
    sa.Index("ix_league_matches_run_id", "run_id", "id"),
    sa.Index("ix_league_matches_teacher", "teacher_id", "id"),
    sa.Index("ix_league_matches_student", "student_id", "id"),
)

lineage = sa.Table(
    "league_lineage", metadata,
    sa.Column("parent_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
    sa.Column("child_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
    sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), nullable=False),
    sa.Column("operator", sa.String(16), nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Index("ix_league_lineage_child", "child_id"),
    sa.Index("ix_league_lineage_run", "run_id", "step"),
)

payoff = sa.Table(
    "league_payoff", metadata,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), primary_key=True),
    sa.Column("teacher_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
    sa.Column("student_id", sa.String(128), sa.ForeignKey("league_adapters.adapter_id"), primary_key=True),
    sa.Column("weighted_sum", sa.Float, nullable=False),
    sa.Column("weight", sa.Float, nullable=False),
    sa.Column("matches", sa.BigInteger, nullable=False),
)

compute = sa.Table(
    "league_compute", metadata,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), primary_key=True),
    sa.Column("step", sa.BigInteger, primary_key=True),
    sa.Column("adapter_id", sa.String(128), primary_key=True),  # "base": the bare base model; "": the run itself
    sa.Column("generated_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("trained_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("sandbox_jobs", sa.BigInteger, nullable=False, server_default="0"),
)

evals = sa.Table(
    "league_evals", metadata,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("league_runs.run_id"), primary_key=True),
    sa.Column("adapter_id", sa.String(128), primary_key=True),  # "": the bare base model
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
    sa.Index("ix_league_evals_run_step", "run_id", "step"),
)
