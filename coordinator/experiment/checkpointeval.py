"""The arms at equal compute (spec 14): which step of each arm stands at each compute checkpoint, which adapter
versions were its population then, the split of the held-out problems into a validation part (the best and worst
members are chosen there) and a scoring part (everything reported is scored there), and the comparison of the
population mean with the baseline at every checkpoint (coordinator/experiment/headline.py: its intervals over seeds
and problem families, and the families of the generated benchmark left out or listed).

Pure functions over the arms' metrics rows and evaluation files; coordinator/experiment/armeval.py runs the evaluations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean

from coordinator.experiment.armdynamics import compute_axis
from coordinator.experiment.headline import headline, kept
from populora.analysis.checkpoints import DEFAULT_FRACTIONS, equal_compute_checkpoints

# Every VALIDATION_EVERY-th problem (in the benchmark's own order) is a validation problem: held out from the
# reported scores, it only chooses the best and worst members. The held-out benchmark cycles through its three task
# types, so both parts hold all three.
VALIDATION_EVERY = 5
# Held-out problems an experiment generates when --limit does not say: 380, so 304 are scored after the validation
# fifth is set apart (at least 300, spec 14).
HELDOUT_PROBLEMS = 380
WARM = "warm start"  # the label of the warm-start adapter, every arm's state before its first step


def split(problem_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """(validation, scoring) problem ids: every VALIDATION_EVERY-th problem validates, the others score."""
    validation = [p for i, p in enumerate(problem_ids) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1]
    chosen = set(validation)
    return validation, [p for p in problem_ids if p not in chosen]


def choose(members: Mapping[str, Mapping[str, float]], validation: Sequence[str]) -> tuple[str, str]:
    """(best, worst) member by mean pass value on the validation problems alone, so the scores they are reported
    with were never used to choose them. The members are ranked by score, ties by name, and the best is the first
    and the worst the last of that one order: with two or more members they are never the same member, even when
    every score ties (then the first and the last name)."""
    if not validation:
        raise ValueError("choosing a member needs validation problems; the benchmark has too few problems to split")
    score = {m: mean(v[p] for p in validation) for m, v in members.items()}
    ranked = sorted(score, key=lambda m: (-score[m], m))
    return ranked[0], ranked[-1]


def budget_of(budget_flops: int, axes: Mapping[str, Sequence[tuple[int, float]]]) -> float:
    """The compute the checkpoints are fractions of: the FLOP budget when there is one, else (a token or
    sandbox-job budget) the least compute any arm ended with, so every arm reaches the last checkpoint."""
    if budget_flops:
        return float(budget_flops)
    ends = [axis[-1][1] for axis in axes.values() if axis]
    if not ends or min(ends) <= 0:
        raise ValueError("the arms recorded no FLOPs (metrics.jsonl without budget_flops): retrain them")
    return min(ends)


def checkpoints_of(rows: Mapping[str, list[dict]], budget: float, fractions: Sequence[float] = DEFAULT_FRACTIONS):
    """Each arm's last step not past each checkpoint (populora.analysis.checkpoints), for one seed's arms."""
    return equal_compute_checkpoints({arm: compute_axis(r) for arm, r in rows.items()}, budget, fractions)


MEMBERS = ("all", "students")


def population_at(rows: list[dict], step: int | None, members: str = "all") -> dict[str, int] | None:
    """{adapter: version} of the population after `step`; None at step 0 or before (every member is the warm
    start then). `members="students"` leaves the teachers out (eval.members; the baseline's one adapter plays both
    roles and stays)."""
    if members not in MEMBERS:
        raise ValueError(f"members {members!r}: allowed {list(MEMBERS)}")
    if step is None or step < 1:
        return None
    row = next(r for r in rows if r["step"] == step)
    return {a: m["version"] for a, m in sorted(row.get("population", {}).items())
            if members == "all" or m.get("role") != "teacher"}


def label(adapter_id: str, version: int) -> str:
    return f"{adapter_id}@v{version}"


def problem_value(p: dict) -> float:
    """A problem's value in an evaluation file: its pass value (passed / n), or its likelihood (the mean
    log-probability per token of its reference answer, `value`: populora.evals.likelihood)."""
    return p["value"] if "value" in p else p["passed"] / p["n"]


def per_problem(scores: dict) -> tuple[list[str], dict[str, dict[str, float]]]:
    """An evaluation file's problem ids in the benchmark's order (its longest result's: the curve's versions answer
    only its first problems), and {target label: {problem: its value (problem_value)}}."""
    results = scores.get("results", [])
    ids = [p["id"] for p in max(results, key=lambda r: len(r["problems"]))["problems"]] if results else []
    return ids, {r["label"]: {p["id"]: problem_value(p) for p in r["problems"]} for r in results}


def _state(values: dict[str, dict[str, float]], population: dict[str, int] | None,
           warm: dict[str, float] | None) -> dict[str, dict[str, float]] | None:
    """Each member's per-problem values at a checkpoint; the warm start for every member before the first step."""
    if population is None:
        return None if warm is None else {WARM: warm}
    got = {a: values.get(label(a, v)) for a, v in population.items()}
    return None if any(v is None for v in got.values()) else got


def compare_at_checkpoints(seeds: Sequence[int], rows: Mapping[tuple[str, int], list[dict]],
                           evals: Mapping[tuple[str, int], dict], budget: float, *, n_resamples: int = 10_000,
                           fractions: Sequence[float] = DEFAULT_FRACTIONS, members: str = "all",
                           arms: tuple[str, str] = ("population", "baseline"), benchmark: str = "",
                           removed: Mapping[str, Sequence[str]] | None = None) -> list[dict]:
    """Per checkpoint on one benchmark: the arms' steps and gaps per seed; the population mean, best and worst
    member (chosen on the validation problems), and the baseline, on the scoring problems every scored version
    answered, as means over seeds; the difference population mean - baseline with its intervals and the paired counts
    (headline; spec 14, revised), without the families of `benchmark` whose templates `removed` names. `rows[(arm, seed)]` are an arm run's metrics, `evals[(arm, seed)]` its evaluation file;
    `members` says which of the population's members are scored (population_at). `arms` names the two compared,
    (population, baseline) by default; the second may be a population too (the mixed-rank population against the
    uniform one, spec 9), whose value on a problem is then its scored members' mean, as the baseline's one
    adapter's is its own."""
    out = []
    first, second = arms
    per_seed = {s: checkpoints_of({a: rows[(a, s)] for a in arms}, budget, fractions) for s in seeds}
    warm = next((per_problem(e)[1].get(WARM) for e in evals.values() if WARM in per_problem(e)[1]), None)
    for i, fraction in enumerate(fractions):
        pop, base, where, best, worst = {}, {}, {}, [], []
        for s in seeds:
            cp = per_seed[s][i]
            where[s] = {a: {"step": st.step, "flops": st.flops, "gap": st.gap} for a, st in cp.arms.items()}
            if (first, s) not in evals or (second, s) not in evals:
                continue
            ids, pv = per_problem(evals[(first, s)])
            _, bv = per_problem(evals[(second, s)])
            p_state = _state(pv, population_at(rows[(first, s)], cp.arms[first].step, members), warm)
            b_state = _state(bv, population_at(rows[(second, s)], cp.arms[second].step, members), warm)
            if not p_state or not b_state:
                continue
            answered = set.intersection(*(set(v) for v in [*p_state.values(), *b_state.values()]))
            validation, scoring = ([p for p in part if p in answered] for part in split(ids))
            pop[s] = {p: [m[p] for m in p_state.values()] for p in scoring}
            # the baseline's one adapter (a students-only choice keeps it: it plays both roles), or a population's mean
            base[s] = {p: mean(m[p] for m in b_state.values()) for p in scoring}
            validation, scoring = kept(validation, benchmark, removed), kept(scoring, benchmark, removed)
            if validation and scoring:  # fewer than VALIDATION_EVERY problems: no best or worst member
                b, w = choose(p_state, validation)
                best.append(mean(p_state[b][p] for p in scoring))
                worst.append(mean(p_state[w][p] for p in scoring))
        row = {"fraction": fraction, "flops": fraction * budget, "arms": where, "seeds": sorted(pop)}
        if pop:
            row.update(headline(benchmark, pop, base, warm, removed, n_resamples=n_resamples))
            row.update({"best_member": mean(best) if best else None, "worst_member": mean(worst) if worst else None})
        out.append(row)
    return out
