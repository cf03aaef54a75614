"""Telemetry's storage, a part of LeagueDB: the compute each step spent (spec 14) and held-out evaluation scores
(docs/eval.md) and the coordinator's step summaries, each replaced when recorded again."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import sqlalchemy as sa

from populora.records import EvalScore, ProblemScore, Usage
from services.league import checks
from services.league import tables as t
from services.league.engine import EvalRow, UnknownEntity


class TelemetryStore:
    """LeagueDB's compute and evaluation rows (its engines and run and adapter reads are LeagueDB's)."""

    def record_compute(self, run_id: str, step: int, usage: Sequence[tuple[str, Usage]]) -> int:
        """Store one step's compute, (adapter_id, usage) pairs ("base": the bare base model; "": the run itself); a
        step recorded again is replaced (a retried phase changes nothing)."""
        checks.check_usage(step, usage)
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            conn.execute(t.compute.delete().where(t.compute.c.run_id == run_id, t.compute.c.step == step))
            if usage:
                conn.execute(t.compute.insert(), [dict(run_id=run_id, step=step, adapter_id=adapter_id,
                                                       **dataclasses.asdict(u)) for adapter_id, u in usage])
        self._bump()
        return len(usage)

    def compute(self, run_id: str) -> list[tuple[int, str, Usage]]:
        """Every (step, adapter_id, usage) row of a run, by step and adapter."""
        c = t.compute.c
        q = sa.select(t.compute).where(c.run_id == run_id).order_by(c.step, c.adapter_id)
        with self.read_engine.connect() as conn:
            self._require_run(conn, run_id)
            return [(r.step, r.adapter_id, Usage(r.generated_tokens, r.trained_tokens, r.sandbox_jobs))
                    for r in conn.execute(q).all()]

    def record_evals(self, run_id: str, rows: Sequence[EvalRow], now: float) -> int:
        """Store benchmark scores; a score of the same (adapter, version, benchmark) is replaced (a re-run eval phase
        or a second `populora eval` changes nothing twice)."""
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            known = self._adapters_by_id(conn, [r.score.adapter_id for r in rows if r.score.adapter_id])
            checks.check_evals(run_id, rows, known)
            c = t.evals.c
            for r in rows:
                conn.execute(t.evals.delete().where(c.run_id == run_id, c.adapter_id == r.score.adapter_id,
                                                    c.version == r.score.version, c.benchmark == r.benchmark))
            if rows:
                conn.execute(t.evals.insert(), [_eval_columns(run_id, r, now) for r in rows])
        self._bump()
        return len(rows)

    def evals(self, run_id: str, adapter_id: str = "", benchmark: str = "",
              include_problems: bool = False) -> list[EvalRow]:
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
        return [EvalRow(EvalScore(r.adapter_id, r.version, r.label, r.pass_at_1, {
            k: float(v) for k, v in json.loads(r.pass_at_k_json).items()}, r.n_problems, r.samples, [
            ProblemScore(*p) for p in json.loads(r.problems_json)] if include_problems else []),
            r.benchmark, r.step, r.recorded_at) for r in rows]


    def record_step_summary(self, run_id: str, step: int, summary_json: str, now: float) -> bool:
        """Store one step's summary (checks.check_step_summary); a step recorded again is replaced, so a resumed
        step that records its summary again leaves one. Returns whether it replaced one."""
        checks.check_step_summary(step, summary_json)
        return self._replace_step_row(t.step_summaries, run_id, step,
                                      {"summary_json": summary_json, "recorded_at": now})

    def step_summaries(self, run_id: str) -> list[dict]:
        """Every step summary of a run, by step, as recorded (the step taken from its key)."""
        c = t.step_summaries.c
        q = sa.select(c.step, c.summary_json).where(c.run_id == run_id).order_by(c.step)
        with self.read_engine.connect() as conn:
            return [{**json.loads(r.summary_json), "step": r.step} for r in conn.execute(q).all()]


def _eval_columns(run_id: str, row: EvalRow, now: float) -> dict:
    """The columns of one score: pass@k by k and each problem as [id, passed, n, error], as JSON text."""
    s = row.score
    return dict(run_id=run_id, adapter_id=s.adapter_id, version=s.version, benchmark=row.benchmark, step=row.step,
                label=s.label, n_problems=s.n_problems, samples=s.samples, pass_at_1=s.pass_at_1,
                pass_at_k_json=json.dumps({k: v for k, v in sorted(s.pass_at_k.items(), key=lambda kv: int(kv[0]))}),
                problems_json=json.dumps([[p.id, p.passed, p.n, p.error] for p in s.problems]), recorded_at=now)
