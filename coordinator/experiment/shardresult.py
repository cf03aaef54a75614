"""An experiment's result computed from its committed shards (coordinator/experiment/shards.py): whatever shards
are under <results>/<id>/shards/, read as the comparison reads a whole experiment (the arms' metrics, evaluation
files and dynamics), written as <results>/<id>/scores.json and README.md, each saying how many shards and which
seeds it is made of. A seed counts in the comparison when both its arms are there (one shard of the seed, or one of
each arm); the shards must be of one experiment (the same config, budget and problem sets), else nothing is written.

    python -m coordinator.experiment.shardresult docs/results/<id>     # the result again, from the shards there
"""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from pathlib import Path
from statistics import mean

from coordinator.experiment.comparison import ArmRun, ComparisonInput, comparison_scores
from coordinator.experiment.evalfiles import read_shard_evals, write_json
from coordinator.experiment.headline import is_likelihood
from coordinator.record.births import summarise
from populora.config import ConfigError, config_from_yaml

SHARD_FILE = "shard.json"  # as coordinator/experiment/shards.py writes it
WIDTH = 120  # the docs' line width
SAME = ("experiment_id", "budget_flops", "max_steps", "limit", "samples", "problem_sets")


def read_shards(results: Path) -> list[tuple[Path, dict]]:
    """(directory, shard.json) of every shard under <results>/shards/, by name."""
    root = results / "shards"
    found = sorted(root.glob(f"*/{SHARD_FILE}")) if root.is_dir() else []
    return [(p.parent, json.loads(p.read_text())) for p in found]


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _check(shards: list[tuple[Path, dict]]) -> None:
    """The shards are of one experiment and no arm of a seed is in two of them; ConfigError naming the first that
    is not."""
    first_dir, first = shards[0]
    config = (first_dir / "config.yaml").read_text()
    seen: dict[tuple[str, int], str] = {}
    for d, s in shards:
        differs = [k for k in SAME if s.get(k) != first.get(k)]
        if (d / "config.yaml").read_text() != config:
            differs.append("config")
        if differs:
            raise ConfigError(f"shard {s['shard']} differs from shard {first['shard']} in {', '.join(differs)}: the "
                              f"shards of {first_dir.parent} must be of one experiment")
        for arm in s["arms"]:
            if (arm, s["seed"]) in seen:
                raise ConfigError(f"the {arm} arm of seed {s['seed']} is in shards {seen[(arm, s['seed'])]} and "
                                  f"{s['shard']}: remove one")
            seen[(arm, s["seed"])] = s["shard"]


def combine(results: Path) -> dict | None:
    """scores.json and README.md of `results` from its shards (module docstring); None when it has none."""
    shards = read_shards(results)
    if not shards:
        return None
    _check(shards)
    first_dir, first = shards[0]
    cfg = config_from_yaml((first_dir / "config.yaml").read_text(), f"{first_dir / 'config.yaml'}")
    arms, metrics, evals, dynamics, births = [], {}, {}, {}, []
    for d, s in shards:
        for name, run_id in s["arms"].items():
            arms.append(ArmRun(name, s["seed"], run_id, d / "metrics"))
            metrics[run_id] = _rows(d / "metrics" / f"{run_id}.metrics.jsonl")
            kept = read_shard_evals(d, run_id)
            evals[run_id] = {b: kept[b] for b in s["benchmarks"] if b in kept}
            if (p := d / "dynamics" / f"{run_id}.json").exists():
                dynamics[run_id] = json.loads(p.read_text())
        births += json.loads((d / "births.json").read_text())["births"] if (d / "births.json").exists() else []
    seeds = sorted({a.seed for a in arms})
    exp = ComparisonInput(first["experiment_id"], results, cfg, seeds, list(first["benchmarks"]), first["limit"],
                          first["samples"], sorted(arms, key=lambda a: (a.seed, a.name != "population")))
    scores, _ = comparison_scores(exp, metrics, evals, dynamics)
    complete = sorted({a.seed for a in arms if a.name == "population"} & {a.seed for a in arms if a.name == "baseline"})
    scores["shards"] = {"count": len(shards), "names": [s["shard"] for _, s in shards], "seeds": seeds,
                        "complete_seeds": complete,
                        "each": {s["shard"]: {k: s.get(k) for k in ("seed", "arms", "steps", "commit", "modified",
                                                                     "machine", "seconds", "outcomes")}
                                 for _, s in shards}}
    scores["births"] = summarise(births)
    write_json(results / "scores.json", scores)
    (results / "README.md").write_text(readme(scores, shards))
    return scores


# ---------------------------------------------------------------- README.md

def _f(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _line(c: dict) -> str:
    t = c.get("seed_t") or {}
    return (f"{_f(c.get('population_mean'))} | {_f(c.get('baseline'))} | {_f(c.get('difference'))} "
            f"[{_f(c.get('low'))}, {_f(c.get('high'))}] | [{_f(t.get('low'))}, {_f(t.get('high'))}]")


def _wrap(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def _command_lines(command: str) -> list[str]:
    """A shell command in lines of at most WIDTH columns, continued with backslashes."""
    lines = textwrap.wrap(command, WIDTH - 2, break_long_words=False, break_on_hyphens=False)
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def readme(scores: dict, shards: list[tuple[Path, dict]]) -> str:
    """The result's README: how many shards it is made of, the comparison at the last checkpoint and at every
    checkpoint for pass@1 and for the likelihood, each seed's difference, and each shard's machine and times."""
    sh = scores["shards"]
    first = shards[0][1]
    command = " ".join(shlex.quote(a) for a in first["command"]).replace(
        f"--shard {first['shard'].replace('-', ':', 1)}", "--shard SEED")
    out = [f"# Experiment {scores['experiment_id']}", "",
           _wrap(f"Computed from {sh['count']} shard{'s' if sh['count'] != 1 else ''} ({', '.join(sh['names'])}): "
                 f"seeds {', '.join(map(str, sh['seeds']))}, of which {len(sh['complete_seeds'])} with both arms "
                 f"({', '.join(map(str, sh['complete_seeds'])) or 'none yet'}) enter the comparison. Written by "
                 "`python -m coordinator.experiment.shardresult` from the files under `shards/` alone; every shard "
                 "writes it again. A shard:"), "", "```bash", *_command_lines(command), "```", "",
           _wrap(f"Budget {scores['budget']['flops']:.3g} FLOPs per arm; pass@1 is greedy; `-logprob` is the mean "
                 "log-probability per token of each problem's reference answer in the students' training prompt "
                 "(higher is better). The difference is the population mean minus the baseline, with a 95% "
                 "hierarchical bootstrap interval (seeds, then problem families) and the t interval over seeds."), ""]
    cps = scores.get("checkpoints", {})
    if cps:
        out += ["## At the last checkpoint", "",
                "| benchmark | population | baseline | difference [95%] | t over seeds | per seed |", "|---|---|---|---|---|---|"]
        for b, rows in cps.items():
            c = next((c for c in reversed(rows) if "difference" in c), None)
            if c is not None:
                per = ", ".join(f"{s}: {_f(v['difference'])}" for s, v in c["per_seed"].items())
                out.append(f"| {b} | {_line(c)} | {per} |")
        out += ["", "## Every checkpoint", "", "| benchmark | checkpoint | population | baseline | difference [95%] | "
                "t over seeds |", "|---|---|---|---|---|---|"]
        for b, rows in cps.items():
            out += [f"| {b} | {c['fraction']:.0%} | {_line(c)} |" for c in rows if "difference" in c]
    else:
        out += ["No seed has both arms yet: no comparison.", ""]
    summary = scores.get("summary", {})
    likely = [b for b in scores.get("benchmarks", []) if is_likelihood(b)]
    if likely and summary.get("warm_start"):
        out += ["", _wrap("The warm start every arm began from: " + ", ".join(
            f"{b} {_f(summary['warm_start'].get(b))}" for b in scores["benchmarks"]) + ".")]
    if scores.get("births"):
        out += ["", _wrap("Births (children's first-step rate minus the parent's): " + "; ".join(
            f"{op} {role} n={v['n']} {_f(v['difference'])}" for op, roles in sorted(scores["births"].items())
            for role, v in sorted(roles.items())) + ".")]
    out += ["", "## Shards", "", "| shard | steps | training s | scoring s | commit |", "|---|---|---|---|---|"]
    machines = []
    for name, s in sh["each"].items():
        m = s["machine"]
        steps = ", ".join(f"{arm} {s['steps'][run]}" for arm, run in s["arms"].items())
        train = ", ".join(f"{arm} {v:.0f}" for arm, v in s["seconds"]["training"].items())
        out.append(f"| {name} | {steps} | {train} | {s['seconds']['scoring']:.0f} | "
                   f"{(s['commit'] or '-')[:10]}{' (modified)' if s['modified'] else ''} |")
        flags = "AVX-512" if m["avx512"] else "AVX2" if m["avx2"] else "no AVX2"
        machines.append(f"{name}: {m['cpu']}, {m['cores']} cores, {flags}, torch {m['torch']}")
    out += ["", _wrap("Machines: " + "; ".join(machines) + ".")]
    seconds = [sum(s["seconds"]["training"].values()) + s["seconds"]["scoring"] for s in sh["each"].values()]
    out += ["", _wrap(f"A shard took {mean(seconds) / 3600:.2f} hours of its machine on average "
                      f"({', '.join(f'{x / 3600:.2f}' for x in seconds)}).")]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m coordinator.experiment.shardresult RESULTS_DIR (docs/results/<experiment id>)",
              file=sys.stderr)
        return 2
    try:
        scores = combine(Path(args[0]))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if scores is None:
        print(f"error: no shard under {Path(args[0]) / 'shards'}", file=sys.stderr)
        return 2
    n = scores["shards"]["count"]
    print(f"{Path(args[0]) / 'README.md'}: {n} shard{'s' if n != 1 else ''}, seeds {scores['shards']['seeds']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
