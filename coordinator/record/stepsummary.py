"""Each step's summary for the league's dashboard, recorded in the league (RecordStepSummary) as the step ends.

The figures are the step's metrics row (coordinator/record/stepmetrics.py, computed from the stored records, so a resumed
run summarises a step identically) in the layout of the league's /v1/runs/{run}/steps entries, with the phases'
timings from the journal and the members' versions. The coordinator owns its journal; the league keeps what it is
sent and never reads the journal's results to work these figures out again.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import TYPE_CHECKING

from coordinator.record.stepmetrics import COMPLEXITY_KEYS
from coordinator.run.phases.accounting import budget_flops
from populora.pb import league_pb2
from populora.records import Accounted, Population

if TYPE_CHECKING:
    from coordinator.run.step import Prepared, StepRecord

TASK_TYPE_KEYS = ("proposals", "valid_rate", "rejections", "solve_rate", "ast_depth", "cyclomatic", "lines_of_code")


def _versions(*populations: Population | None) -> dict[str, int]:
    """{adapter_id: version}, later populations overriding earlier ones."""
    return {a: m.version for p in populations if p for a, m in p.items()}


def _compute(spent: Accounted) -> dict[str, int]:
    """What the step spent: tokens and sandbox jobs, its FLOPs in all and those charged to the budget (spec 14: the
    sum of `budget_flops` over a run's steps is the compute axis of its dynamics)."""
    t = spent.total
    return {"generated_tokens": t.generated_tokens, "trained_tokens": t.trained_tokens, "sandbox_jobs": t.sandbox_jobs,
            "flops": t.flops, "budget_flops": budget_flops(spent)}


def _dynamics(row: dict) -> dict:
    """The step's part of the run's dynamics (spec 11) that the league cannot work out from the problems it is
    sent: each student's solve rate, the mean complexity of the valid programs, the members' weight diversity."""
    return {"solve_rates": row["student_solve_rate"],
            "complexity": {k: row["complexity"].get(k, {}).get("mean") for k in COMPLEXITY_KEYS},
            "weight_diversity": row.get("weight_diversity")}


def timings(phase_rows: list[dict]) -> dict:
    """The phases a step stored, in the order they finished, with their seconds and when the last one finished."""
    done = [r for r in phase_rows if not r["phase"].startswith("failed:")]
    seconds = {r["phase"]: r["seconds"] for r in done}
    return {"phases": list(seconds), "seconds": seconds, "step_seconds": sum(seconds.values()),
            "finished_at": max((r["finished_at"] for r in phase_rows), default=None)}


def prepared_summary(prepared: Prepared, row: dict) -> dict:
    """Step 0: the seeded buffers, the members as created, the compute spent (row: stepmetrics.prepared_metrics)."""
    versions = _versions(prepared.initialized.population)
    return {"seed": {"sizes": row["seed_sizes"], "reasons": row["seed_reasons"], "rounds": row["seed_rounds"],
                     "proposals": prepared.seeded.proposals},
            "population": versions, "versions": versions, "compute": _compute(prepared.spent)}


def training_summary(record: StepRecord, row: dict) -> dict:
    """Step t >= 1 (row: stepmetrics.step_metrics): proposals, valid and solve rates and rejections in total and per
    task type that was proposed, answer outcomes, matches reported, compute, the members' versions and evolution."""
    task_types, rejections = {}, Counter()
    for tt, m in sorted(row["task_types"].items()):
        if not m["proposals"]:
            continue
        valid = round(m["valid_rate"] * m["proposals"])  # a count over a count: exact after rounding
        task_types[tt] = {"valid": valid, **{k: m[k] for k in TASK_TYPE_KEYS}}
        rejections.update(m["rejections"])
    evolved = record.evolved
    return {
        "proposals": len(record.proposed.proposals), "valid": sum(m["valid"] for m in task_types.values()),
        "valid_rate": row["valid_rate"], "rejections": dict(rejections), "task_types": task_types,
        "solve_rate": row["solve_rate"], "outcomes": row["outcomes"], "matches": row["matches_reported"],
        "compute": _compute(record.spent), "dynamics": _dynamics(row), "population": _versions(record.population),
        "versions": _versions(record.updated.population, evolved.population if evolved else None),
        "evolution": [{"role": e.role, "retired": e.retired, "child": e.child, "parents": list(e.parents),
                       "operator": e.operator,
                       "relative_change": e.relative_change if math.isfinite(e.relative_change) else None}
                      for e in (evolved.events if evolved else [])]}


def step_summary(record: Prepared | StepRecord, row: dict, phase_rows: list[dict]) -> dict:
    """Step `row["step"]`'s summary from its record, its metrics row and its journal rows (JournalDB.phase_rows)."""
    step = row["step"]
    figures = prepared_summary(record, row) if step == 0 else training_summary(record, row)
    overlap = {k: row[k] for k in ("timeline", "window_s", "idle_fraction", "staleness", "efficiency") if k in row}
    return {"step": step, **timings(phase_rows), **figures, **overlap}


def record_step_summary(league, run_id: str, summary: dict) -> None:
    """Send a step's summary to the league; a step summarised again (a resumed run) replaces it."""
    league.RecordStepSummary(league_pb2.RecordStepSummaryRequest(
        run_id=run_id, step=summary["step"], summary_json=json.dumps(summary, allow_nan=False)))
