"""The experiment's evaluations of one arm: what is scored (its population at each compute checkpoint, spec 14, with
the settings that decide the scores), how far the arm trained, and the budget the checkpoints divide; the scoring
itself is coordinator/experiment/seedeval.py's, both arms of a seed in one batch."""

from __future__ import annotations

from pathlib import Path

from coordinator.experiment.checkpointeval import (
    HELDOUT_PROBLEMS,
    budget_of,
    checkpoints_of,
    label,
    population_at,
)
from coordinator.experiment.headline import HELDOUT
from coordinator.experiment.plan import Arm, Experiment
from coordinator.experiment.problemsets import digest
from coordinator.record.stepmetrics import read_metrics


def eval_limit(exp: Experiment, benchmark: str) -> int | None:
    """Problems to score: --limit when given; the held-out benchmark otherwise generates HELDOUT_PROBLEMS, so at
    least 300 are left for scoring after the validation part (coordinator/experiment/checkpointeval.py)."""
    if exp.limit is not None:
        return exp.limit
    return HELDOUT_PROBLEMS if benchmark == HELDOUT else None


def eval_settings(exp: Experiment) -> dict:
    """What decides an evaluation's scores besides the arm and the benchmark; a file made with other settings is
    redone."""
    e = exp.cfg.eval
    out = {"limit": exp.limit, "samples": exp.samples, "temperature": e.temperature,
           "max_new_tokens": e.max_new_tokens, "seed": exp.cfg.run.seed, "checkpoints": list(e.checkpoints),
           "members": e.members, "curve_limit": e.curve_limit, "heldout_seed": e.heldout_seed}
    if exp.problem_sets is not None:  # the fixed subsets scored (coordinator/experiment/problemsets.py)
        out["problem_sets"] = digest(exp.problem_sets)
    return out


def arm_rows(arm: Arm) -> list[dict]:
    return read_metrics(Path(arm.cfg.run.output_dir) / arm.run_id)


def seed_rows(exp: Experiment, arm: Arm) -> dict[str, list[dict]]:
    """{arm name: metrics rows} of `arm` and the other arms of its seed in the experiment (none in a shard of one
    arm: with a FLOP budget an arm's checkpoints are fractions of it, whatever the other arm did)."""
    return {a.name: arm_rows(a) for a in exp.arms if a.seed == arm.seed}


def arm_state(arm: Arm) -> dict:
    """How far the arm trained (its last step and the tokens spent): an evaluation of an arm trained further since
    (a grown budget) is redone."""
    rows = arm_rows(arm)
    last = rows[-1] if rows else {"step": -1}
    return {"step": last["step"], "tokens": last.get("compute_cumulative", {}).get("tokens", 0)}


def experiment_budget(exp: Experiment, seeds: list[int] | None = None) -> float | None:
    """The compute the checkpoints divide (checkpointeval.budget_of), over the arms of `seeds` (all when None; a FLOP
    budget is the same for any); None when the arms recorded no FLOPs (runs from before FLOPs were counted: only
    their final populations are scored)."""
    axes = {a.run_id: [(r["step"], r.get("compute_cumulative", {}).get("budget_flops", 0)) for r in arm_rows(a)]
            for a in exp.arms if seeds is None or a.seed in seeds}
    try:
        return budget_of(exp.cfg.run.budget_flops, axes)
    except ValueError:
        return None


def checkpoint_targets(exp: Experiment, arm: Arm, budget: float | None) -> dict[str, int]:
    """{label: step} of the adapter versions to score for `arm`: its population (the members eval.members names) at
    each checkpoint step of eval.checkpoints (a step at 0 is the warm start, scored once for the experiment);
    without a budget, the final population."""
    rows = arm_rows(arm)
    if budget is None:
        steps = [rows[-1]["step"]] if rows else []
    else:
        cps = checkpoints_of(seed_rows(exp, arm), budget, exp.cfg.eval.checkpoints)
        steps = sorted({cp.arms[arm.name].step or 0 for cp in cps})
    out: dict[str, int] = {}
    for step in steps:
        for adapter_id, version in (population_at(rows, step, exp.cfg.eval.members) or {}).items():
            out.setdefault(label(adapter_id, version), step)
    return out

