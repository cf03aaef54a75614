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

from services.league import engine
from services.league import tables as t
from services.league.dialect_sql import bulk_writer
from services.league.engine import (
    AdapterRow,
    AdapterSpecIn,
    ChildSpec,
    Edge,
    InvalidRequest,
    MatchReport,
    RatingRules,
    ReportOutcome,
    UnknownEntity,
)
from services.league.payoff import PayoffCell

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


class LeagueDB:
    """Runs, adapters, ratings, matches, lineage and payoff in one database, behind transactional methods."""

    def __init__(self, url: str, rules: RatingRules | None = None, pool_size: int = 10):
        self.url = url
        self.rules = rules or RatingRules()
        self.dialect = sa.engine.make_url(url).get_backend_name()
        # psycopg 3 can return rows in Postgres' binary format (matchmaking's ratings read uses it)
        self._binary_reads = self.dialect == "postgresql" and sa.engine.make_url(url).get_driver_name() == "psycopg"
        if self.dialect == "sqlite":
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            self.engine = sa.create_engine(url, pool_size=pool_size, max_overflow=2 * pool_size,
                                           pool_pre_ping=True)
            self.read_engine = self.engine
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
        self.read_engine.dispose()

    def _bump(self) -> None:
        with self._gen_lock:
            self.generation += 1

    def _insert(self, table: sa.Table):
        return (postgresql.insert(table) if self.dialect == "postgresql" else sqlite.insert(table))

    # ---- runs and adapters -------------------------------------------------------------------------------------
    def create_run(self, run_id: str, mode: str = "", config_yaml: str = "") -> bool:
        """Create a run; False when it already exists (idempotent)."""
        if not run_id:
            raise InvalidRequest("run_id: must not be empty")
        engine.check_id(run_id, "run_id", "run_id")
        engine.check_text(mode, "mode", "mode")
        with self.engine.begin() as conn:
            created = conn.execute(self._insert(t.runs).values(run_id=run_id, mode=mode, config_yaml=config_yaml)
                                   .on_conflict_do_nothing(index_elements=["run_id"])
                                   .returning(t.runs.c.run_id)).first()
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

    def run_exists(self, run_id: str) -> bool:
        with self.read_engine.connect() as conn:
            return conn.execute(sa.select(t.runs.c.run_id).where(t.runs.c.run_id == run_id)).first() is not None

    def register_adapters(self, run_id: str, specs: Sequence[AdapterSpecIn]) -> list[AdapterRow]:
        """Register adapters with the default rating; one already registered in this run is left as it is."""
        engine.check_specs(specs)
        ids = [s.adapter_id for s in specs]
        p = self.rules.params
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            existing = self._adapters_by_id(conn, ids)
            engine.check_registration(run_id, specs, existing)
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
        engine.check_role(role, "role", allow_empty=True)
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

    # ---- matches --------------------------------------------------------------------------------------------------
    def report_matches(self, run_id: str, reports: Sequence[MatchReport]) -> ReportOutcome:
        """In one transaction: lock the adapters, check the reports, insert the new match ids, apply their games in
        order (engine.play), write counters, rating history and payoff. Duplicates (already recorded, or twice in
        this batch) change nothing. Invalid input raises before anything is written."""
        ids = {m.teacher_id for m in reports} | {m.student_id for m in reports}
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            locked = self._adapters_by_id(conn, ids, lock=True)
            engine.check_matches(run_id, reports, locked)
            fresh = self._insert_new_matches(conn, run_id, reports)
            if fresh:
                self._write_played(conn, run_id, engine.play(self._env, self.rules, locked, fresh, self._payoff_cells(
                    conn, run_id, {(m.teacher_id, m.student_id) for m, _ in fresh})), locked)
        self._bump()
        return ReportOutcome(applied=len(fresh), duplicates=len(reports) - len(fresh),
                             ratings=[locked[a] for a in sorted(ids)])

    def _insert_new_matches(self, conn: sa.Connection, run_id: str,
                            reports: Sequence[MatchReport]) -> list[tuple[MatchReport, list]]:
        batch = engine.games(reports, self.rules)
        if not batch:
            return []
        rows = [dict(match_id=m.match_id, run_id=run_id, teacher_id=m.teacher_id, student_id=m.student_id,
                     task_type=m.task_type, step=m.step, rho=sum(m.rhos) / len(m.rhos),
                     rhos_json=json.dumps(list(m.rhos)), outcome=",".join(r.value for r in results))
                for m, results in batch]
        inserted = self.bulk.insert_new(conn, t.matches, rows, "match_id")
        return [(m, results) for m, results in batch if m.match_id in inserted]

    def _write_played(self, conn: sa.Connection, run_id: str, played: engine.Played,
                      adapters: dict[str, AdapterRow]) -> None:
        self.bulk.update(conn, t.adapters, [
            dict(adapter_id=x.adapter_id, mu=x.mu, sigma=x.sigma, matches=x.matches, wins=x.wins, losses=x.losses,
                 draws=x.draws) for x in (adapters[i] for i in sorted(played.touched))], "adapter_id")
        self.bulk.upsert(conn, t.rating_history, [
            dict(adapter_id=aid, step=step, mu=mu, sigma=sigma, matches=n)
            for (aid, step), (mu, sigma, n) in sorted(played.history.items())], ["adapter_id", "step"])
        self.bulk.upsert(conn, t.payoff, [
            dict(run_id=run_id, teacher_id=k[0], student_id=k[1], weighted_sum=c.weighted_sum, weight=c.weight,
                 matches=c.matches) for k, c in sorted(played.cells.items())], ["run_id", "teacher_id", "student_id"])

    def _payoff_cells(self, conn: sa.Connection, run_id: str,
                      pairs: set[tuple[str, str]]) -> dict[tuple[str, str], PayoffCell]:
        if not pairs:
            return {}
        c = t.payoff.c
        q = sa.select(t.payoff).where(c.run_id == run_id, self.bulk.any_pair(c.teacher_id, c.student_id,
                                                                             sorted(pairs)))
        return {(r.teacher_id, r.student_id): PayoffCell(r.weighted_sum, r.weight, r.matches)
                for r in conn.execute(q).all()}

    def list_matches(self, run_id: str, *, adapter_id: str = "", teacher_id: str = "", student_id: str = "",
                     task_type: str = "", step_min: int | None = None, step_max: int | None = None,
                     after: int = 0, limit: int = 100, before: int | None = None,
                     descending: bool = False) -> list[dict]:
        """A page of a run's match log in the order matches were applied (newest first when `descending`); `after`
        and `before` bound the `seq` of the page (the last one seen)."""
        c = t.matches.c
        q = sa.select(t.matches).where(c.run_id == run_id, c.id > after)
        if before is not None:
            q = q.where(c.id < before)
        if adapter_id:
            q = q.where(sa.or_(c.teacher_id == adapter_id, c.student_id == adapter_id))
        if teacher_id:
            q = q.where(c.teacher_id == teacher_id)
        if student_id:
            q = q.where(c.student_id == student_id)
        if task_type:
            q = q.where(c.task_type == task_type)
        if step_min is not None:
            q = q.where(c.step >= step_min)
        if step_max is not None:
            q = q.where(c.step <= step_max)
        q = q.order_by(c.id.desc() if descending else c.id).limit(limit)
        with self.read_engine.connect() as conn:
            self._require_run(conn, run_id)
            return [{"seq": r.id, "match_id": r.match_id, "teacher_id": r.teacher_id, "student_id": r.student_id,
                     "task_type": r.task_type, "step": r.step, "rho": r.rho, "rhos": json.loads(r.rhos_json),
                     "outcome": r.outcome} for r in conn.execute(q).all()]

    def payoff(self, run_id: str) -> list[tuple[str, str, PayoffCell]]:
        """Every (teacher, student, cell) of a run's payoff matrix."""
        q = sa.select(t.payoff).where(t.payoff.c.run_id == run_id).order_by(t.payoff.c.teacher_id,
                                                                           t.payoff.c.student_id)
        with self.read_engine.connect() as conn:
            self._require_run(conn, run_id)
            return [(r.teacher_id, r.student_id, PayoffCell(r.weighted_sum, r.weight, r.matches))
                    for r in conn.execute(q).all()]

    def rating_history(self, adapter_id: str) -> list[dict]:
        """(step, mu, sigma, matches) of one adapter, by step."""
        h = t.rating_history.c
        with self.read_engine.connect() as conn:
            rows = conn.execute(sa.select(t.rating_history).where(h.adapter_id == adapter_id).order_by(h.step))
            return [{"step": r.step, "mu": r.mu, "sigma": r.sigma, "matches": r.matches} for r in rows]

    # ---- compute --------------------------------------------------------------------------------------------------
    def record_compute(self, run_id: str, step: int, rows: Sequence[engine.UsageRow]) -> int:
        """Store one step's compute; a step recorded again is replaced (a retried phase changes nothing)."""
        engine.check_usage(step, rows)
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            conn.execute(t.compute.delete().where(t.compute.c.run_id == run_id, t.compute.c.step == step))
            if rows:
                conn.execute(t.compute.insert(), [dict(run_id=run_id, step=step, adapter_id=r.adapter_id,
                                                       generated_tokens=r.generated_tokens,
                                                       trained_tokens=r.trained_tokens,
                                                       sandbox_jobs=r.sandbox_jobs) for r in rows])
        self._bump()
        return len(rows)

    def compute(self, run_id: str) -> list[tuple[int, engine.UsageRow]]:
        """Every (step, usage) row of a run, by step and adapter."""
        c = t.compute.c
        q = sa.select(t.compute).where(c.run_id == run_id).order_by(c.step, c.adapter_id)
        with self.read_engine.connect() as conn:
            self._require_run(conn, run_id)
            return [(r.step, engine.UsageRow(r.adapter_id, r.generated_tokens, r.trained_tokens, r.sandbox_jobs))
                    for r in conn.execute(q).all()]

    # ---- held-out evaluations -------------------------------------------------------------------------------------
    def record_evals(self, run_id: str, rows: Sequence[engine.EvalRow], now: float) -> int:
        """Store benchmark scores; a score of the same (adapter, version, benchmark) is replaced (a re-run eval phase
        or a second `populora eval` changes nothing twice)."""
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            known = self._adapters_by_id(conn, [r.adapter_id for r in rows if r.adapter_id])
            engine.check_evals(run_id, rows, known)
            c = t.evals.c
            for r in rows:
                conn.execute(t.evals.delete().where(c.run_id == run_id, c.adapter_id == r.adapter_id,
                                                    c.version == r.version, c.benchmark == r.benchmark))
            if rows:
                conn.execute(t.evals.insert(), [dict(
                    run_id=run_id, adapter_id=r.adapter_id, version=r.version, benchmark=r.benchmark, step=r.step,
                    label=r.label, n_problems=r.n_problems, samples=r.samples, pass_at_1=r.pass_at_1,
                    pass_at_k_json=json.dumps({str(k): v for k, v in sorted(r.pass_at_k.items())}),
                    problems_json=json.dumps([[p.problem_id, p.passed, p.n, p.error] for p in r.problems]),
                    recorded_at=now) for r in rows])
        self._bump()
        return len(rows)

    def evals(self, run_id: str, adapter_id: str = "", benchmark: str = "",
              include_problems: bool = False) -> list[engine.EvalRow]:
        """A run's scores by step, adapter and benchmark; `adapter_id` must then be an adapter of the run."""
        c = t.evals.c
        q = sa.select(t.evals).where(c.run_id == run_id)
        if adapter_id:
            q = q.where(c.adapter_id == adapter_id)
        if benchmark:
            q = q.where(c.benchmark == benchmark)
        with self.read_engine.connect() as conn:
            self._require_run(conn, run_id)
            if adapter_id:
                a = conn.execute(sa.select(t.adapters.c.run_id).where(t.adapters.c.adapter_id == adapter_id)).first()
                if a is None or a.run_id != run_id:
                    raise UnknownEntity(f"adapter '{adapter_id}' does not exist in run '{run_id}'")
            rows = conn.execute(q.order_by(c.step, c.benchmark, c.adapter_id, c.version)).all()
        return [engine.EvalRow(
            r.adapter_id, r.version, r.benchmark, r.step, r.label, r.n_problems, r.samples, r.pass_at_1,
            {int(k): float(v) for k, v in json.loads(r.pass_at_k_json).items()},
            tuple(engine.EvalProblemRow(*p) for p in json.loads(r.problems_json)) if include_problems else (),
            r.recorded_at) for r in rows]

    # ---- children and lineage -----------------------------------------------------------------------------------
    def record_child(self, run_id: str, child: ChildSpec) -> AdapterRow:
        """Register a child with rating (mean of its parents' mu, sigma0), retire the member it replaces and record
        lineage edges (spec 8), in one transaction. Recording the same child again returns it unchanged."""
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            ids = [*child.parent_ids, child.child_id] + ([child.retire_id] if child.retire_id else [])
            known = self._adapters_by_id(conn, ids, lock=True)
            recorded = engine.check_child(run_id, child, known)
            if recorded is not None:
                return recorded
            if child.retire_id:
                conn.execute(t.adapters.update().where(t.adapters.c.adapter_id == child.retire_id)
                             .values(status="retired", retired_step=child.step))
            mu, sigma = engine.child_rating([known[p] for p in child.parent_ids], self.rules.params)
            conn.execute(t.adapters.insert().values(
                adapter_id=child.child_id, run_id=run_id, role=child.role, status="active", rank=child.rank,
                created_step=child.step, mu=mu, sigma=sigma, operator=child.operator,
                params_json=child.params_json or "{}", seed=child.seed,
                parents_json=json.dumps(list(child.parent_ids))))
            conn.execute(t.rating_history.insert().values(adapter_id=child.child_id, step=child.step, mu=mu,
                                                          sigma=sigma, matches=0))
            conn.execute(t.lineage.insert(), [dict(parent_id=p, child_id=child.child_id, run_id=run_id,
                                                   operator=child.operator, step=child.step)
                                              for p in dict.fromkeys(child.parent_ids)])
            row = self._adapters_by_id(conn, [child.child_id])[child.child_id]
        self._bump()
        return row

    def lineage(self, adapter_id: str) -> tuple[list[Edge], list[Edge]]:
        """(ancestor edges, descendant edges) of an adapter, walking the lineage graph level by level."""
        c = t.lineage.c
        with self.read_engine.connect() as conn:
            if conn.execute(sa.select(t.adapters.c.adapter_id).where(t.adapters.c.adapter_id == adapter_id)
                            ).first() is None:
                raise UnknownEntity(f"adapter '{adapter_id}' does not exist")
            ancestors = self._walk(conn, adapter_id, c.child_id, c.parent_id)
            descendants = self._walk(conn, adapter_id, c.parent_id, c.child_id)
        return ancestors, descendants

    @staticmethod
    def _walk(conn: sa.Connection, start: str, from_col, to_col) -> list[Edge]:
        edges: list[Edge] = []
        seen, frontier = {start}, [start]
        while frontier:
            rows = conn.execute(sa.select(t.lineage).where(from_col.in_(frontier))
                                .order_by(t.lineage.c.step, t.lineage.c.parent_id, t.lineage.c.child_id)).all()
            frontier = []
            for r in rows:
                edges.append(Edge(r.parent_id, r.child_id, r.operator, r.step))
                nxt = getattr(r, to_col.name)
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        return edges
