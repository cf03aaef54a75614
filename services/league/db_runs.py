"""Run progress's storage, a part of LeagueDB: each run's status, its persisted phases and each step's problems, as the
coordinator records them; each replaced when recorded again, so a replay (a resumed run, a retried call) leaves one."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from services.league import checks
from services.league import tables as t
from services.league.engine import InvalidRequest, PhaseRow, RunRow


class RunProgressStore:
    """LeagueDB's run status, phase progress and step problems (its engines and `_require_run` are LeagueDB's)."""

    def record_run(self, run_id: str, mode: str, config_yaml: str, status: str, now: float) -> bool:
        """Create the run if it is new, else replace its mode and config; set its status. Returns whether it was
        new."""
        if not run_id:
            raise InvalidRequest("run_id: must not be empty")
        checks.check_id(run_id, "run_id", "run_id")
        checks.check_run(mode, status)
        r, s = t.runs.c, t.run_status.c
        with self.engine.begin() as conn:
            new = conn.execute(sa.select(r.run_id).where(r.run_id == run_id)).first() is None
            if new:
                conn.execute(t.runs.insert().values(run_id=run_id, mode=mode, config_yaml=config_yaml))
            else:
                conn.execute(t.runs.update().where(r.run_id == run_id).values(mode=mode, config_yaml=config_yaml))
            insert = self._insert(t.run_status).values(run_id=run_id, status=status, created_at=now, updated_at=now)
            conn.execute(insert.on_conflict_do_update(index_elements=[s.run_id], set_={
                "status": insert.excluded.status, "updated_at": insert.excluded.updated_at}))
        self._bump()
        return new

    def record_phases(self, run_id: str, phases: Sequence[PhaseRow]) -> int:
        """Store persisted phases of a run (checks.check_phases); a (step, phase) recorded again is replaced."""
        checks.check_phases(phases)
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            if phases:
                insert = self._insert(t.phase_progress)
                conn.execute(insert.on_conflict_do_update(
                    index_elements=["run_id", "step", "phase"],
                    set_={k: insert.excluded[k] for k in ("seconds", "attempts", "finished_at", "error")}),
                    [dict(run_id=run_id, step=p.step, phase=p.phase, seconds=p.seconds, attempts=p.attempts,
                          finished_at=p.finished_at, error=p.error) for p in phases])
        self._bump()
        return len(phases)

    def record_step_problems(self, run_id: str, step: int, problems_json: str, now: float) -> bool:
        """Store one step's problems (checks.check_step_problems); a step recorded again is replaced. Returns whether
        it replaced some."""
        checks.check_step_problems(step, problems_json)
        return self._replace_step_row(t.step_problems, run_id, step,
                                      {"problems_json": problems_json, "recorded_at": now})

    def run_record(self, run_id: str) -> RunRow | None:
        """The run as the coordinator recorded it; None when it never did (a run of the league alone, or one
        recorded before RecordRun existed)."""
        r, s = t.runs.c, t.run_status.c
        q = (sa.select(r.mode, r.config_yaml, s.status, s.created_at, s.updated_at)
             .select_from(t.run_status.join(t.runs, r.run_id == s.run_id)).where(s.run_id == run_id))
        with self.read_engine.connect() as conn:
            row = conn.execute(q).first()
        return None if row is None else RunRow(run_id, row.mode, row.config_yaml, row.status, row.created_at,
                                                row.updated_at)

    def phase_rows(self, run_id: str) -> list[PhaseRow]:
        """Every recorded phase of a run, in the order they finished."""
        c = t.phase_progress.c
        q = (sa.select(c.step, c.phase, c.seconds, c.attempts, c.finished_at, c.error).where(c.run_id == run_id)
             .order_by(c.finished_at, c.step, c.phase))
        with self.read_engine.connect() as conn:
            return [PhaseRow(r.step, r.phase, r.seconds, r.attempts, r.finished_at, r.error)
                    for r in conn.execute(q).all()]

    def problem_steps(self, run_id: str, first: int = 0, last: int | None = None) -> list[tuple[int, float]]:
        """(step, recorded_at) of every step in [first, last] with problems recorded, newest first."""
        c = t.step_problems.c
        q = sa.select(c.step, c.recorded_at).where(c.run_id == run_id, c.step >= first)
        if last is not None:
            q = q.where(c.step <= last)
        with self.read_engine.connect() as conn:
            return [(r.step, r.recorded_at) for r in conn.execute(q.order_by(c.step.desc())).all()]

    def step_problems(self, run_id: str, steps: Sequence[int]) -> dict[int, tuple[float, str]]:
        """{step: (recorded_at, problems_json)} of those of `steps` with problems recorded."""
        if not steps:
            return {}
        c = t.step_problems.c
        q = sa.select(c.step, c.recorded_at, c.problems_json).where(c.run_id == run_id, c.step.in_(list(steps)))
        with self.read_engine.connect() as conn:
            return {r.step: (r.recorded_at, r.problems_json) for r in conn.execute(q).all()}
