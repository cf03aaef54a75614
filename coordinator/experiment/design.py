"""`python -m coordinator.experiment.design`: an experiment's design and its power, before it runs. From a pilot's
costs (coordinator/experiment/pilot.py: a step of each arm, an answer of each benchmark, on this machine) and a
measured spread (an earlier multi-seed result: its seed-to-seed spread and its problems' spread), for each number of
seeds and each budget asked: the steps, the answers the scoring takes, the machine time, and the smallest difference
the headline can detect at 80% power (populora/analysis/power.py).

The spread of a published benchmark has not been measured over seeds here: its problem part comes from the pilot's
pass rates (a problem's difference has variance at most 2p(1-p) when the population's mean and the baseline are both
near p), its seed part is taken from the generated benchmark's measured seed-to-seed spread. Both are stated in the
output, so a reader can redo the numbers with other assumptions (--sd-seed, --sd-problem).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from populora.analysis.power import minimal_detectable_difference, seeds_needed

# How much faster three seeds at once (--jobs 3) are than one after another on this 2-core machine: 1.2x measured
# (docs/experiment.md); the updates are compute-bound, so more jobs do not buy more.
JOBS_SPEEDUP = 1.2


def spread(results: Path) -> dict:
    """The seed-to-seed and within-seed spread of the headline of an earlier result (its last checkpoint), recomputed
    from its files (coordinator/experiment/reanalyse.py)."""
    from coordinator.experiment.reanalyse import checkpoints, load

    exp, metrics, evals = load(results)
    out = {}
    for b, cps in checkpoints(exp, metrics, evals).items():
        if cps and cps[-1].get("variance"):
            c = cps[-1]
            out[b] = {**c["variance"], "n_seeds": len(c["per_seed"]), "problems": c["n_pairs"] // len(c["per_seed"]),
                      "difference": c["difference"]}
    return out


def answers_per_seed(versions: int, checkpoints: int, problems: int, curve: int) -> int:
    """Answers one seed's scoring takes on one benchmark: every version at the last checkpoint on every problem, the
    same versions at each earlier checkpoint on the curve's first `curve` problems (all when 0)."""
    return versions * problems + versions * (checkpoints - 1) * (min(curve, problems) if curve else problems)


def design_table(pilot: dict, sizes: dict, seeds: list[int], budgets: list[float], *, students: int,
                 checkpoints: int, curve: int, sd_seed: float | dict, sd_problem: dict, jobs: int) -> list[dict]:
    """One row per (budget, seeds): steps and machine hours of training and scoring, and each benchmark's MDD. A
    benchmark the pilot did not score is costed at the mean of the ones it did; `sd_seed` may be one value or one
    per benchmark."""
    arms = pilot["training"]["arms"]
    measured = [m["seconds_per_answer"] for m in pilot["scoring"]["benchmarks"].values() if m.get("seconds_per_answer")]
    rows = []
    for budget in budgets:
        steps = {a: budget / c["flops_per_step"] for a, c in arms.items() if c.get("steps")}
        train_s = sum(steps[a] * arms[a]["seconds_per_step"] for a in steps)
        score_s, mdd = 0.0, {}
        for b, n in sizes.items():
            cost = pilot["scoring"]["benchmarks"].get(b, {}).get("seconds_per_answer") or sum(measured) / len(measured)
            score_s += answers_per_seed(students + 1, checkpoints, n, curve) * cost
            scoring_problems = n - n // 5  # every fifth chooses the best member (checkpointeval.split)
            sd = sd_seed[b] if isinstance(sd_seed, dict) else sd_seed
            mdd[b] = {s: minimal_detectable_difference(s, scoring_problems, sd, sd_problem[b]) for s in seeds}
        for s in seeds:
            speed = JOBS_SPEEDUP if jobs > 1 else 1.0
            hours = s * (train_s + score_s) / speed / 3600
            rows.append({"budget": budget, "seeds": s, "steps": {a: math.ceil(v) for a, v in steps.items()},
                         "training_hours": s * train_s / speed / 3600, "scoring_hours": s * score_s / speed / 3600,
                         "hours": hours, "stretches_of_2_5_hours": math.ceil(hours / 2.5),
                         "mdd": {b: v[s] for b, v in mdd.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the designs (module docstring) as a table and, with --out, as JSON."""
    p = argparse.ArgumentParser(prog="python -m coordinator.experiment.design", description=main.__doc__)
    p.add_argument("--pilot", type=Path, required=True, help="pilot.json of coordinator.experiment.pilot")
    p.add_argument("--spread", type=Path, default=Path("docs/results"), help="an earlier multi-seed result")
    p.add_argument("--budget", type=float, action="append", default=[], help="FLOPs per arm; repeatable")
    p.add_argument("--seeds", default="3,5,8,10,20")
    p.add_argument("--students", type=int, default=4)
    p.add_argument("--checkpoints", type=int, default=4)
    p.add_argument("--curve", type=int, default=100, help="eval.curve_limit")
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--sd-seed", type=float, default=None,
                   help="default: the spread result's heldout sd_seed (net of scoring noise)")
    p.add_argument("--sd-problem", type=float, default=None, help="default: from the pilot's pass rates")
    p.add_argument("--heldout", type=int, default=380, help="heldout problems (costed at the pilot's mean answer, "
                                                               "its spread the measured one; 0: left out)")
    p.add_argument("--target", type=float, default=0.03, help="a difference to find the seeds for (default 0.03)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    pilot = json.loads(args.pilot.read_text())
    measured = spread(args.spread)
    held = measured.get("heldout", {})
    sd_seed = args.sd_seed if args.sd_seed is not None else held.get("sd_seed", 0.0)
    from populora.evals import load_problems

    sizes = {b: len([x for x in load_problems(b) if not x.set_apart]) for b in pilot["scoring"]["benchmarks"]}
    sd_problem = {}
    for b, m in pilot["scoring"]["benchmarks"].items():
        rate = sum(m["pass_rate"].values()) / len(m["pass_rate"])
        sd_problem[b] = args.sd_problem if args.sd_problem is not None else math.sqrt(max(2 * rate * (1 - rate), 0.01))
    seeds = [int(s) for s in args.seeds.split(",")]
    budgets = args.budget or [6.8e13]
    sd_seeds = dict.fromkeys(sizes, sd_seed)
    if args.heldout and held:  # the generated benchmark's own spread, measured over seeds
        sizes["heldout"], sd_seeds["heldout"], sd_problem["heldout"] = args.heldout, held["sd_seed"], held[
            "sd_problem"]
    rows = design_table(pilot, sizes, seeds, budgets, students=args.students, checkpoints=args.checkpoints,
                        curve=args.curve, sd_seed=sd_seeds, sd_problem=sd_problem, jobs=args.jobs)
    needed = {b: seeds_needed(args.target, n - n // 5, sd_seeds[b], sd_problem[b]) for b, n in sizes.items()}
    out = {"pilot": str(args.pilot), "spread": measured, "sd_seed": sd_seed, "sd_problem": sd_problem,
           "sizes": sizes, "designs": rows, "target": args.target, "seeds_for_target": needed}
    print(f"spread measured in {args.spread}: {json.dumps(measured)}")
    print(f"assumed: sd_seed {sd_seed:.4f} (seed-to-seed sd of the difference), sd_problem {sd_problem}")
    for r in rows:
        mdd = ", ".join(f"{b} {v:.3f}" for b, v in r["mdd"].items())
        print(f"budget {r['budget']:.3g}, {r['seeds']} seeds: steps {r['steps']}, training {r['training_hours']:.1f} h, "
              f"scoring {r['scoring_hours']:.1f} h, in all {r['hours']:.1f} h ({r['stretches_of_2_5_hours']} stretches "
              f"of 2.5 h); smallest difference found at 80% power: {mdd}")
    print(f"seeds for a difference of {args.target}: {needed}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
