"""The league's storage: one SQLAlchemy code path for Postgres (distributed) and a SQLite file (embedded).

SQL only: the rules (what a request must satisfy, how matches change ratings) are services.league.engine, applied
here inside the transactions; errors are engine.InvalidRequest and engine.UnknownEntity, which the service turns
into gRPC status codes.

Every write is one transaction. Rating updates lock the rows of the adapters they touch (Postgres:
SELECT ... FOR UPDATE in id order, so concurrent reporters queue instead of losing updates or deadlocking;
SQLite: BEGIN IMMEDIATE, a single writer). A match id is inserted with ON CONFLICT DO NOTHING, so a match
reported twice, even by two reporters at once, is applied once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from populora.datastores import check_db_url
from services.league import checks
from services.league import tables as t
from services.league.db_lineage import LineageStore
from services.league.db_matches import MatchStore
from services.league.db_runs import RunProgressStore
from services.league.db_telemetry import TelemetryStore
from services.league.dialect_sql import bulk_writer
from services.league.engine import (
    AdapterRow,
    AdapterSpecIn,
    InvalidRequest,
    RatingRules,
    UnknownEntity,
)

ALEMBIC_INI = Path(__file__).resolve().parent / "alembic.ini"


def _row_to_adapter(row: sa.Row) -> AdapterRow:
    m = row._mapping
    return AdapterRow(adapter_id=m["adapter_id"], run_id=m["run_id"], role=m["role"], status=m["status"],
                      rank=m["rank"], created_step=m["created_step"], mu=m["mu"], sigma=m["sigma"],
                      matches=m["matches"], wins=m["wins"], losses=m["losses"], draws=m["draws"],
                      operator=m["operator"], parents=json.loads(m["parents_json"]),
                      retired_step=m["retired_step"])


def _sqlite_engine(url: str, immediate: bool) -> sa.Engine:
    """SQLite: let SQLAlchemy, not pysqlite, start transactions. The write engine starts each with BEGIN IMMEDIATE,
    so there is one writer at a time across threads and processes (the others wait up to the busy timeout); the
    read engine's deferred transactions read a WAL snapshot without blocking the writer."""
    engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class LeagueDB(MatchStore, LineageStore, TelemetryStore, RunProgressStore):
    """Runs, adapters, ratings, matches, lineage, payoff, telemetry and run progress in one database, behind
    transactional methods. This module holds the connection, the schema, runs and adapters; the rest are the stores
    it mixes in."""

    def __init__(self, url: str, rules: RatingRules | None = None, pool_size: int = 10, read_url: str = ""):
        self.url = url
        self.rules = rules or RatingRules()
        self.dialect = sa.engine.make_url(url).get_backend_name()
        # psycopg 3 can return rows in Postgres' binary format (matchmaking's ratings read uses it)
        self._binary_reads = self.dialect == "postgresql" and sa.engine.make_url(url).get_driver_name() == "psycopg"
        if self.dialect == "sqlite":
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            check_db_url(url)
            self.engine = sa.create_engine(url, pool_size=pool_size, max_overflow=2 * pool_size,
                                           pool_pre_ping=True)
            self.read_engine = self.engine
            if read_url:  # the reads through a role that cannot write (league.read_db_url)
                check_db_url(read_url, "league.read_db_url")
                self.read_engine = sa.create_engine(read_url, pool_size=pool_size, max_overflow=2 * pool_size,
                                                    pool_pre_ping=True)
        self.bulk = bulk_writer(self.dialect)
        self._env = self.rules.params.environment()
        # Bumped by every write made through this object; readers use it to invalidate caches.
        self.generation = 0
        self._gen_lock = threading.Lock()

    # ---- schema -------------------------------------------------------------------------------------------------
    def _alembic_config(self, connection: sa.Connection):
        from alembic.config import Config as AlembicConfig

        cfg = AlembicConfig(str(ALEMBIC_INI))
        cfg.set_main_option("script_location", str(ALEMBIC_INI.parent / "migrations"))
        cfg.attributes["connection"] = connection
        return cfg

    def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema to `revision` (the service does this on start)."""
        from alembic import command

        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
        with self.engine.begin() as conn:
            command.upgrade(self._alembic_config(conn), revision)

    def downgrade(self, revision: str = "base") -> None:
        """Downgrade the schema to `revision` (`base` drops every league table)."""
        from alembic import command

        with self.engine.begin() as conn:
            command.downgrade(self._alembic_config(conn), revision)

    def close(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    def _bump(self) -> None:
        with self._gen_lock:
            self.generation += 1

    def _insert(self, table: sa.Table):
        return (postgresql.insert(table) if self.dialect == "postgresql" else sqlite.insert(table))

    # ---- runs and adapters -------------------------------------------------------------------------------------
    def create_run(self, run_id: str, mode: str = "", config_yaml: str = "") -> bool:
        """Create a run; False when it exists in this mode already (idempotent; an empty mode matches any), Conflict
        when it exists in another."""
        if not run_id:
            raise InvalidRequest("run_id: must not be empty")
        checks.check_id(run_id, "run_id", "run_id")
        checks.check_text(mode, "mode", "mode")
        with self.engine.begin() as conn:
            created = conn.execute(self._insert(t.runs).values(run_id=run_id, mode=mode, config_yaml=config_yaml)
                                   .on_conflict_do_nothing(index_elements=["run_id"])
                                   .returning(t.runs.c.run_id)).first()
            if created is None:
                stored = conn.execute(sa.select(t.runs.c.mode).where(t.runs.c.run_id == run_id)).scalar_one()
                checks.check_same_run(run_id, mode, stored)
        self._bump()
        return created is not None

    def list_runs(self) -> list[dict]:
        """Every run with its adapter counts."""
        n_active = sa.func.sum(sa.case((t.adapters.c.status == "active", 1), else_=0))
        q = (sa.select(t.runs.c.run_id, t.runs.c.mode, t.runs.c.created_at,
                       sa.func.count(t.adapters.c.adapter_id).label("adapters"), n_active.label("active"))
             .select_from(t.runs.outerjoin(t.adapters, t.adapters.c.run_id == t.runs.c.run_id))
             .group_by(t.runs.c.run_id, t.runs.c.mode, t.runs.c.created_at).order_by(t.runs.c.created_at))
        with self.read_engine.connect() as conn:
            return [{"run_id": r.run_id, "mode": r.mode, "created_at": r.created_at.isoformat() if r.created_at
                     else None, "adapters": int(r.adapters or 0), "active": int(r.active or 0)}
                    for r in conn.execute(q).all()]

    def _require_run(self, conn: sa.Connection, run_id: str) -> None:
        if conn.execute(sa.select(t.runs.c.run_id).where(t.runs.c.run_id == run_id)).first() is None:
            raise UnknownEntity(f"run '{run_id}' does not exist; create it first (CreateRun)")

    def _replace_step_row(self, table: sa.Table, run_id: str, step: int, values: dict) -> bool:
        """Store one step's row of `table` (a per-step JSON record: summary, problems); a step recorded again is
        replaced, so a resumed step that records it again leaves one. Returns whether it replaced one."""
        c = table.c
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            replaced = conn.execute(table.delete().where(c.run_id == run_id, c.step == step)).rowcount
            conn.execute(table.insert().values(run_id=run_id, step=step, **values))
        self._bump()
        return replaced > 0

    def run_exists(self, run_id: str) -> bool:
        with self.read_engine.connect() as conn:
            return conn.execute(sa.select(t.runs.c.run_id).where(t.runs.c.run_id == run_id)).first() is not None

    def register_adapters(self, run_id: str, specs: Sequence[AdapterSpecIn]) -> list[AdapterRow]:
        """Register adapters with the default rating; one already registered in this run is left as it is."""
        checks.check_specs(specs)
        ids = [s.adapter_id for s in specs]
        p = self.rules.params
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            existing = self._adapters_by_id(conn, ids)
            checks.check_registration(run_id, specs, existing)
            new = [dict(adapter_id=s.adapter_id, run_id=run_id, role=s.role, status="active", rank=s.rank,
                        created_step=s.created_step, mu=p.mu, sigma=p.sigma) for s in specs
                   if s.adapter_id not in existing]
            if new:
                conn.execute(t.adapters.insert(), new)
                conn.execute(t.rating_history.insert(), [dict(adapter_id=n["adapter_id"], step=n["created_step"],
                                                              mu=p.mu, sigma=p.sigma, matches=0) for n in new])
            rows = self._adapters_by_id(conn, ids)
        self._bump()
        return [rows[i] for i in ids]

    def _adapters_by_id(self, conn: sa.Connection, ids: Iterable[str], lock: bool = False) -> dict[str, AdapterRow]:
        ids = sorted(set(ids))
        if not ids:
            return {}
        q = sa.select(t.adapters).where(self.bulk.any_of(t.adapters.c.adapter_id, ids)).order_by(
            t.adapters.c.adapter_id)
        if lock:
            q = q.with_for_update()
        return {r.adapter_id: r for r in map(_row_to_adapter, conn.execute(q).all())}

    def adapters(self, run_id: str, role: str = "", include_retired: bool = False) -> list[AdapterRow]:
        """A run's adapters; `role` teacher/student also matches `both`; best conservative skill first."""
        checks.check_role(role, "role", allow_empty=True)
        q = sa.select(t.adapters).where(t.adapters.c.run_id == run_id)
        if role:
            q = q.where(t.adapters.c.role.in_([role, "both"]))
        if not include_retired:
            q = q.where(t.adapters.c.status == "active")
        with self.read_engine.connect() as conn:
            self._require_run(conn, run_id)
            rows = [_row_to_adapter(r) for r in conn.execute(q).all()]
        k = self.rules.params.k
        return sorted(rows, key=lambda a: (-(a.mu - k * a.sigma), a.adapter_id))

    def active_skills(self, run_id: str) -> list[tuple[str, str, float, float]]:
        """(adapter_id, role, mu, sigma) of a run's active adapters, by id: all that matchmaking reads."""
        if self._binary_reads:
            return self._active_skills_binary(run_id)
        c = t.adapters.c
        q = (sa.select(c.adapter_id, c.role, c.mu, c.sigma).where(c.run_id == run_id, c.status == "active")
             .order_by(c.adapter_id))
        with self.read_engine.connect() as conn:
            rows = [tuple(r) for r in conn.execute(q).all()]
            if not rows:  # only then is the run's existence in question: one round trip in the usual case
                self._require_run(conn, run_id)
            return rows

    def _active_skills_binary(self, run_id: str) -> list[tuple[str, str, float, float]]:
        """`active_skills` on Postgres through psycopg's binary protocol and plain tuples: matchmaking reads every
        active adapter on every call, and for 1,000 adapters this takes a third of the time of a SQLAlchemy
        result (no text parsing of the floats, no Row objects)."""
        sql = f"SELECT adapter_id, role, mu, sigma FROM {t.adapters.name} WHERE run_id = %s AND status = 'active'"
        with self.read_engine.connect() as conn:
            with conn.connection.driver_connection.cursor(binary=True) as cur:
                cur.execute(sql, (run_id,))
                rows = cur.fetchall()
            if not rows:
                self._require_run(conn, run_id)
        # Sorted here, by code point as SQLite's ORDER BY does: the server's ORDER BY would sort by the database's
        # collation (slower, and a different order than SQLite's for some ids).
        rows.sort()
        return rows

    def adapter(self, adapter_id: str) -> AdapterRow:
        with self.read_engine.connect() as conn:
            row = conn.execute(sa.select(t.adapters).where(t.adapters.c.adapter_id == adapter_id)).first()
        if row is None:
            raise UnknownEntity(f"adapter '{adapter_id}' does not exist")
        return _row_to_adapter(row)
