"""The league's storage: one SQLAlchemy code path for Postgres (distributed) and a SQLite file (embedded).

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
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from populora.config import TASK_TYPES
from populora.rpc import invalid, not_found
from services.league import tables as t
from services.league.bulk import bulk_writer
from services.league.payoff import PayoffCell, update_cell
from services.league.ratings import RatingParams, Result, Skill, match_outcome, rate_match

ROLES = ("teacher", "student", "both")
TEACHER_ROLES = ("teacher", "both")
STUDENT_ROLES = ("student", "both")
ALEMBIC_INI = Path(__file__).resolve().parent / "alembic.ini"


@dataclass
class AdapterRow:
    """One adapter as the league knows it: rating, record, status and origin."""

    adapter_id: str
    run_id: str
    role: str
    status: str
    rank: int
    created_step: int
    mu: float
    sigma: float
    matches: int = 0
    wins: int = 0
    losses: int = 0
    draws: int = 0
    operator: str = ""
    parents: list[str] = field(default_factory=list)
    retired_step: int | None = None

    @property
    def skill(self) -> Skill:
        return Skill(self.mu, self.sigma)


@dataclass(frozen=True)
class AdapterSpecIn:
    """An adapter to register."""

    adapter_id: str
    role: str
    rank: int = 0
    created_step: int = 0


@dataclass(frozen=True)
class MatchReport:
    """A played match: the matched student's rho per task of the teacher's batch (spec 4, 6)."""

    match_id: str
    teacher_id: str
    student_id: str
    task_type: str
    step: int
    rhos: tuple[float, ...]


@dataclass(frozen=True)
class RatingRules:
    """How a match turns into rating updates: the TrueSkill environment, the outcome rule and the payoff decay."""

    params: RatingParams = RatingParams()
    outcome: str = "aggregate"
    margin: float = 0.05
    payoff_decay: float = 0.9


@dataclass
class ReportOutcome:
    """What a ReportMatches call did."""

    applied: int
    duplicates: int
    ratings: list[AdapterRow]


@dataclass(frozen=True)
class ChildSpec:
    """A child made by an operator, and the member it replaces (spec 8)."""

    child_id: str
    role: str
    parent_ids: tuple[str, ...]
    operator: str
    params_json: str = "{}"
    seed: int = 0
    step: int = 0
    retire_id: str = ""
    rank: int = 0


@dataclass(frozen=True)
class Edge:
    """A lineage edge parent -> child."""

    parent_id: str
    child_id: str
    operator: str
    step: int


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
            raise invalid("run_id: must not be empty")
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
            raise not_found(f"run '{run_id}' does not exist; create it first (CreateRun)")

    def run_exists(self, run_id: str) -> bool:
        with self.read_engine.connect() as conn:
            return conn.execute(sa.select(t.runs.c.run_id).where(t.runs.c.run_id == run_id)).first() is not None

    def register_adapters(self, run_id: str, specs: Sequence[AdapterSpecIn]) -> list[AdapterRow]:
        """Register adapters with the default rating; one already registered in this run is left as it is."""
        for i, spec in enumerate(specs):
            if not spec.adapter_id:
                raise invalid(f"adapters[{i}].adapter_id: must not be empty")
            if spec.role not in ROLES:
                raise invalid(f"adapters[{i}].role: '{spec.role}' is not one of {list(ROLES)}")
        ids = [s.adapter_id for s in specs]
        if len(set(ids)) != len(ids):
            raise invalid("adapters: an adapter_id appears twice in one request")
        p = self.rules.params
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            existing = self._adapters_by_id(conn, ids)
            for i, spec in enumerate(specs):
                old = existing.get(spec.adapter_id)
                if old is not None and (old.run_id != run_id or old.role != spec.role):
                    raise invalid(f"adapters[{i}].adapter_id: '{spec.adapter_id}' is already registered "
                                  f"(run '{old.run_id}', role '{old.role}'); adapter ids are unique")
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
        if role and role not in ROLES:
            raise invalid(f"role: '{role}' is not one of {list(ROLES)} (or empty for all)")
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
            raise not_found(f"adapter '{adapter_id}' does not exist")
        return _row_to_adapter(row)

    # ---- matches --------------------------------------------------------------------------------------------------
    def _validate_matches(self, run_id: str, reports: Sequence[MatchReport],
                          known: dict[str, AdapterRow]) -> None:
        for i, m in enumerate(reports):
            where = f"matches[{i}]"
            if not m.match_id:
                raise invalid(f"{where}.match_id: must not be empty")
            if m.task_type not in TASK_TYPES:
                raise invalid(f"{where}.task_type: '{m.task_type}' is not one of {list(TASK_TYPES)}")
            if not m.rhos:
                raise invalid(f"{where}.rhos: a match needs at least one rho (one per task)")
            for j, rho in enumerate(m.rhos):
                if not 0.0 <= rho <= 1.0:  # also rejects NaN
                    raise invalid(f"{where}.rhos[{j}]: {rho} is outside [0, 1]")
            for fld, adapter_id, roles in (("teacher_id", m.teacher_id, TEACHER_ROLES),
                                           ("student_id", m.student_id, STUDENT_ROLES)):
                a = known.get(adapter_id)
                if a is None or a.run_id != run_id:
                    raise invalid(f"{where}.{fld}: unknown adapter '{adapter_id}' in run '{run_id}'")
                if a.role not in roles:
                    raise invalid(f"{where}.{fld}: adapter '{adapter_id}' is a {a.role}, not a "
                                  f"{fld.removesuffix('_id')}")
            if m.teacher_id == m.student_id and known[m.teacher_id].role != "both":
                raise invalid(f"{where}.student_id: a teacher never solves its own problems (spec 1)")

    def report_matches(self, run_id: str, reports: Sequence[MatchReport]) -> ReportOutcome:
        """Validate, then in one transaction: lock the adapters, insert the new match ids, apply their games in
        order (spec 6), update counters, rating history and payoff. Duplicates (already recorded, or twice in
        this batch) change nothing. Invalid input raises before anything is written.

        A self-match (the baseline's single `both` adapter against itself) is logged and enters the payoff
        matrix, but leaves mu and sigma alone: TrueSkill has no meaning for a player against itself.
        """
        ids = {m.teacher_id for m in reports} | {m.student_id for m in reports}
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            locked = self._adapters_by_id(conn, ids, lock=True)
            self._validate_matches(run_id, reports, locked)
            fresh = self._insert_new_matches(conn, run_id, reports)
            self._apply(conn, run_id, fresh, locked)
        self._bump()
        return ReportOutcome(applied=len(fresh), duplicates=len(reports) - len(fresh),
                             ratings=[locked[a] for a in sorted(ids)])

    def _insert_new_matches(self, conn: sa.Connection, run_id: str,
                            reports: Sequence[MatchReport]) -> list[tuple[MatchReport, list[Result]]]:
        rules = self.rules
        seen: set[str] = set()
        batch: list[tuple[MatchReport, list[Result]]] = []
        for m in reports:
            if m.match_id not in seen:
                seen.add(m.match_id)
                batch.append((m, match_outcome(m.rhos, rules.outcome, rules.margin)))
        if not batch:
            return []
        rows = [dict(match_id=m.match_id, run_id=run_id, teacher_id=m.teacher_id, student_id=m.student_id,
                     task_type=m.task_type, step=m.step, rho=sum(m.rhos) / len(m.rhos),
                     rhos_json=json.dumps(list(m.rhos)), outcome=",".join(r.value for r in results))
                for m, results in batch]
        inserted = self.bulk.insert_new(conn, t.matches, rows, "match_id")
        return [(m, results) for m, results in batch if m.match_id in inserted]

    def _apply(self, conn: sa.Connection, run_id: str, fresh: Sequence[tuple[MatchReport, list[Result]]],
               adapters: dict[str, AdapterRow]) -> set[str]:
        history: dict[tuple[str, int], tuple[float, float, int]] = {}
        cells = self._payoff_cells(conn, run_id, {(m.teacher_id, m.student_id) for m, _ in fresh})
        for m, results in fresh:
            teacher, student = adapters[m.teacher_id], adapters[m.student_id]
            if teacher is not student:
                t_skill, s_skill = rate_match(self._env, teacher.skill, student.skill, results)
                teacher.mu, teacher.sigma = t_skill.mu, t_skill.sigma
                student.mu, student.sigma = s_skill.mu, s_skill.sigma
                teacher.wins += sum(r is Result.TEACHER_WINS for r in results)
                teacher.losses += sum(r is Result.STUDENT_WINS for r in results)
                student.wins += sum(r is Result.STUDENT_WINS for r in results)
                student.losses += sum(r is Result.TEACHER_WINS for r in results)
                for a in (teacher, student):
                    a.draws += sum(r is Result.DRAW for r in results)
            teacher.matches += 1
            if student is not teacher:
                student.matches += 1
            key = (m.teacher_id, m.student_id)
            cells[key] = update_cell(cells.get(key, PayoffCell()), sum(m.rhos) / len(m.rhos),
                                     self.rules.payoff_decay)
            for a in (teacher, student):  # the rating after this step's last match of the adapter
                history[(a.adapter_id, m.step)] = (a.mu, a.sigma, a.matches)
        touched = {m.teacher_id for m, _ in fresh} | {m.student_id for m, _ in fresh}
        if not fresh:
            return touched
        self.bulk.update(conn, t.adapters, [
            dict(adapter_id=x.adapter_id, mu=x.mu, sigma=x.sigma, matches=x.matches, wins=x.wins, losses=x.losses,
                 draws=x.draws) for x in (adapters[i] for i in sorted(touched))], "adapter_id")
        self.bulk.upsert(conn, t.rating_history, [
            dict(adapter_id=aid, step=step, mu=mu, sigma=sigma, matches=n)
            for (aid, step), (mu, sigma, n) in sorted(history.items())], ["adapter_id", "step"])
        self.bulk.upsert(conn, t.payoff, [
            dict(run_id=run_id, teacher_id=k[0], student_id=k[1], weighted_sum=c.weighted_sum, weight=c.weight,
                 matches=c.matches) for k, c in sorted(cells.items())], ["run_id", "teacher_id", "student_id"])
        return touched

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

    # ---- children and lineage -----------------------------------------------------------------------------------
    def record_child(self, run_id: str, child: ChildSpec) -> AdapterRow:
        """Register a child with rating (mean of its parents' mu, sigma0), retire the member it replaces and record
        lineage edges (spec 8), in one transaction. Recording the same child again returns it unchanged."""
        if not child.child_id:
            raise invalid("child_id: must not be empty")
        if child.role not in ROLES:
            raise invalid(f"role: '{child.role}' is not one of {list(ROLES)}")
        if not child.parent_ids:
            raise invalid("parent_ids: a child needs at least one parent")
        if not child.operator:
            raise invalid("operator: name the operator that made the child (M1..X4)")
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            ids = [*child.parent_ids, child.child_id] + ([child.retire_id] if child.retire_id else [])
            known = self._adapters_by_id(conn, ids, lock=True)
            existing = known.get(child.child_id)
            if existing is not None:
                if existing.run_id == run_id and existing.parents == list(child.parent_ids) \
                        and existing.operator == child.operator:
                    return existing
                raise invalid(f"child_id: '{child.child_id}' already exists with other parents or operator")
            for i, pid in enumerate(child.parent_ids):
                p = known.get(pid)
                if p is None or p.run_id != run_id:
                    raise invalid(f"parent_ids[{i}]: unknown adapter '{pid}' in run '{run_id}'")
            if child.retire_id:
                r = known.get(child.retire_id)
                if r is None or r.run_id != run_id:
                    raise invalid(f"retire_id: unknown adapter '{child.retire_id}' in run '{run_id}'")
                if r.role != child.role:
                    raise invalid(f"retire_id: '{child.retire_id}' is a {r.role}, the child a {child.role}")
                conn.execute(t.adapters.update().where(t.adapters.c.adapter_id == child.retire_id)
                             .values(status="retired", retired_step=child.step))
            mu = sum(known[p].mu for p in child.parent_ids) / len(child.parent_ids)
            sigma = self.rules.params.sigma
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
                raise not_found(f"adapter '{adapter_id}' does not exist")
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
