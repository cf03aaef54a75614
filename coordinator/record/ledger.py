"""A run's per-step bookkeeping: each finished step becomes its metrics row (compute spent so far, the budget, the
timeline, efficiency, weight diversity), the dashboard gets its figures, and metrics.jsonl is written in step order;
a step that a resume reads back is not written again."""

from __future__ import annotations

import logging
import time

from coordinator.record.diversity import members_diversity
from coordinator.record.efficiency import efficiency, run_ceilings
from coordinator.record.stepmetrics import MetricsWriter, prepared_metrics, step_metrics
from coordinator.record.stepproblems import record_step_problems
from coordinator.record.stepsummary import record_step_summary, step_summary
from coordinator.record.timeline import timeline_metrics
from coordinator.run.journal import Journal
from coordinator.run.phases import Run
from coordinator.run.phases.accounting import budget_flops
from coordinator.run.runprogress import RunProgress
from coordinator.run.step import Prepared, StepRecord
from populora.config import Config
from populora.records import Usage

log = logging.getLogger(__name__)


class StepBook:
    """What a run keeps from one step to the next: the compute spent (spec 14) and the rows written so far."""

    def __init__(self, j: Journal, run: Run, metrics: MetricsWriter, progress: RunProgress):
        self.j, self.run, self.metrics, self.progress = j, run, metrics, progress
        self.rows: list[dict] = []
        self.spent, self.charged, self.phases, self.cpu = Usage(), 0, {}, 0.0
        self.stored: dict[int, set[str]] = {}  # the phases each step had stored before: a resume reads them back
        for r in j.db.phase_rows(run.run_id):
            self.stored.setdefault(r["step"], set()).add(r["phase"])
        self.ceilings = run_ceilings(run.cfg)  # the machine's peak, measured once per process (efficiency.py)
        self.start = time.perf_counter()

    def add(self, record: Prepared | StepRecord) -> str:
        """Record one finished step (step 0's preparation or a training step); returns the budget it reached, ""
        while none is."""
        run, j = self.run, self.j
        t = record.step if isinstance(record, StepRecord) else 0
        if t == 0:
            row = prepared_metrics(record, j.seconds(0))
        else:
            row = step_metrics(run.cfg, record, j.seconds(t))
            if run.cfg.run.mode == "population":
                # how far apart the members' updates are after the step (spec 11), for the dashboard's plot
                row["weight_diversity"] = members_diversity(row["population"], run.store)
        self.spent = self.spent + record.spent.total
        self.cpu += record.spent.sandbox_cpu_seconds
        self.charged += budget_flops(record.spent)
        for k, u in record.spent.phases.items():
            self.phases[k] = self.phases.get(k, 0) + u.flops
        row["compute_cumulative"] = cumulative(self.spent, self.charged, self.phases, self.cpu)
        reached = budget_spent(run.cfg, self.spent, self.charged)
        if reached:
            row["stopped"] = f"budget: {reached}"
        phase_rows = j.db.phase_rows(run.run_id, t)
        near = [r for s in (t - 1, t + 1) for r in j.db.phase_rows(run.run_id, s)] + phase_rows
        row.update(timeline_metrics(t, near))
        if t:
            row.update(efficiency(record, row, self.ceilings, run.ranks()))
        self.rows.append(row)
        # what the dashboard shows of the step, sent again on a resume: where it stands, its problems, its figures
        self.progress.step(t)
        if isinstance(record, StepRecord):
            record_step_problems(run.services.league, run.run_id, record)
        record_step_summary(run.services.league, run.run_id, step_summary(record, row, phase_rows))
        if set(row["seconds"]) != self.stored.get(t, set()):  # this call ran at least one phase of the step
            self.metrics.rewrite(self.rows[:-1])
            self.metrics.write(row)
            log.info("step %d done (%.1fs into the run): %s", t, time.perf_counter() - self.start, summary(row))
        return reached


def budget_spent(cfg: Config, spent: Usage, charged_flops: int = 0) -> str:
    """Which compute budget (spec 14) `spent` has reached, or "" while none is; `charged_flops` is the FLOPs charged
    to the training budget (all but the warm start's)."""
    if cfg.run.budget_flops and charged_flops >= cfg.run.budget_flops:
        return f"flops {charged_flops:.3e} >= budget {cfg.run.budget_flops:.3e}"
    if cfg.run.budget_tokens and spent.tokens >= cfg.run.budget_tokens:
        return f"tokens {spent.tokens} >= budget {cfg.run.budget_tokens}"
    if cfg.run.budget_sandbox_jobs and spent.sandbox_jobs >= cfg.run.budget_sandbox_jobs:
        return f"sandbox jobs {spent.sandbox_jobs} >= budget {cfg.run.budget_sandbox_jobs}"
    return ""


def cumulative(spent: Usage, charged: int, phases: dict[str, int], sandbox_cpu_seconds: float = 0.0) -> dict:
    """metrics.jsonl's `compute_cumulative`: tokens (the second axis), sandbox jobs and their CPU seconds, FLOPs in
    all, FLOPs charged to the budget (`budget_flops`, the axis the comparison plots against), and FLOPs per phase."""
    return {"generated_tokens": spent.generated_tokens, "trained_tokens": spent.trained_tokens,
            "prompt_tokens": spent.prompt_tokens, "tokens": spent.tokens, "sandbox_jobs": spent.sandbox_jobs,
            "sandbox_cpu_seconds": sandbox_cpu_seconds, "flops": spent.flops, "budget_flops": charged,
            "phase_flops": dict(phases)}


def summary(row: dict) -> str:
    if row["step"] == 0:
        return f"seed buffers {row['seed_sizes']}"
    parts = [f"valid {row['valid_rate']:.2f}" if row.get("valid_rate") is not None else "valid -"]
    parts.append(f"{row['compute_cumulative']['tokens']} tokens so far")
    for tt, m in row.get("task_types", {}).items():
        sr = m.get("solve_rate")
        parts.append(f"{tt} solve {sr:.2f}" if sr is not None else f"{tt} solve -")
    if row.get("evolution"):
        parts.append("evolved " + ", ".join(f"{e['retired']}->{e['child']} ({e['operator']})"
                                            for e in row["evolution"]))
    return "; ".join(parts)
