"""The training dynamics of one arm run against compute (spec 11), from its metrics.jsonl and its stored adapters:
the complexity of valid proposals, coverage (distinct program shapes and AST node types, cumulative), each student's
solve-rate oscillation, the teachers' behavioural diversity, and the members' weight diversity.

The numbers are computed by populora/analysis (dynamics.py, diversity.py); this module only gathers their inputs
from a run. The x axis is the compute charged to the budget after each step (`budget_flops`, spec 14).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from populora.analysis.diversity import population_diversity
from populora.analysis.dynamics import behavioural_diversity, coverage, oscillation, shape
from populora.store import ArtifactStore, StoreError, lora_factors, peft_module_names

# Behavioural diversity compares the teachers' shapes over this many most recent steps (spec 11's k).
BEHAVIOUR_WINDOW = 3


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
    """Per step (>= 1) of one run: compute, the complexity of valid proposals, coverage, behavioural diversity of
    the teachers over the last BEHAVIOUR_WINDOW steps; per student its oscillation over the run. A teacher enters
    the behavioural diversity with its first valid proposal: a child born at an evolution step has proposed
    nothing yet, and counting its empty set as entirely different would inflate the diversity."""
    steps = [r for r in rows if r["step"] > 0]
    shapes: dict[str, str | None] = {}

    def shape_of(program: str) -> str | None:
        if program not in shapes:
            shapes[program] = shape(program)
        return shapes[program]

    cov = coverage([(r["step"], [v["program"] for v in r.get("valid_programs", [])]) for r in steps])
    teachers: dict[str, dict[int, list[str | None]]] = {}
    behaviour = []
    for r in steps:
        for v in r.get("valid_programs", []):
            teachers.setdefault(v["teacher"], {}).setdefault(r["step"], []).append(shape_of(v["program"]))
        b = behavioural_diversity(teachers, BEHAVIOUR_WINDOW) if len(teachers) > 1 else None
        behaviour.append(None if b is None else b.diversity)
    students = sorted({s for r in steps for s in r.get("student_solve_rate", {})})
    return {"steps": [r["step"] for r in steps], "flops": [charged_flops(r) for r in steps],
            "complexity": {k: [r.get("complexity", {}).get(k, {}).get("mean") for r in steps]
                           for k in ("ast_depth", "cyclomatic", "lines_of_code")},
            "coverage": [dataclasses.asdict(c) for c in cov], "behavioural_diversity": behaviour,
            "oscillation": {s: oscillation([r.get("student_solve_rate", {}).get(s) for r in steps])
                            for s in students}}


def complexity_values(rows: list[dict], key: str) -> list[tuple[float, list[float]]]:
    """(charged FLOPs, the metric of every valid program) per step: the input of the trend (spec 11)."""
    return [(float(charged_flops(r)), [v[key] for v in r.get("valid_programs", []) if v.get(key) is not None])
            for r in rows if r["step"] > 0]


def weight_diversity(rows: list[dict], store: ArtifactStore) -> list[dict]:
    """Per step with two or more members: mean pairwise cosine and relative distance of the members' updates,
    from their stored factors (spec 11; populora.analysis.diversity never forms a dense update). A member
    version missing from the store leaves its step out."""
    out = []
    for r in rows:
        population = r.get("population") or {}
        if r["step"] < 1 or len(population) < 2:
            continue
        factors, scaling = {}, {}
        try:
            for adapter_id, member in population.items():
                version = store.read(store.ref(adapter_id, member["version"]))
                factors[adapter_id] = {m: lora_factors(version.weights, m) for m in peft_module_names(version.weights)}
                scaling[adapter_id] = version.scaling
        except (OSError, ValueError, KeyError, StoreError):
            continue
        d = population_diversity(factors, scaling)
        out.append({"step": r["step"], "flops": charged_flops(r), "cosine": _nan_to_none(d.mean_cosine),
                    "distance": _nan_to_none(d.mean_distance)})
    return out


def arm_dynamics(rows: list[dict], store_root: str | Path | None, weights: bool) -> dict:
    """Everything above for one arm run; the weight diversity only with `weights` (the population: the baseline
    has one adapter) and a store to read."""
    out = step_dynamics(rows)
    out["weight_diversity"] = weight_diversity(rows, ArtifactStore(store_root)) if weights and store_root else []
    return out
