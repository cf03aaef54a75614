"""The match log's storage, a part of LeagueDB: applying reported matches to ratings, records, rating history and
the payoff matrix in one transaction, and reading the log, the payoff and an adapter's history back."""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa

from services.league import checks, engine
from services.league import tables as t
from services.league.engine import AdapterRow, MatchReport, ReportOutcome
from services.league.payoff import PayoffCell


class MatchStore:
    """LeagueDB's matches (its engines, bulk writer, rules and run and adapter reads are LeagueDB's)."""

    def report_matches(self, run_id: str, reports: Sequence[MatchReport]) -> ReportOutcome:
        """In one transaction: lock the adapters, check the reports, insert the new match ids, apply their games in
        order (engine.play), write counters, rating history and payoff. Duplicates (already recorded, or twice in
        this batch) change nothing. Invalid input raises before anything is written."""
        ids = {m.teacher_id for m in reports} | {m.student_id for m in reports}
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            locked = self._adapters_by_id(conn, ids, lock=True)
            checks.check_matches(run_id, reports, locked)
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
        again = [m for m, _ in batch if m.match_id not in inserted]
        if again:  # a resent match must be the same match; raising here rolls the whole report back
            c = t.matches.c
            found = conn.execute(sa.select(c.match_id, c.run_id, c.teacher_id, c.student_id, c.task_type, c.step)
                                 .where(self.bulk.any_of(c.match_id, [m.match_id for m in again]))).all()
            checks.check_reported_again(run_id, again, {r[0]: tuple(r[1:]) for r in found})
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
