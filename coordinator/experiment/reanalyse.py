"""`python -m coordinator.experiment.reanalyse RESULTS_DIR`: every number a result's text uses, recomputed from its
committed files alone, with the analysis as it is now, so a reader can check the text and see what a fixed analysis
changed. RESULTS_DIR is an experiment's directory (runs/<id>/) or its committed copy (docs/results/): experiment.json,
evals/<run>.<benchmark>.json, the arms' metrics (metrics/<run>.metrics.jsonl there, <output_dir>/<run>/metrics.jsonl
here) and heldout_overlap.json (which held-out templates share behaviour with the warm start; made with a sandbox,
once, when it is not there, `--no-overlap` to skip it). Prints labelled lines (`--json`: one JSON document).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from statistics import mean

from coordinator.experiment.armdynamics import arm_dynamics, complexity_values
from coordinator.experiment.comparison import ArmRun, ComparisonInput, arm_numbers, eval_numbers
from coordinator.experiment.equalcompute import checkpoint_section
from coordinator.experiment.evalfiles import OVERLAP_FILE, load_evals
from coordinator.record.births import birth_rates, summarise
from populora.analysis.dynamics import COMPLEXITY_METRICS
from populora.analysis.intervals import trend
from populora.config import config_from_yaml


def read_rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def load(results: Path) -> tuple[ComparisonInput, dict[str, list[dict]], dict[str, dict[str, dict]]]:
    """The experiment as the comparison reads it, from either layout, with its metrics and evaluations."""
    manifest = json.loads((results / "experiment.json").read_text())
    cfg = config_from_yaml(manifest["config_yaml"], f"the stored config of {results / 'experiment.json'}")
    arms, metrics = [], {}
    for a in manifest["arms"]:
        candidates = [results / "metrics" / f"{a['run_id']}.metrics.jsonl", results / a["run_id"] / "metrics.jsonl",
                      Path(cfg.run.output_dir) / a["run_id"] / "metrics.jsonl"]
        path = next((p for p in candidates if p.exists()), candidates[0])
        arms.append(ArmRun(a["arm"], a["seed"], a["run_id"], path.parent))
        metrics[a["run_id"]] = read_rows(path)
    names = sorted({p.name.split(".")[-2] for p in (results / "evals").glob("*.json")})
    benchmarks = ["heldout"] + [b for b in names if b != "heldout"]
    exp = ComparisonInput(manifest["experiment_id"], results, cfg, list(manifest["seeds"]), benchmarks, None, 1, arms)
    return exp, metrics, load_evals(results, [a.run_id for a in arms], benchmarks)


def overlap(results: Path, cfg, compute: bool = True) -> dict | None:
    """The held-out templates' overlap with the warm start: the committed file, else (with `compute`) computed in a
    sandbox and written beside the other files (it depends on the templates and the generator seed only)."""
    path = results / OVERLAP_FILE
    if path.exists():
        return json.loads(path.read_text())
    if not compute:
        return None
    from dataclasses import asdict

    from coordinator.clients.services import build
    from coordinator.experiment.evalfiles import write_json
    from populora.evals.overlap import shared_behaviour

    sandbox = build("sandbox", cfg)
    try:
        found = shared_behaviour(sandbox)
    finally:
        sandbox.close()
    write_json(path, {**asdict(found), "removed": found.removed})
    return json.loads(path.read_text())


def _r(v, digits: int = 3):
    return None if v is None else round(float(v), digits)


def checkpoints(exp: ComparisonInput, metrics: dict, evals: dict) -> dict:
    """Per benchmark and checkpoint the comparison now, and with every family kept (as before the removal)."""
    now = checkpoint_section(exp, metrics, evals)
    every = checkpoint_section(replace(exp, out_dir=exp.out_dir / "no-overlap"), metrics, evals)
    out = {}
    for b, cps in now.items():
        out[b] = []
        for c, c_all in zip(cps, every.get(b, [])):
            if "difference" not in c:
                continue
            row = {k: c.get(k) for k in ("fraction", "flops", "arms", "population_mean", "best_member",
                                         "worst_member", "baseline", "difference", "low", "high", "n_pairs",
                                         "n_families", "counts", "per_seed", "seed_t", "pairs_interval", "removed",
                                         "removed_because", "families", "leave_one_out", "variance")}
            row["every_family"] = {k: c_all.get(k) for k in ("population_mean", "baseline", "difference", "low",
                                                            "high", "n_pairs", "pairs_interval", "seed_t",
                                                            "per_seed", "leave_one_out", "families")}
            out[b].append(row)
    return out


def arms_numbers(exp: ComparisonInput, metrics: dict, evals: dict) -> dict:
    """Per arm run: steps, spend, and each benchmark's pass@1 on all its problems with the roles at the checkpoint
    (and as the final population gave them, before that fix)."""
    out = {}
    for a in exp.arms:
        rows = metrics[a.run_id]
        n = arm_numbers(rows)
        entry = {"arm": a.name, "seed": a.seed, "steps": n["steps"], "budget_flops": n["budget_flops"],
                 "wall_seconds": _r(n["wall_seconds"], 0), "evals": {}}
        for b, scores in evals.get(a.run_id, {}).items():
            fixed = eval_numbers(scores, a.run_id, n["population"], rows)
            before = eval_numbers(scores, a.run_id, n["population"])
            entry["evals"][b] = {"members": {m: _r(v["pass_at_1"]) for m, v in fixed["members"].items()},
                                 "students_mean": _r(fixed["students_mean"]), "mean": _r(fixed["mean"]),
                                 "students_mean_before": _r(before["students_mean"]), "warm_start": _r(fixed["start"]),
                                 "n_problems": fixed["n_problems"], "seconds": _r(scores.get("seconds"), 0)}
        out[a.run_id] = entry
    return out


def dynamics(exp: ComparisonInput, metrics: dict) -> dict:
    """Per arm: steps per seed in seed order, the complexity trends with each seed's slope, the halves, coverage,
    oscillation, behavioural diversity over the active teachers (the one-policy reference for the baseline) beside
    the value the committed dynamics files hold, and the members' weight diversity as each run recorded it."""
    out = {}
    for name in ("population", "baseline"):
        mine = sorted((a for a in exp.arms if a.name == name and metrics.get(a.run_id)), key=lambda a: a.seed)
        if not mine:
            continue
        per_seed = {}
        for a in mine:
            rows = metrics[a.run_id]
            d = arm_dynamics(rows, None, weights=False)
            old_file = exp.out_dir / "dynamics" / f"{a.run_id}.json"
            old = json.loads(old_file.read_text()) if old_file.exists() else {}
            n = arm_numbers(rows)
            # as the run recorded it in its last row, else as the committed dynamics file has it (read from the
            # store when the comparison was made: the store itself is not committed)
            last_w = next((r["weight_diversity"] for r in reversed(rows) if r.get("weight_diversity")),
                          (old.get("weight_diversity") or [None])[-1])
            per_seed[a.seed] = {
                "steps": n["steps"], "distinct_shapes": d["coverage"][-1]["distinct_shapes"] if d["coverage"] else None,
                "node_types": d["coverage"][-1]["node_types"] if d["coverage"] else None,
                "behavioural_diversity": _mean_of(d["behavioural_diversity"]),
                "behavioural_diversity_before": _mean_of(old.get("behavioural_diversity", [])),
                "behavioural_reference": _mean_of(d["behavioural_reference"]),
                "oscillation": _mean_of(list(d["oscillation"].values())),
                "weight_diversity_last": last_w,
                "ast_depth_halves": {h: n["complexity"]["ast_depth"][h] for h in ("first_half", "second_half")}}
        trends = {}
        for k in COMPLEXITY_METRICS:
            try:
                t = trend({a.seed: complexity_values(metrics[a.run_id], k) for a in mine})
            except ValueError:
                continue
            trends[k] = {"slope_per_1e15": _r(t.slope * 1e15, 2), "low": _r(t.low * 1e15, 2),
                         "high": _r(t.high * 1e15, 2), "interval": t.resampled,
                         "per_seed": {s: _r(v * 1e15, 2) for s, v in t.per_seed.items()}}
        out[name] = {"per_seed": per_seed, "trend": trends,
                     "oscillation_mean": _mean_of([v["oscillation"] for v in per_seed.values()])}
    return out


def _mean_of(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return _r(mean(xs)) if xs else None


def births(exp: ComparisonInput, metrics: dict) -> dict:
    """How the population's children started, per operator and role (coordinator/record/births.py)."""
    found = [b for a in exp.arms if a.name != "baseline" for b in birth_rates(metrics[a.run_id])]
    operators: dict[str, int] = {}
    for b in found:
        operators[b["operator"]] = operators.get(b["operator"], 0) + 1
    return {"children": len(found), "with_next_step": sum(b["child_rate"] is not None for b in found),
            "operators": operators, "summary": summarise(found)}


def cost(results: Path) -> dict:
    """What /usr/bin/time said of the command, from the committed run.log."""
    log = results / "run.log"
    text = log.read_text() if log.exists() else ""
    pick = {"wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", "cpu": r"Percent of CPU this job got: (\S+)",
            "max_rss_kb": r"Maximum resident set size \(kbytes\): (\d+)"}
    return {k: (m.group(1) if (m := re.search(p, text)) else None) for k, p in pick.items()}


def reanalyse(results: Path, with_overlap: bool = True) -> dict:
    exp, metrics, evals = load(results)
    found = overlap(results, exp.cfg, compute=with_overlap)
    out = {"experiment_id": exp.experiment_id, "seeds": exp.seeds, "budget_flops": exp.cfg.run.budget_flops,
           "overlap": None if found is None else {k: found[k] for k in ("removed", "shared", "examples")},
           "checkpoints": checkpoints(exp, metrics, evals), "arms": arms_numbers(exp, metrics, evals),
           "dynamics": dynamics(exp, metrics), "births": births(exp, metrics), "cost": cost(results)}
    return out


def main(argv: list[str] | None = None) -> int:
    """Print every number of a result's text, recomputed (module docstring)."""
    from coordinator.experiment.reanalysetext import lines

    p = argparse.ArgumentParser(prog="python -m coordinator.experiment.reanalyse", description=main.__doc__)
    p.add_argument("results", type=Path, help="an experiment's directory, or its committed copy (docs/results)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of labelled lines")
    p.add_argument("--no-overlap", action="store_true", help="do not compute heldout_overlap.json when it is absent")
    args = p.parse_args(argv)
    if not (args.results / "experiment.json").exists():
        print(f"error: {args.results} holds no experiment.json: give an experiment's directory", file=sys.stderr)
        return 2
    numbers = reanalyse(args.results, with_overlap=not args.no_overlap)
    print(json.dumps(numbers, indent=1, default=str) if args.json else "\n".join(lines(numbers)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
