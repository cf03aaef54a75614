"""`python -m coordinator.experiment.design`: an experiment's design and its power, before it runs. From a pilot's
costs (coordinator/experiment/pilot.py: a step of each arm, an answer of each benchmark, on this machine) and a
measured spread (an earlier multi-seed result: its seed-to-seed spread and its problems' spread), for each number of
seeds and each budget asked: the steps, the answers and likelihood rows the scoring takes, the machine time of one
seed (a shard: docs/experiment.md, "Shards") and of all of them, and the smallest difference each metric detects at
80% power (populora/analysis/power.py), with the seeds a stated target needs.

The metrics are pass@1 on each benchmark (`--pass-problems` of it, or all of it) and, with `--likelihood-problems`,
the likelihood of the reference answer on each task benchmark (`<name>-logprob`, the mean log-probability per token).
Where each spread comes from is stated in the output, and whether it was measured or assumed:
- heldout's pass@1: measured over seeds in the earlier result (sd_seed net of the scoring noise, sd_problem);
- CRUXEval's pass@1: the problem part from the pilot's pass rates (a problem's difference has variance at most
  2p(1-p) when the population's mean and the baseline are both near p, at least 0.01), the seed part taken from
  heldout's measured one (--sd-seed, --sd-problem);
- the likelihood: the problem part from the pilot's per-problem differences where it recorded them, else assumed
  (--sd-problem-logprob); the seed part assumed (--sd-seed-logprob): no multi-seed likelihood has been measured.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from coordinator.experiment.checkpointeval import split
from populora.analysis.power import minimal_detectable_difference, seeds_needed

# How much faster three seeds at once (--jobs 3) are than one after another on this 2-core machine: 1.2x measured
# (docs/experiment.md); the updates are compute-bound, so more jobs do not buy more. Shards run one seed at a time.
JOBS_SPEEDUP = 1.2

# Seconds per problem per version on this 2-core machine with run.reproducible's one thread, six versions in one
# batch: docs/experiment.md's table ("A continuous score"), the pilot of 2026-12-07 (`--steps 1 --problems 12
# --benchmark heldout --benchmark cruxeval-o --benchmark cruxeval-i --set run.reproducible=true`), at load averages
# 1.4-1.8 (CRUXEval-O), 1.4-4.1 (CRUXEval-I) and 4.1-6.6 (heldout). A pilot run with run.reproducible (the shards'
# setting) is read instead where it has the figure; one without it (docs/results/plan/pilot.json: several threads, a
# load of 4.2) is not the shards' configuration. --pass-seconds and --likelihood-seconds override both.
TABLE_SECONDS = {"pass": {"cruxeval-o": 0.67, "cruxeval-i": 1.03, "heldout": 2.02},
                 "likelihood": {"cruxeval-o": 0.57, "cruxeval-i": 0.59, "heldout": 0.93}}
# docs/experiment.md, "Sizing a shard" (2026-12-07): a shard's process computes on one thread, so an idle machine runs
# it in about its CPU time; at load averages 6.4-8.0 the wall time was 2.2-2.4 times it, with population steps of 383
# and 455 s, which bracket the 418 s of plan/pilot.json. The pilot's wall seconds are divided by this for idle ones.
PILOT_SLOWDOWN = 2.3
# Wall seconds at that load of what a shard does besides the steps pilot.json times (same source): recording the
# members' weight diversity after each population step (about 150 s) and step 0, the seeding (population 108-234 s,
# baseline 27 s: their means).
DIVERSITY_SECONDS = 150.0
STEP0_SECONDS = {"population": 171.0, "baseline": 27.0}
# Idle seconds of a shard's held-out overlap check and its report (same source: about 2 minutes).
SHARD_OVERHEAD_SECONDS = 120.0
# The likelihood's spreads where nothing measured them, in nats per token of the difference population mean minus
# baseline. The pilot moved the versions' CRUXEval-O means by up to 0.05 in one step (-1.95 to -2.00 against the
# warm start's -2.00, docs/experiment.md); the seed part is assumed at that size, a problem's part at four times it.
ASSUMED_SD_SEED_LOGPROB = 0.05
ASSUMED_SD_PROBLEM_LOGPROB = 0.2
LOGPROB = "-logprob"


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


def answers_per_seed(versions: int, checkpoints: int, problems: int, curve: int, start: int = 0) -> int:
    """Answers one seed's scoring takes on one benchmark: every version at the last checkpoint on every problem, the
    same versions at each earlier checkpoint on the curve's first `curve` problems (all when 0), and `start` versions
    scored once on every problem (the warm start, which every shard scores)."""
    return (versions + start) * problems + versions * (checkpoints - 1) * (min(curve, problems) if curve else problems)


def scoring_count(n: int, ids: list[str] | None = None, removed: tuple[str, ...] = ()) -> int:
    """Problems the comparison scores of `n`: all but every fifth (validation, checkpointeval.split), and with the
    problem ids, less those of a removed held-out template (heldout/<n>/<task type>/<template>)."""
    if ids is None:
        return len(split([str(i) for i in range(n)])[1])
    return len([p for p in split(ids[:n])[1] if (p.split("/") + [""] * 4)[3] not in removed])


def training_seconds(pilot: dict, budget: float, slowdown: float = 1.0, diversity: float = 0.0,
                     step0: dict | None = None) -> tuple[dict, dict]:
    """(steps, seconds) per arm to `budget` FLOPs: the pilot's steps, with `diversity` seconds after each population
    step and the arm's `step0` seconds, all at the pilot's load, divided by `slowdown`."""
    steps, seconds = {}, {}
    for arm, c in pilot["training"]["arms"].items():
        if c.get("steps"):
            steps[arm] = math.ceil(budget / c["flops_per_step"])  # an arm stops at the first boundary past the budget
            extra = diversity if arm == "population" else 0.0
            seconds[arm] = (steps[arm] * (c["seconds_per_step"] + extra) + (step0 or {}).get(arm, 0.0)) / slowdown
    return steps, seconds


def design_table(pilot: dict, metrics: dict, seeds: list[int], budgets: list[float], *, students: int,
                 checkpoints: int, curve: int, jobs: int = 1, slowdown: float = 1.0, diversity: float = 0.0,
                 step0: dict | None = None, overhead: float = 0.0, start: int = 0) -> list[dict]:
    """One row per (budget, seeds): the steps, one seed's seconds of training (per arm) and of scoring (pass@1,
    likelihood, the rest), the hours of all seeds, and each metric's MDD. `metrics` maps a metric to its `problems`
    (scored per version), `scoring` (of them in the comparison), `seconds` (per problem per version), `sd_seed` and
    `sd_problem`; the training is `training_seconds`'s, with `overhead` seconds a seed and `start` versions scored
    once on every problem."""
    rows = []
    for budget in budgets:
        steps, train = training_seconds(pilot, budget, slowdown, diversity, step0)
        score = {"pass@1": 0.0, "likelihood": 0.0, "other": overhead}
        for name, m in metrics.items():
            n = answers_per_seed(students + 1, checkpoints, m["problems"], curve, start)
            score["likelihood" if name.endswith(LOGPROB) else "pass@1"] += n * m["seconds"]
        shard = sum(train.values()) + sum(score.values())
        speed = JOBS_SPEEDUP if jobs > 1 else 1.0
        for s in seeds:
            rows.append({"budget": budget, "seeds": s, "steps": steps,
                         "shard": {"training_seconds": train, "scoring_seconds": score, "hours": shard / 3600},
                         "training_hours": s * sum(train.values()) / speed / 3600,
                         "scoring_hours": s * sum(score.values()) / speed / 3600, "hours": s * shard / speed / 3600,
                         "mdd": {name: minimal_detectable_difference(s, m["scoring"], m["sd_seed"], m["sd_problem"])
                                 for name, m in metrics.items()}})
    return rows


def pairs(values: list[str], what: str) -> dict[str, float]:
    """BENCHMARK=VALUE options."""
    out = {}
    for v in values:
        name, sep, number = v.partition("=")
        if not sep:
            raise SystemExit(f"{what}: expected BENCHMARK=VALUE, got {v!r}")
        out[name] = float(number)
    return out


def cost(pilot: dict, kind: str, benchmark: str, given: dict) -> tuple[float, str]:
    """Seconds per problem per version of `kind` (pass or likelihood) on `benchmark`, and where it came from."""
    if benchmark in given:
        return given[benchmark], "given"
    if any(o.replace(" ", "").lower() == "run.reproducible=true" for o in pilot.get("overrides", [])):
        entry = pilot["scoring"]["benchmarks"].get(benchmark, {})
        got = entry.get("seconds_per_answer") if kind == "pass" else entry.get("likelihood", {}).get("seconds_per_row")
        if got:
            return got, "pilot"
    if benchmark in TABLE_SECONDS[kind]:
        return TABLE_SECONDS[kind][benchmark], "docs/experiment.md's table (2026-12-07)"
    raise SystemExit(f"no cost of {kind} on {benchmark}: pass --{kind}-seconds {benchmark}=SECONDS")


def metric_table(args: argparse.Namespace, pilot: dict, held: dict) -> dict:
    """Each metric's problems, scoring problems, cost and spreads, with where each came from."""
    from coordinator.experiment.problemsets import likelihood_scored

    files = json.loads(args.problems.read_text())["benchmarks"] if args.problems else {}
    removed = tuple(args.removed)
    given = {"pass": pairs(args.pass_seconds, "--pass-seconds"),
             "likelihood": pairs(args.likelihood_seconds, "--likelihood-seconds")}
    sd_seed = args.sd_seed if args.sd_seed is not None else held.get("sd_seed", 0.0)
    out = {}
    for b in args.benchmarks.split(","):
        n = args.pass_problems or whole(b, args.heldout)
        ids = files.get(b, {}).get("pass")
        if ids is not None and len(ids) < n:
            raise SystemExit(f"{args.problems} has {len(ids)} pass@1 problems of {b}, not {n}")
        seconds, source = cost(pilot, "pass", b, given["pass"])
        m = {"kind": "pass@1", "problems": n, "scoring": scoring_count(n, ids, removed), "seconds": seconds,
             "seconds_from": source}
        rates = pilot["scoring"]["benchmarks"].get(b, {}).get("pass_rate")
        if b == "heldout" and held:
            m.update(sd_seed=held["sd_seed"], sd_problem=held["sd_problem"],
                     spread_from=f"measured: {args.spread}, {held['n_seeds']} seeds, {held['problems']} problems")
        elif rates:
            rate = sum(rates.values()) / len(rates)
            m.update(sd_seed=sd_seed, sd_problem=args.sd_problem if args.sd_problem is not None else math.sqrt(max(
                2 * rate * (1 - rate), 0.01)), spread_from="seed part heldout's (or --sd-seed), problem part from "
                "the pilot's pass rates (or --sd-problem): assumed, not measured over seeds")
        else:
            raise SystemExit(f"no spread for {b}: neither measured in {args.spread} nor scored by the pilot")
        out[b] = m
    for b in args.benchmarks.split(","):
        if not args.likelihood_problems or not likelihood_scored(b):
            continue
        n, ids = args.likelihood_problems, files.get(b, {}).get("likelihood")
        if ids is not None and len(ids) < n:
            raise SystemExit(f"{args.problems} has {len(ids)} likelihood problems of {b}, not {n}")
        seconds, source = cost(pilot, "likelihood", b, given["likelihood"])
        diffs = pilot["scoring"]["benchmarks"].get(b, {}).get("likelihood", {}).get("differences") or []
        measured = len(diffs) >= 2 and args.sd_problem_logprob is None
        sd_problem = statistics.stdev(diffs) if measured else (
            args.sd_problem_logprob if args.sd_problem_logprob is not None else ASSUMED_SD_PROBLEM_LOGPROB)
        sd_seed_lp = args.sd_seed_logprob if args.sd_seed_logprob is not None else ASSUMED_SD_SEED_LOGPROB
        out[b + LOGPROB] = {
            "kind": "likelihood", "problems": n, "scoring": scoring_count(n, ids, removed), "seconds": seconds,
            "seconds_from": source, "sd_seed": sd_seed_lp, "sd_problem": sd_problem,
            "spread_from": ("problem part measured by the pilot (its steps, one seed)" if measured else
                            "problem part " + ("given" if args.sd_problem_logprob is not None else "ASSUMED"))
            + "; seed part " + ("given" if args.sd_seed_logprob is not None else "ASSUMED") + ": not measured"}
    return out


def whole(benchmark: str, heldout: int) -> int:
    """Every problem of a benchmark that is not set apart (heldout: `heldout` of them)."""
    if benchmark == "heldout":
        return heldout
    from populora.evals import load_problems

    return len([x for x in load_problems(benchmark) if not x.set_apart])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m coordinator.experiment.design", description=main.__doc__)
    p.add_argument("--pilot", type=Path, required=True, help="pilot.json of coordinator.experiment.pilot")
    p.add_argument("--spread", type=Path, default=Path("docs/results"), help="an earlier multi-seed result")
    p.add_argument("--budget", type=float, action="append", default=[], help="FLOPs per arm; repeatable")
    p.add_argument("--seeds", default="3,5,8,10,20")
    p.add_argument("--students", type=int, default=4)
    p.add_argument("--checkpoints", default="0.25,0.5,0.75,1.0", help="eval.checkpoints, as fractions")
    p.add_argument("--curve", type=int, default=100, help="eval.curve_limit")
    p.add_argument("--jobs", type=int, default=1, help="seeds at once (shards: 1)")
    p.add_argument("--benchmarks", default="heldout,cruxeval-o,cruxeval-i")
    p.add_argument("--pass-problems", type=int, default=0, help="eval.pass_problems (0: every problem)")
    p.add_argument("--likelihood-problems", type=int, default=0, help="eval.likelihood_problems (0: none)")
    p.add_argument("--problems", type=Path, default=None, help="the problems.json the problems are counted from")
    p.add_argument("--removed", action="append", default=[], help="a held-out template the comparison leaves out")
    p.add_argument("--heldout", type=int, default=380, help="heldout problems without --pass-problems")
    p.add_argument("--pass-seconds", action="append", default=[], metavar="BENCHMARK=SECONDS")
    p.add_argument("--likelihood-seconds", action="append", default=[], metavar="BENCHMARK=SECONDS")
    p.add_argument("--slowdown", type=float, default=PILOT_SLOWDOWN, help="the pilot's training seconds over idle ones")
    p.add_argument("--sd-seed", type=float, default=None, help="CRUXEval pass@1; default heldout's measured one")
    p.add_argument("--sd-problem", type=float, default=None, help="CRUXEval pass@1; default from the pilot's rates")
    p.add_argument("--sd-seed-logprob", type=float, default=None,
                   help=f"the likelihood's seed part (default assumed: {ASSUMED_SD_SEED_LOGPROB})")
    p.add_argument("--sd-problem-logprob", type=float, default=None,
                   help=f"default the pilot's, else assumed: {ASSUMED_SD_PROBLEM_LOGPROB}")
    p.add_argument("--target", type=float, default=0.03, help="a pass@1 difference to find the seeds for")
    p.add_argument("--target-logprob", type=float, default=0.05, help="a likelihood difference to find the seeds for")
    p.add_argument("--out", type=Path, default=None, help="the designs as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    """Print the designs (module docstring), with the command at the top, and with --out write them as JSON."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    pilot = json.loads(args.pilot.read_text())
    measured = spread(args.spread)
    metrics = metric_table(args, pilot, measured.get("heldout", {}))
    seeds = [int(s) for s in args.seeds.split(",")]
    fractions = [float(f) for f in args.checkpoints.split(",")]
    rows = design_table(pilot, metrics, seeds, args.budget or [6e13], students=args.students,
                        checkpoints=len(fractions), curve=args.curve, jobs=args.jobs, slowdown=args.slowdown,
                        diversity=DIVERSITY_SECONDS, step0=STEP0_SECONDS, overhead=SHARD_OVERHEAD_SECONDS, start=1)
    for name, m in metrics.items():
        m["target"] = args.target_logprob if name.endswith(LOGPROB) else args.target
        m["seeds_for_target"] = seeds_needed(m["target"], m["scoring"], m["sd_seed"], m["sd_problem"])
    inputs = {k: v for k, v in vars(args).items() if k != "out"}
    inputs = {k: str(v) if isinstance(v, Path) else v for k, v in inputs.items()}
    costs = {"slowdown": args.slowdown, "diversity_seconds": DIVERSITY_SECONDS, "step0_seconds": STEP0_SECONDS,
             "shard_overhead_seconds": SHARD_OVERHEAD_SECONDS, "table_seconds": TABLE_SECONDS}
    out = {"inputs": inputs, "spread": measured, "costs": costs, "metrics": metrics, "designs": rows}
    print(report(argv, out, pilot))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def report(argv: list[str], out: dict, pilot: dict) -> str:
    """The designs as text: the command, the inputs and where each came from, a line per design."""
    a, c = out["inputs"], out["costs"]
    arms = pilot["training"]["arms"]
    steps = ", ".join(f"{k} {v['seconds_per_step']:.0f} s for {v['flops_per_step']:.3g} FLOPs"
                      for k, v in arms.items() if v.get("steps"))
    lines = [f"$ python -m coordinator.experiment.design {shlex.join(argv)}",
             f"spread measured in {a['spread']}: {json.dumps(out['spread'])}",
             f"training, idle: {a['pilot']}'s steps ({steps}, at load {pilot['training']['load']['mean']}) with "
             f"{c['diversity_seconds']:.0f} s of weight diversity a population step and step 0 "
             f"({c['step0_seconds']}), divided by {c['slowdown']}; per shard {c['shard_overhead_seconds']:.0f} s of "
             "overlap check and report",
             f"scoring: {a['students']} students and the baseline at checkpoints {a['checkpoints']} (the curve on "
             f"the first {a['curve']} problems), the warm start once; removed held-out templates: "
             f"{', '.join(a['removed']) or 'none'}",
             "metric: problems (in the comparison), seconds per problem per version, sd_seed / sd_problem, source"]
    for name, m in out["metrics"].items():
        lines.append(f"  {name} ({m['kind']}): {m['problems']} ({m['scoring']}), {m['seconds']} s "
                     f"({m['seconds_from']}), {m['sd_seed']:.4f} / {m['sd_problem']:.4f} ({m['spread_from']})")
    for r in out["designs"]:
        s = r["shard"]
        train = ", ".join(f"{k} {v / 60:.0f}" for k, v in s["training_seconds"].items())
        score = ", ".join(f"{k} {v / 60:.0f}" for k, v in s["scoring_seconds"].items())
        mdd = ", ".join(f"{b} {v:.3f}" for b, v in r["mdd"].items())
        lines.append(f"budget {r['budget']:.3g}, {r['seeds']} seeds: steps {r['steps']}; a shard {s['hours']:.2f} h "
                     f"idle (training minutes: {train}; scoring minutes: {score}); in all {r['hours']:.1f} h "
                     f"(training {r['training_hours']:.1f} h, scoring {r['scoring_hours']:.1f} h); smallest "
                     f"difference found at 80% power: {mdd}")
    lines.append("seeds for a target difference at 80% power: " + ", ".join(
        f"{b} {m['target']}: {m['seeds_for_target']}" for b, m in out["metrics"].items()))
    assumed = [b for b, m in out["metrics"].items() if "ASSUMED" in m["spread_from"] or "assumed" in m["spread_from"]]
    if assumed:
        lines.append(f"assumed, not measured: the spreads of {', '.join(assumed)} (above)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
