"""The training dynamics of one arm run against compute (spec 11), from its metrics.jsonl and its stored adapters:
the complexity of valid proposals, coverage (distinct program shapes and AST node types, cumulative), each student's
solve-rate oscillation, the teachers' behavioural diversity (over the teachers active in the window; a one-adapter
run gets the one-policy reference), and the members' weight diversity: of their whole updates, and of their changes
since the warm start and since their birth, so mutation and training drift are told apart.

The numbers are computed by populora/analysis (dynamics.py, diversity.py); this module only gathers their inputs
from a run. The x axis is the compute charged to the budget after each step (`budget_flops`, spec 14).
"""

from __future__ import annotations

from pathlib import Path

from coordinator.record.diversity import members_diversity, nan_to_none
from populora.analysis.diversity import change, population_diversity
from populora.analysis.dynamics import COMPLEXITY_METRICS, StepPrograms, run_dynamics
from populora.store import ArtifactStore, StoreError, lora_factors, peft_module_names


def charged_flops(row: dict) -> int:
    """The compute charged to the budget up to and including this step (spec 14); tokens for runs recorded before
    FLOPs were counted have none, and give 0."""
    return int(row.get("compute_cumulative", {}).get("budget_flops", 0))


def compute_axis(rows: list[dict]) -> list[tuple[int, float]]:
    """(step, cumulative charged FLOPs) of every step, step 0 (the seeding) included."""
    return [(r["step"], float(charged_flops(r))) for r in rows]


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


def _factors(store: ArtifactStore, adapter_id: str, version: int) -> tuple[dict, float]:
    stored = store.read(store.ref(adapter_id, version))
    return {m: lora_factors(stored.weights, m) for m in peft_module_names(stored.weights)}, stored.scaling


def members_changes(population: dict, store: ArtifactStore, warm: tuple[str, int] | None) -> dict | None:
    """Mean pairwise cosine and relative distance of the members' changes (populora.analysis.diversity.change):
    `since_warm`, each member's weights less the warm start's every member began from (`warm`: its adapter id and
    version), and `since_birth`, less the member's own first version (a child as the operator made it, a founder as
    initialised). Mutation shows in the first and not the second; training drift in both. None with fewer than two
    members or when a version is not in the store; a part is None when it is undefined (no warm start, or no member
    has changed since its birth)."""
    if len(population) < 2:
        return None
    out: dict[str, dict | None] = {}
    try:
        now = {a: _factors(store, a, m["version"]) for a, m in population.items()}
        births = {a: _factors(store, a, store.versions(a)[0]) for a in population}
        base = _factors(store, *warm) if warm is not None else None
    except (OSError, ValueError, KeyError, TypeError, IndexError, StoreError):
        return None
    parts = {"since_birth": {a: change(f, births[a][0], s, births[a][1]) for a, (f, s) in now.items()}}
    if base is not None:
        parts["since_warm"] = {a: change(f, base[0], s, base[1]) for a, (f, s) in now.items()}
    for name in ("since_warm", "since_birth"):
        if name not in parts:
            out[name] = None
            continue
        d = population_diversity(parts[name], 1.0)
        cosine, distance = nan_to_none(d.mean_cosine), nan_to_none(d.mean_distance)
        out[name] = None if cosine is None and distance is None else {"cosine": cosine, "distance": distance}
    return out


def weight_changes(rows: list[dict], store: ArtifactStore, warm_id: str | None) -> list[dict]:
    """Per step with two or more members readable from the store: members_changes, from the warm start `warm_id`'s
    latest version (the one every member began from)."""
    warm = None
    if warm_id:
        try:
            warm = (warm_id, store.latest(warm_id).version)
        except (OSError, StoreError):
            warm = None
    out = []
    for r in rows:
        if r["step"] < 1:
            continue
        d = members_changes(r.get("population") or {}, store, warm)
        if d is not None:
            out.append({"step": r["step"], "flops": charged_flops(r), **d})
    return out


def arm_dynamics(rows: list[dict], store_root: str | Path | None, weights: bool, run_id: str = "") -> dict:
    """Everything above for one arm run; the weight diversity only with `weights` (the population: the baseline
    has one adapter) and a store to read: of the whole updates (as recorded each step) and of the changes since the
    warm start (`<run_id>.warm`) and since each member's birth (weight_changes)."""
    out = step_dynamics(rows)
    store = ArtifactStore(store_root) if weights and store_root else None
    out["weight_diversity"] = weight_diversity(rows, store) if store else []
    out["weight_changes"] = weight_changes(rows, store, f"{run_id}.warm" if run_id else None) if store else []
    return out
