"""The training dynamics of one arm run against compute (spec 11), from its metrics.jsonl and its stored adapters:
the complexity of valid proposals, coverage (distinct program shapes and AST node types, cumulative), each student's
solve-rate oscillation, the teachers' behavioural diversity, and the members' weight diversity.

The numbers are computed by populora/analysis (dynamics.py, diversity.py); this module only gathers their inputs
from a run. The x axis is the compute charged to the budget after each step (`budget_flops`, spec 14).
"""

from __future__ import annotations

import math
from pathlib import Path

from populora.analysis.diversity import population_diversity
from populora.analysis.dynamics import COMPLEXITY_METRICS, StepPrograms, run_dynamics
from populora.store import ArtifactStore, StoreError, lora_factors, peft_module_names


def charged_flops(row: dict) -> int:
    """The compute charged to the budget up to and including this step (spec 14); tokens for runs recorded before
    FLOPs were counted have none, and give 0."""
    return int(row.get("compute_cumulative", {}).get("budget_flops", 0))


def compute_axis(rows: list[dict]) -> list[tuple[int, float]]:
    """(step, cumulative charged FLOPs) of every step, step 0 (the seeding) included."""
    return [(r["step"], float(charged_flops(r))) for r in rows]


def _nan_to_none(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def step_dynamics(rows: list[dict]) -> dict:
    """Per step (>= 1) of one run, from its metrics rows: compute, the complexity of valid proposals, coverage,
    behavioural diversity of the teachers; per student its solve rates and oscillation (run_dynamics)."""
    return run_dynamics([StepPrograms(
        step=r["step"], flops=charged_flops(r),
        programs=[(v["teacher"], v["program"]) for v in r.get("valid_programs", [])],
        solve_rates=r.get("student_solve_rate", {}),
        complexity={k: r.get("complexity", {}).get(k, {}).get("mean") for k in COMPLEXITY_METRICS})
        for r in rows if r["step"] > 0])


def complexity_values(rows: list[dict], key: str) -> list[tuple[float, list[float]]]:
    """(charged FLOPs, the metric of every valid program) per step: the input of the trend (spec 11)."""
    return [(float(charged_flops(r)), [v[key] for v in r.get("valid_programs", []) if v.get(key) is not None])
            for r in rows if r["step"] > 0]


def members_diversity(population: dict, store: ArtifactStore) -> dict | None:
    """Mean pairwise cosine and relative distance of the updates of a step's members ({adapter_id: {"version": v,
    ...}}, a metrics row's `population`), from their stored factors (spec 11; populora.analysis.diversity never
    forms a dense update); None with fewer than two members or when a member's version is not in the store."""
    if len(population) < 2:
        return None
    factors, scaling = {}, {}
    try:
        for adapter_id, member in population.items():
            version = store.read(store.ref(adapter_id, member["version"]))
            factors[adapter_id] = {m: lora_factors(version.weights, m) for m in peft_module_names(version.weights)}
            scaling[adapter_id] = version.scaling
    except (OSError, ValueError, KeyError, TypeError, StoreError):
        return None
    d = population_diversity(factors, scaling)
    return {"cosine": _nan_to_none(d.mean_cosine), "distance": _nan_to_none(d.mean_distance)}


def weight_diversity(rows: list[dict], store: ArtifactStore) -> list[dict]:
    """Per step with two or more members: the members' weight diversity (members_diversity), as the run recorded
    it in the step's row (`weight_diversity`) or, for a row recorded without it, from the store now. A step whose
    members cannot be read is left out."""
    out = []
    for r in rows:
        if r["step"] < 1:
            continue
        d = r["weight_diversity"] if "weight_diversity" in r else members_diversity(r.get("population") or {}, store)
        if d is not None:
            out.append({"step": r["step"], "flops": charged_flops(r), **d})
    return out


def arm_dynamics(rows: list[dict], store_root: str | Path | None, weights: bool) -> dict:
    """Everything above for one arm run; the weight diversity only with `weights` (the population: the baseline
    has one adapter) and a store to read."""
    out = step_dynamics(rows)
    out["weight_diversity"] = weight_diversity(rows, ArtifactStore(store_root)) if weights and store_root else []
    return out
