"""The population-vs-baseline comparison of an experiment: its numbers (scores.json) and a report with figures, each
against compute (spec 14) and steps. Made from the arms' metrics.jsonl and the evaluation files alone."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from coordinator.experiment.armfigures import (
    COMPLEXITY_TITLES,
    plot_complexity,
    plot_compute,
    plot_evals,
    plot_rates,
    plot_ratings,
)
from coordinator.experiment.checkpointeval import VALIDATION_EVERY
from coordinator.experiment.equalcompute import (
    MIXED_VS_UNIFORM,
    checkpoint_section,
    checkpoint_table,
    dynamics_section,
    mixed_rank_section,
    plot_checkpoints,
    plot_dynamics,
    trend_table,
)
from coordinator.experiment.evalfiles import load_evals, write_json
from coordinator.experiment.headline import is_likelihood
from coordinator.record.stepmetrics import COMPLEXITY_KEYS, read_metrics
from populora.config import Config


@dataclass(frozen=True)
class ArmRun:
    """One run of an arm as the comparison reads it: which arm, its seed, its run id and directory (metrics.jsonl)."""

    name: str  # "population" | "mixed-rank" | "baseline"
    seed: int
    run_id: str
    run_dir: Path


@dataclass(frozen=True)
class ComparisonInput:
    """What the comparison is made of: the experiment's id and directory (scores.json, the figures and the page go
    there, evaluations are read from there), its config (model, population, budget and step cap, as the page states
    them), seeds, benchmarks, evaluation settings and arm runs in the order they ran."""

    experiment_id: str
    out_dir: Path
    cfg: Config
    seeds: list[int]
    benchmarks: list[str]
    limit: int | None
    samples: int
    arms: list[ArmRun]


# ---------------------------------------------------------------- numbers

def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return mean(xs) if xs else None


def pooled(spreads: list[dict]) -> dict:
    """Mean and standard deviation over every program of several steps, from each step's (mean, std, n):
    var = sum n_i (std_i^2 + mean_i^2) / N - mean^2, exact for population deviations."""
    parts = [s for s in spreads if s and s.get("n")]
    n = sum(s["n"] for s in parts)
    if not n:
        return {"mean": None, "std": None, "n": 0}
    m = sum(s["n"] * s["mean"] for s in parts) / n
    second = sum(s["n"] * (s["std"] ** 2 + s["mean"] ** 2) for s in parts) / n
    return {"mean": m, "std": math.sqrt(max(0.0, second - m * m)), "n": n}


def _halves(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    steps = [r for r in rows if r["step"] > 0]
    half = (len(steps) + 1) // 2
    return steps[:half], steps[half:]


def arm_numbers(rows: list[dict]) -> dict:
    """One arm's training numbers: compute spent, steps, wall time, rates and complexity (first and second half of
    its steps, so a drift shows), final ratings."""
    last = rows[-1]
    spent = last.get("compute_cumulative", {})
    steps = [r for r in rows if r["step"] > 0]
    first, second = _halves(rows)
    out = {"steps": len(steps), "tokens": spent.get("tokens", 0), "generated_tokens": spent.get("generated_tokens", 0),
           "trained_tokens": spent.get("trained_tokens", 0), "sandbox_jobs": spent.get("sandbox_jobs", 0),
           "sandbox_cpu_seconds": spent.get("sandbox_cpu_seconds"), "prompt_tokens": spent.get("prompt_tokens", 0),
           "flops": spent.get("flops", 0),
           "budget_flops": spent.get("budget_flops", 0), "phase_flops": spent.get("phase_flops", {}),
           "step0_tokens": rows[0].get("compute_cumulative", {}).get("tokens", 0),
           "wall_seconds": sum(r.get("step_seconds", 0) for r in rows), "stopped": last.get("stopped", "")}
    for key in ("valid_rate", "solve_rate"):
        out[key] = {"mean": _mean(r.get(key) for r in steps), "first_half": _mean(r.get(key) for r in first),
                    "second_half": _mean(r.get(key) for r in second), "last": steps[-1].get(key) if steps else None}
    out["complexity"] = {
        key: {"all": pooled([r.get("complexity", {}).get(key) for r in steps]),
              "first_half": pooled([r.get("complexity", {}).get(key) for r in first]),
              "second_half": pooled([r.get("complexity", {}).get(key) for r in second])}
        for key in COMPLEXITY_KEYS}
    out["ratings"] = {a: {"skill": r["skill"], "mu": r["mu"], "sigma": r["sigma"], "role": r.get("role", "")}
                      for a, r in (steps[-1].get("ratings", {}) if steps else {}).items()}
    out["population"] = steps[-1].get("population", {}) if steps else {}
    return out


def eval_numbers(scores: dict, run_id: str, population: dict, rows: list[dict] | None = None) -> dict:
    """One arm on one benchmark (its population at the last compute checkpoint): pass@1 of each member, the
    members' mean (spec 15: report the population mean and each member), the students' mean, and the warm-start
    adapter every arm began from. A member's role is the one it had in the population at that checkpoint (its metrics
    row in `rows`), not in the final one, where a member retired since is missing. No best member here: it would be
    chosen on the problems it is scored on (the checkpoint table chooses it on a validation split instead)."""
    members, start = {}, None
    last = max(scores.get("targets", {}).values(), default=None)  # the last checkpoint's step, when checkpointed
    if last is not None:  # the population at that step, every member at the version it had then
        then = next((r.get("population", {}) for r in rows or [] if r["step"] == last), {})
        population = {a: {"role": (then.get(a) or population.get(a) or {}).get("role", ""), "version": int(v)}
                      for a, _, v in (n.rpartition("@v") for n, step in scores["targets"].items() if step == last)}
    key = "logprob" if scores.get("kind") == "logprob" else "pass_at_1"  # a likelihood file: its results' mean
    for r in scores.get("results", []):
        value = r["mean"] if key == "logprob" else r["pass_at_1"]
        if r["adapter_id"] in population and r["version"] == population[r["adapter_id"]].get("version", r["version"]):
            members[r["adapter_id"]] = {key: value, "version": r["version"],
                                        "role": population[r["adapter_id"]].get("role", ""), "label": r.get("label")}
        elif (r.get("adapter_id") or "").endswith(".warm"):
            start = value
    students = [m[key] for m in members.values() if m["role"] in ("student", "both")]
    n_problems = max((r.get("n_problems", 0) for r in scores.get("results", [])), default=0)
    return {"members": members, "mean": _mean(m[key] for m in members.values()),
            "students_mean": _mean(students),
            "start": start, "n_problems": n_problems, "samples": scores.get("samples"), "limit": scores.get("limit")}


def comparison(exp: ComparisonInput, metrics: dict[str, list[dict]], evals: dict[str, dict[str, dict]]) -> dict:
    """scores.json: per arm run its numbers; per benchmark and arm the mean over seeds; the budget and seeds."""
    arms = {}
    for arm in exp.arms:
        rows = metrics.get(arm.run_id)
        if not rows:
            continue
        numbers = arm_numbers(rows)
        numbers.update({"arm": arm.name, "seed": arm.seed})
        numbers["evals"] = {b: eval_numbers(s, arm.run_id, numbers["population"], rows)
                            for b, s in evals.get(arm.run_id, {}).items()}
        arms[arm.run_id] = numbers
    # the warm start every arm began from, scored once (with the first arm)
    start = {b: next((n["evals"][b]["start"] for n in arms.values()
                      if b in n["evals"] and n["evals"][b]["start"] is not None), None) for b in exp.benchmarks}
    summary: dict = {"warm_start": start}
    for name in ("population", "mixed-rank", "baseline"):
        mine = [n for n in arms.values() if n["arm"] == name]
        if not mine:
            continue
        s = {"runs": len(mine), "tokens": _mean(n["tokens"] for n in mine), "steps": _mean(n["steps"] for n in mine),
             "wall_seconds": _mean(n["wall_seconds"] for n in mine),
             "solve_rate": _mean(n["solve_rate"]["mean"] for n in mine),
             "valid_rate": _mean(n["valid_rate"]["mean"] for n in mine)}
        for key in COMPLEXITY_KEYS:
            s[key] = {part: {"mean": _mean(n["complexity"][key][part]["mean"] for n in mine),
                             "std": _mean(n["complexity"][key][part]["std"] for n in mine)}
                      for part in ("first_half", "second_half")}
        for b in exp.benchmarks:
            got = [n["evals"][b] for n in mine if b in n["evals"]]
            if got:
                s[b] = {"mean": _mean(g["mean"] for g in got),
                        "students_mean": _mean(g["students_mean"] for g in got), "start": start[b],
                        "per_seed_mean": [g["mean"] for g in got]}
        summary[name] = s
    return {"experiment_id": exp.experiment_id, "seeds": exp.seeds, "benchmarks": exp.benchmarks,
            "budget": {"flops": exp.cfg.run.budget_flops, "tokens": exp.cfg.run.budget_tokens,
                       "sandbox_jobs": exp.cfg.run.budget_sandbox_jobs},
            "max_steps": exp.cfg.run.steps, "eval": {"limit": exp.limit, "samples": exp.samples,
                                                   "checkpoints": list(exp.cfg.eval.checkpoints),
                                                   "members": exp.cfg.eval.members},
            "summary": summary, "arms": arms}


# ---------------------------------------------------------------- the page

def _f(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _cx(c: dict) -> str:
    return "-" if c.get("mean") is None else f"{c['mean']:.2f} +- {c['std']:.2f}"


def _table(exp: ComparisonInput, scores: dict) -> str:
    head = ["run", "steps", "tokens", "sandbox jobs", "wall s", "valid (1st/2nd half)", "solve (1st/2nd half)"]
    head += [f"{COMPLEXITY_TITLES[k]} (1st / 2nd half)" for k in COMPLEXITY_KEYS]
    head += [f"{b} {'log-prob per token' if is_likelihood(b) else 'pass@1'} mean at 100% "
             f"(warm start {_f(scores['summary']['warm_start'].get(b))})" for b in exp.benchmarks]
    rows = []
    for run_id, n in scores["arms"].items():
        cells = [html.escape(run_id), str(n["steps"]), f"{n['tokens']:,}", f"{n['sandbox_jobs']:,}",
                 f"{n['wall_seconds']:.0f}",
                 f"{_f(n['valid_rate']['first_half'])} / {_f(n['valid_rate']['second_half'])}",
                 f"{_f(n['solve_rate']['first_half'])} / {_f(n['solve_rate']['second_half'])}"]
        cells += [f"{_cx(n['complexity'][k]['first_half'])} / {_cx(n['complexity'][k]['second_half'])}"
                  for k in COMPLEXITY_KEYS]
        for b in exp.benchmarks:
            e = n["evals"].get(b)
            cells.append("not evaluated" if not e else
                         f"{_f(e['mean'])} (n={e['n_problems']})")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>")


def comparison_scores(exp: ComparisonInput, metrics: dict[str, list[dict]], evals: dict[str, dict[str, dict]],
                      dynamics: dict[str, dict] | None = None) -> tuple[dict, dict]:
    """scores.json's numbers and the dynamics behind them (equalcompute.dynamics_section), from the arms' metrics
    rows and evaluation files; `dynamics` gives each run's dynamics already computed (a result made of shards, whose
    adapters are not kept), else they are computed from the store."""
    scores = comparison(exp, metrics, evals)
    scores["checkpoints"] = checkpoint_section(exp, metrics, evals)
    if any(a.name == "mixed-rank" for a in exp.arms):  # spec 9, "Mixed ranks": against the uniform population
        scores["checkpoints_mixed_rank"] = checkpoint_section(exp, metrics, evals, arms=MIXED_VS_UNIFORM)
    dyn = dynamics_section(exp, metrics, dynamics)
    scores["dynamics"] = dyn["arms"]
    scores["evaluation_flops"] = {run_id: sum(e.get("flops", 0) for e in per.values()) for run_id, per in evals.items()}
    return scores, dyn


def write_comparison(exp: ComparisonInput) -> tuple[Path, dict]:
    """scores.json, the figures and report.html under the experiment's directory; returns (report, scores)."""
    out = exp.out_dir
    metrics = {a.run_id: read_metrics(a.run_dir) for a in exp.arms}
    evals = load_evals(out, [a.run_id for a in exp.arms], exp.benchmarks)
    scores, dyn = comparison_scores(exp, metrics, evals)
    mixed = "checkpoints_mixed_rank" in scores
    write_json(out / "scores.json", scores)
    plot_dynamics(exp, dyn, out / "dynamics.png")
    checkpoints_img = ('<img src="checkpoints.png">' if plot_checkpoints(exp, scores["checkpoints"],
                                                                         out / "checkpoints.png") else "")
    figures = {"rates.png": plot_rates, "complexity.png": plot_complexity, "ratings.png": plot_ratings,
               "compute.png": plot_compute}
    for name, fn in figures.items():
        fn(exp, metrics, out / name)
    plot_evals(exp, scores, out / "evals.png")
    budget = ", ".join(f"{k} {v:,}" for k, v in scores["budget"].items() if v)
    evals_img = '<img src="evals.png">' if (out / "evals.png").exists() else "<p>No evaluation yet.</p>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>PopuLoRA experiment {html.escape(exp.experiment_id)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>Population vs baseline: experiment {html.escape(exp.experiment_id)}</h1>
<p>Model {html.escape(exp.cfg.model.name)}; population {exp.cfg.population.n_teachers}T+{exp.cfg.population.n_students}S
against the AZR baseline (one adapter in both roles); the same warm start, seeds {exp.seeds} and budget ({budget},
at most {exp.cfg.run.steps} steps per arm). Held-out scores: greedy pass@1 of every member of each arm's final
population{'' if exp.samples == 1 else f', {exp.samples} samples'}.</p>
<h2>At equal compute</h2>
<p>Each arm at its last step not past each checkpoint (a fraction of the compute budget in FLOPs, spec 14), with the
compute it left unspent (the gap). The population's scored members: {'every member' if exp.cfg.eval.members == 'all'
else 'its students (eval.members)'}; checkpoints {', '.join(f'{f:.0%}' for f in exp.cfg.eval.checkpoints)}.
Scores on the scoring split of each benchmark; the best and worst members are
chosen on the separate validation split (every {VALIDATION_EVERY}th problem), never on the problems they are scored
on. The difference is population mean minus baseline with a 95% hierarchical bootstrap interval (seeds, then problem
families; the per-seed values and the t interval over seeds below); the counts pair each member with its baseline.</p>
{checkpoint_table(exp, scores["checkpoints"])}{checkpoints_img}{mixed_rank_section(exp, scores) if mixed else ""}
<h2>Dynamics against compute</h2>
<p>Complexity trend of valid proposals (slope of the per-step mean against FLOPs; 95% t interval over 2-4 seeds, with
each seed's slope; spec 11), coverage, oscillation, the active teachers' behavioural diversity (the baseline: its own
proposals split in two) and the members' weight distance.</p>{trend_table(dyn)}<img src="dynamics.png">
<h2>Summary</h2>{_table(exp, scores)}
<h2>Held-out scores against compute</h2>{evals_img}
<h2>Solve and valid rates</h2><img src="rates.png">
<h2>Problem complexity and its spread</h2><img src="complexity.png">
<h2>Rating dynamics</h2><img src="ratings.png">
<h2>Compute</h2><img src="compute.png">
<p>Numbers: <a href="scores.json">scores.json</a>; each arm's own report: <code>populora report RUN</code>.</p>
</body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path, scores
