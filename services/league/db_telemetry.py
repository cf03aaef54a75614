"""Telemetry's storage, a part of LeagueDB: the compute each step spent (spec 14) and held-out evaluation scores
(docs/eval.md), each replaced when recorded again."""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa

from services.league import checks, engine
from services.league import tables as t
from services.league.engine import UnknownEntity


class TelemetryStore:
    """LeagueDB's compute and evaluation rows (its engines and run and adapter reads are LeagueDB's)."""

    def record_compute(self, run_id: str, step: int, rows: Sequence[engine.UsageRow]) -> int:
        """Store one step's compute; a step recorded again is replaced (a retried phase changes nothing)."""
        checks.check_usage(step, rows)
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
            checks.check_evals(run_id, rows, known)
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
