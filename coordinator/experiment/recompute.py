"""`python -m coordinator.experiment.recompute docs/results/<id>`: an independent check of a result made of shards.

It is one file that imports nothing of the project, only numpy and the standard library, so that a mistake in the
comparison's code cannot vouch for itself here (and so it is longer than the tree's other files: docs/architecture.md).
The result a shard writes (`scores.json` and `README.md`, coordinator/experiment/shardresult.py) is computed again
from the committed shard files alone (`shards/<shard>/shard.json`, `config.yaml`, `metrics/`, `evals/`, `births.json`,
and the experiment's `heldout_overlap.json`), from the definitions docs/experiment.md gives. Per benchmark (pass@1
and each `<benchmark>-logprob` likelihood) and compute checkpoint: each arm's step there, the population mean, the
baseline, their difference, each seed's values and difference, the t interval over seeds (its quantile from the
exact finite series of Student's t distribution for an integer number of degrees of freedom, by bisection), the
paired counts, the spread a design reads, the best and worst members chosen on the validation problems, and for the
generated benchmark the families left out, the table per family and the difference without each family; then the
warm start's scores, the children's starts per operator and role, and each shard's steps and the digest of its
per-problem outcomes (so an evaluation file changed after the shard was exported shows).

The two bootstrap intervals (the hierarchical one over seeds then families, and the one over (seed, problem) pairs)
are drawn again as the comparison draws them: 10,000 resamples from numpy's `default_rng(0)`, in the same order. They
agree exactly or they are reported as disagreeing; nothing is taken from the committed file.

With `scores.json` in the directory, every number is compared with the committed one (float noise aside: 1e-9 of the
larger, at least 1e-9), and with `README.md`, every number its tables and lines print (to the digits it prints); each
number that disagrees is named and the exit status is 1. Not recomputed: the dynamics (trends, oscillation, program
shapes), the arms' training numbers and the per-arm means, the evaluation FLOPs, the shards' times and machines (copied
from shard.json, not computed).

    python -m coordinator.experiment.recompute docs/results/<id> [--json]
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, stdev, variance

import numpy as np

# What the comparison defines (docs/experiment.md, "Shards" and "scores.json"); restated here, not imported.
SHARD_FILE = "shard.json"
OVERLAP_FILE = "heldout_overlap.json"
SAME = ("experiment_id", "budget_flops", "max_steps", "limit", "samples", "problem_sets")  # one experiment's shards
WARM = "warm start"  # the warm start's label in an evaluation file
HELDOUT = "heldout"  # the generated benchmark: problems heldout/<k>/<task type>/<template>, families template x type
LOGPROB = "-logprob"  # a likelihood score's suffix
VALIDATION_EVERY = 5  # every 5th problem of a file (the 5th, 10th, ...) chooses the best and worst members
SOLVED_AT = 0.5  # a pass value counted as solved in the paired counts
FEW_SEEDS = 5  # below this many seeds a checkpoint says few_seeds
REL_TOL = 1e-12  # a step's compute this far past a checkpoint still stands at it
CONFIDENCE = 0.95
RESAMPLES = 10_000  # each bootstrap's resamples, drawn from default_rng(GENERATOR_SEED)
GENERATOR_SEED = 0
SEED_ROWS = 1_000  # the hierarchical bootstrap draws its resamples this many at a time
PAIR_CELLS = 2_000_000  # the pairs bootstrap draws at most this many indices at a time
TOLERANCE = 1e-9  # float noise: relative to the larger number, and absolute below 1
ARM_PAIRS = {"checkpoints": ("population", "baseline"), "checkpoints_mixed_rank": ("mixed-rank", "population")}
COMPARED = ("experiment_id", "seeds", "benchmarks", *ARM_PAIRS, "summary", "births", "shards")
WHOLE = ("checkpoints", "checkpoints_mixed_rank", "summary.warm_start", "births")  # every key of these is checked
LABELS = ("interval", "confidence")  # a checkpoint's words, not numbers: not compared


class InputError(Exception):
    """The directory does not hold a result made of shards of one experiment."""


@dataclass(frozen=True)
class Arm:
    name: str
    seed: int
    run_id: str


@dataclass
class Shards:
    """What the shard files say: the experiment, its arms (by seed, the population first), each arm's metrics rows
    and evaluation files, the births, the eval settings of the config and the templates left out."""

    experiment_id: str
    benchmarks: list[str]
    arms: list[Arm]
    metrics: dict[str, list[dict]]
    evals: dict[str, dict[str, dict]]
    births: list[dict]
    fractions: list[float]
    members: str
    removed: dict[str, list[str]]
    each: list[tuple[str, dict]]  # (shard name, shard.json)
    outcomes: dict[str, str]  # {shard name: the digest of its evaluation files' per-problem outcomes}


# ---------------------------------------------------------------- reading the files

def _json(path: Path):
    return json.loads(path.read_text())


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _scalar(text: str):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def eval_section(config_text: str) -> dict:
    """The keys of the config's top-level `eval:` block as the run stored it (YAML in block style: `  key: value`, a
    list as `  - item` lines under its key, or `[a, b]`); nested blocks are skipped."""
    out: dict = {}
    inside, key = False, None
    for line in config_text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            inside, key = line.rstrip() == "eval:", None
            continue
        text = line.strip()
        if not inside:
            continue
        if text.startswith("- ") and key is not None:
            out[key].append(_scalar(text[2:]))
        elif indent == 2 and ":" in text:
            name, _, value = text.partition(":")
            value = value.strip()
            key = None
            if not value:
                out[name], key = [], name
            elif value.startswith("[") and value.endswith("]"):
                out[name] = [_scalar(v) for v in value[1:-1].split(",") if v.strip()]
            else:
                out[name] = _scalar(value)
    return out


def read(results: Path) -> Shards:
    """Every shard under <results>/shards/ (by name), refused unless they are of one experiment with no arm of a seed
    in two of them."""
    root = results / "shards"
    found = sorted(root.glob(f"*/{SHARD_FILE}")) if root.is_dir() else []
    if not found:
        raise InputError(f"no shard under {root} (shards/<shard>/{SHARD_FILE})")
    shards = [(p.parent, _json(p)) for p in found]
    first_dir, first = shards[0]
    config = (first_dir / "config.yaml").read_text()
    seen: dict[tuple[str, int], str] = {}
    for d, s in shards:
        differs = [k for k in SAME if s.get(k) != first.get(k)]
        differs += ["config"] if (d / "config.yaml").read_text() != config else []
        if differs:
            raise InputError(f"shard {s['shard']} differs from shard {first['shard']} in {', '.join(differs)}")
        for arm in s["arms"]:
            if (arm, s["seed"]) in seen:
                raise InputError(f"the {arm} arm of seed {s['seed']} is in shards {seen[(arm, s['seed'])]} and "
                                 f"{s['shard']}")
            seen[(arm, s["seed"])] = s["shard"]
    settings = eval_section(config)
    if not isinstance(settings.get("checkpoints"), list) or "members" not in settings:
        raise InputError(f"{first_dir / 'config.yaml'}: no eval.checkpoints list or eval.members")
    arms, metrics, evals, births = [], {}, {}, []
    for d, s in shards:
        for name, run_id in s["arms"].items():
            arms.append(Arm(name, int(s["seed"]), run_id))
            metrics[run_id] = _jsonl(d / "metrics" / f"{run_id}.metrics.jsonl")
            kept = _json(d / "evals" / f"{run_id}.json")["benchmarks"] if (d / "evals" / f"{run_id}.json").exists() else {}
            evals[run_id] = {b: kept[b] for b in s["benchmarks"] if b in kept}
        if (d / "births.json").exists():
            births += _json(d / "births.json")["births"]
    arms.sort(key=lambda a: (a.seed, a.name != "population"))  # stable: otherwise in shard order
    overlap = results / OVERLAP_FILE
    removed = {k: list(v) for k, v in _json(overlap)["shared"].items() if v} if overlap.exists() else {}
    return Shards(first["experiment_id"], list(first["benchmarks"]), arms, metrics, evals, births,
                  [float(f) for f in settings["checkpoints"]], str(settings["members"]), removed,
                  [(s["shard"], s) for _, s in shards], {s["shard"]: outcomes(d / "evals") for d, s in shards})


def outcomes(evals: Path) -> str:
    """sha256 of a shard's per-problem outcomes as shard.json digests them: {<run>.<benchmark>.json: {label: {problem:
    passed, or the summed log-probability}}} over its evaluation files, as key-sorted JSON."""
    found = {}
    for p in sorted(evals.glob("*.json")):  # evals/<run>.json: {"run", "benchmarks": {benchmark: scores}}
        kept = _json(p)
        for b, body in kept["benchmarks"].items():
            found[f"{kept['run']}.{b}.json"] = {r["label"]: {x["id"]: x["logprob"] if "logprob" in x else x["passed"]
                                                             for x in r["problems"]} for r in body.get("results", [])}
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- the t distribution

def t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with an integer df >= 1, from its finite series in theta = atan(t / sqrt(df)):
    odd df, (2/pi)(theta + sin(theta)(cos(theta) + 2/3 cos^3(theta) + ... up to cos^(df-2))); even df,
    sin(theta)(1 + 1/2 cos^2(theta) + 3/8 cos^4(theta) + ... up to cos^(df-2))."""
    theta = math.atan2(abs(t), math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    total = 0.0
    if df % 2:
        term = c
        for k in range((df - 1) // 2):
            total += term
            term *= (2 * k + 2) / (2 * k + 3) * c * c
        return 2.0 / math.pi * (theta + s * total)
    term = 1.0
    for k in range(df // 2):
        total += term
        term *= (2 * k + 1) / (2 * k + 2) * c * c
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p, p > 0.5, by bisection on the angle theta of t_central (t = sqrt(df) tan(theta))."""
    central = 2.0 * p - 1.0
    low, high = 0.0, math.pi / 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_central(math.sqrt(df) * math.tan(mid), df) < central:
            low = mid
        else:
            high = mid
        if high - low < 1e-15:
            break
    return math.sqrt(df) * math.tan((low + high) / 2.0)


# ---------------------------------------------------------------- the comparison at one checkpoint

def measured(benchmark: str) -> str:
    return benchmark[: -len(LOGPROB)] if benchmark.endswith(LOGPROB) else benchmark


def family(benchmark: str, problem: str) -> str:
    """template x task type of a generated problem; a published benchmark's problem is a family of its own."""
    if measured(benchmark) != HELDOUT:
        return problem
    parts = problem.split("/")
    return f"{parts[3]} x {parts[2]}"


def left_in(benchmark: str, problems: list[str], removed: dict) -> list[str]:
    if measured(benchmark) != HELDOUT or not removed:
        return list(problems)
    return [p for p in problems if p.split("/")[3] not in removed]


def _quantiles(stats: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def hierarchical_interval(seeds: list[dict[str, list[float]]]) -> tuple[float, float]:
    """Each resample draws as many seeds as there are (with replacement), each drawn seed as many of its families
    as it has; its value is the mean over the drawn seeds of the drawn families' problems' mean. The draws: per block
    of SEED_ROWS resamples, first which seed fills each slot, then per slot and seed (in order) the families of the
    resamples that drew that seed there."""
    sums = [np.asarray([np.asarray(v, dtype=np.float64).sum() for v in fams.values()]) for fams in seeds]
    sizes = [np.asarray([float(len(v)) for v in fams.values()]) for fams in seeds]
    rng = np.random.default_rng(GENERATOR_SEED)
    n = len(seeds)
    stats = np.empty(RESAMPLES)
    for start in range(0, RESAMPLES, SEED_ROWS):
        rows = min(SEED_ROWS, RESAMPLES - start)
        slot_seed = rng.integers(0, n, size=(rows, n))
        value = np.empty((rows, n))
        for slot in range(n):
            for i in range(n):
                hit = slot_seed[:, slot] == i
                if not hit.any():
                    continue
                drawn = rng.integers(0, sums[i].size, size=(int(hit.sum()), sums[i].size))
                value[hit, slot] = sums[i][drawn].sum(axis=1) / sizes[i][drawn].sum(axis=1)
        stats[start:start + rows] = value.mean(axis=1)
    return _quantiles(stats)


def pairs_interval(differences: list[float]) -> tuple[float, float]:
    """The (seed, problem) pairs resampled with replacement, as if independent."""
    d = np.asarray(differences, dtype=np.float64)
    rng = np.random.default_rng(GENERATOR_SEED)
    stats = np.empty(RESAMPLES)
    step = max(1, PAIR_CELLS // d.size)
    for start in range(0, RESAMPLES, step):
        stop = min(RESAMPLES, start + step)
        stats[start:stop] = d[rng.integers(0, d.size, size=(stop - start, d.size))].mean(axis=1)
    return _quantiles(stats)


def headline(benchmark: str, pop: dict[int, dict[str, list[float]]], base: dict[int, dict[str, float]],
             warm: dict[str, float] | None, removed: dict[str, list[str]]) -> dict:
    """The numbers of one benchmark at one checkpoint, from each seed's members' and baseline's value per scoring
    problem."""
    seeds = sorted(pop)
    keep = {s: left_in(benchmark, list(pop[s]), removed) for s in seeds}
    if not all(keep.values()):
        raise InputError(f"{benchmark}: no problem is left once the families of {sorted(removed)} are left out")
    diff = {s: {p: mean(pop[s][p]) - base[s][p] for p in keep[s]} for s in seeds}
    by_family: dict[int, dict[str, list[float]]] = {}
    for s in seeds:
        by_family[s] = {}
        for p in keep[s]:
            by_family[s].setdefault(family(benchmark, p), []).append(diff[s][p])
    per_seed = {s: {"population": mean(mean(pop[s][p]) for p in keep[s]), "baseline": mean(base[s][p] for p in keep[s]),
                    "difference": math.fsum(diff[s].values()) / len(keep[s]), "problems": len(keep[s])}
                for s in seeds}
    values = [per_seed[s]["difference"] for s in seeds]
    t = {"mean": mean(values), "low": None, "high": None, "sd": None, "n_seeds": len(seeds)}
    if len(seeds) > 1:
        t["sd"] = stdev(values)
        half = t_quantile(0.5 + CONFIDENCE / 2.0, len(seeds) - 1) * t["sd"] / math.sqrt(len(seeds))
        t["low"], t["high"] = t["mean"] - half, t["mean"] + half
    low, high = hierarchical_interval([by_family[s] for s in seeds])
    pairs = [diff[s][p] for s in seeds for p in keep[s]]
    pairs_low, pairs_high = pairs_interval(pairs)
    out = {"difference": mean(values), "low": low, "high": high, "per_seed": per_seed, "seed_t": t,
           "n_pairs": len(pairs), "n_families": len({f for s in seeds for f in by_family[s]}),
           "few_seeds": len(seeds) < FEW_SEEDS, "pairs_interval": {"low": pairs_low, "high": pairs_high},
           "counts": None if benchmark.endswith(LOGPROB) else _counts(pop, base, keep),
           "population_mean": mean(v["population"] for v in per_seed.values()),
           "baseline": mean(v["baseline"] for v in per_seed.values())}
    if len(seeds) > 1 and all(len(keep[s]) > 1 for s in seeds):
        within = mean(variance(diff[s].values()) for s in seeds)
        size = mean(len(keep[s]) for s in seeds)
        between = variance(values)
        out["variance"] = {"sd_seed": math.sqrt(max(0.0, between - within / size)), "sd_problem": math.sqrt(within),
                           "sd_seed_means": math.sqrt(between)}
    if measured(benchmark) == HELDOUT:
        every = [(s, p) for s in seeds for p in pop[s]]
        out["removed"] = sorted({family(benchmark, p) for _, p in every if p.split("/")[3] in removed})
        out["removed_because"] = {k: list(v) for k, v in removed.items()}
        out["families"] = _families(benchmark, pop, base, warm, removed, every)
        names = sorted({f for s in seeds for f in by_family[s]})
        out["leave_one_out"] = {}
        for f in names if len(names) > 1 else []:
            without = [[x for g, xs in by_family[s].items() if g != f for x in xs] for s in seeds]
            out["leave_one_out"][f] = mean(math.fsum(xs) / len(xs) for xs in without if xs)
    return out


def _counts(pop: dict, base: dict, keep: dict) -> dict:
    """Each member against its seed's baseline on each scoring problem, solved at SOLVED_AT."""
    counts = {"both": 0, "only_population": 0, "only_baseline": 0, "neither": 0}
    for s, problems in keep.items():
        for p in problems:
            b = base[s][p] >= SOLVED_AT
            for m in pop[s][p]:
                key = ("both" if b else "only_population") if m >= SOLVED_AT else ("only_baseline" if b else "neither")
                counts[key] += 1
    return counts


def _families(benchmark: str, pop: dict, base: dict, warm: dict | None, removed: dict, every: list) -> list[dict]:
    """One row per family over every scoring problem (the left-out families too), each a mean over seeds and
    problems."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for s, p in every:
        groups.setdefault(family(benchmark, p), []).append((s, p))
    rows = []
    for name in sorted(groups):
        where = groups[name]
        population = mean(mean(pop[s][p]) for s, p in where)
        baseline = mean(base[s][p] for s, p in where)
        warm_values = [warm[p] for _, p in where if warm and p in warm]
        rows.append({"family": name, "problems": len(where) // max(1, len(pop)), "population": population,
                     "baseline": baseline, "warm_start": mean(warm_values) if warm_values else None,
                     "difference": population - baseline, "removed": list(removed.get(name.split(" x ")[0], []))})
    return rows


# ---------------------------------------------------------------- the checkpoints of one benchmark

def _values(body: dict) -> tuple[list[str], dict[str, dict[str, float]]]:
    """A file's problem ids in its order (its longest result's) and {label: {problem: value}}: pass@1 passed / n, a
    likelihood its `value`."""
    results = body.get("results", [])
    longest = max(results, key=lambda r: len(r["problems"]))["problems"] if results else []
    return [p["id"] for p in longest], {r["label"]: {p["id"]: p["value"] if "value" in p else p["passed"] / p["n"]
                                                     for p in r["problems"]} for r in results}


def _standing(rows: list[dict], at: float) -> dict:
    """The arm's last step whose charged compute is not past `at`, its compute and the gap."""
    flops = [float(int(r.get("compute_cumulative", {}).get("budget_flops", 0))) for r in rows]
    i = bisect.bisect_right(flops, at * (1.0 + REL_TOL)) - 1
    if i < 0:
        return {"step": None, "flops": None, "gap": None}
    return {"step": rows[i]["step"], "flops": flops[i], "gap": at - flops[i]}


def _members(rows: list[dict], step: int | None, members: str) -> dict[str, int] | None:
    """{adapter: version} of the scored members after `step` (teachers left out when eval.members is students); None
    at step 0, where every member is the warm start."""
    if step is None or step < 1:
        return None
    row = next(r for r in rows if r["step"] == step)
    return {a: m["version"] for a, m in sorted(row.get("population", {}).items())
            if members == "all" or m.get("role") != "teacher"}


def _state(values: dict, population: dict | None, warm: dict | None) -> dict | None:
    if population is None:
        return None if warm is None else {WARM: warm}
    got = {a: values.get(f"{a}@v{v}") for a, v in population.items()}
    return None if any(v is None for v in got.values()) else got


def benchmark_checkpoints(data: Shards, benchmark: str, pair: tuple[str, str], seeds: list[int],
                          files: dict[tuple[str, int], dict], budget: float) -> list[dict]:
    first, second = pair
    rows = {(a.name, a.seed): data.metrics[a.run_id] for a in data.arms}
    warm = None
    for body in files.values():
        if WARM in (labels := _values(body)[1]):
            warm = labels[WARM]
            break
    out = []
    for fraction in data.fractions:
        at = fraction * budget
        where, pop, base, best, worst = {}, {}, {}, [], []
        for s in seeds:
            where[s] = {a: _standing(rows[(a, s)], at) for a in pair}
            if (first, s) not in files or (second, s) not in files:
                continue
            ids, first_values = _values(files[(first, s)])
            second_values = _values(files[(second, s)])[1]
            one = _state(first_values, _members(rows[(first, s)], where[s][first]["step"], data.members), warm)
            two = _state(second_values, _members(rows[(second, s)], where[s][second]["step"], data.members), warm)
            if not one or not two:
                continue
            answered = set.intersection(*(set(v) for v in [*one.values(), *two.values()]))
            validation = [p for i, p in enumerate(ids) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1
                          and p in answered]
            scoring = [p for i, p in enumerate(ids) if i % VALIDATION_EVERY != VALIDATION_EVERY - 1 and p in answered]
            pop[s] = {p: [m[p] for m in one.values()] for p in scoring}
            base[s] = {p: mean(m[p] for m in two.values()) for p in scoring}
            validation, scoring = (left_in(benchmark, x, data.removed) for x in (validation, scoring))
            if validation and scoring:
                score = {m: mean(v[p] for p in validation) for m, v in one.items()}
                ranked = sorted(score, key=lambda m: (-score[m], m))
                best.append(mean(one[ranked[0]][p] for p in scoring))
                worst.append(mean(one[ranked[-1]][p] for p in scoring))
        row = {"fraction": fraction, "flops": at, "arms": where, "seeds": sorted(pop)}
        if pop:
            row.update(headline(benchmark, pop, base, warm, data.removed))
            row.update({"best_member": mean(best) if best else None, "worst_member": mean(worst) if worst else None})
        out.append(row)
    return out


def section(data: Shards, pair: tuple[str, str]) -> dict[str, list[dict]]:
    """{benchmark: its checkpoints} over the seeds whose two arms both have metrics, for each benchmark whose files
    of those arms were scored at one compute budget."""
    has = {(a.name, a.seed) for a in data.arms if data.metrics[a.run_id]}
    seeds = [s for s in sorted({a.seed for a in data.arms}) if (pair[0], s) in has and (pair[1], s) in has]
    out = {}
    for b in data.benchmarks:
        files = {(a.name, a.seed): data.evals[a.run_id][b] for a in data.arms
                 if a.name in pair and b in data.evals[a.run_id] and data.evals[a.run_id][b].get("budget")}
        budgets = {f["budget"] for f in files.values()}
        if seeds and len(budgets) == 1:
            out[b] = benchmark_checkpoints(data, b, pair, seeds, files, budgets.pop())
    return out


# ---------------------------------------------------------------- the rest of the result

def warm_start(data: Shards) -> dict[str, float | None]:
    """Each benchmark's score of the warm start (the first arm whose file scored it): pass@1 as the mean of passed /
    n over its problems, a likelihood as the mean of their values."""
    out: dict[str, float | None] = {}
    for b in data.benchmarks:
        out[b] = None
        for a in data.arms:
            if not data.metrics[a.run_id] or b not in data.evals[a.run_id]:
                continue
            warm = [r for r in data.evals[a.run_id][b].get("results", [])
                    if (r.get("adapter_id") or "").endswith(".warm")]
            if warm:
                problems = warm[-1]["problems"]
                got = [p["value"] if "value" in p else p["passed"] / p["n"] for p in problems]
                out[b] = mean(got) if got else None
                break
    return out


def births(data: Shards) -> dict:
    """{operator: {role: n and the means of the parent's rate, the child's, their difference and the relative
    change}} over the children whose two rates are known."""
    groups: dict[str, dict[str, list[dict]]] = {}
    for b in data.births:
        if b.get("difference") is not None:
            groups.setdefault(b["operator"], {}).setdefault(b["role"], []).append(b)
    return {op: {role: {"n": len(bs), **{k: mean(b[k] for b in bs) for k in ("parent_rate", "child_rate",
                                                                               "difference", "relative_change")}}
                 for role, bs in roles.items()} for op, roles in groups.items()}


def recompute(results: Path) -> dict:
    """Every number of the module docstring, in scores.json's layout (JSON keys as strings)."""
    data = read(results)
    seeds = sorted({a.seed for a in data.arms})
    names = {a.name for a in data.arms}
    out: dict = {"experiment_id": data.experiment_id, "seeds": seeds, "benchmarks": data.benchmarks,
                 "checkpoints": section(data, ARM_PAIRS["checkpoints"])}
    if "mixed-rank" in names:
        out["checkpoints_mixed_rank"] = section(data, ARM_PAIRS["checkpoints_mixed_rank"])
    out["summary"] = {"warm_start": warm_start(data)}
    out["births"] = births(data)
    both = sorted({a.seed for a in data.arms if a.name == "population"} & {a.seed for a in data.arms
                                                                           if a.name == "baseline"})
    out["shards"] = {"count": len(data.each), "names": [n for n, _ in data.each], "seeds": seeds,
                     "complete_seeds": both,
                     "each": {n: {"seed": s["seed"], "arms": dict(s["arms"]), "outcomes": data.outcomes[n],
                                  "steps": {r: (data.metrics[r] or [{"step": 0}])[-1]["step"]
                                            for r in s["arms"].values()}} for n, s in data.each}}
    out["hours"] = {n: (sum(s["seconds"]["training"].values()) + s["seconds"]["scoring"]) / 3600
                    for n, s in data.each}
    return json.loads(json.dumps(out))


# ---------------------------------------------------------------- the check

def _close(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))
    return a == b


def _keyed(items: list) -> dict | None:
    """A list of checkpoints (by fraction) or families (by name) as a dict, so each is named; None otherwise."""
    if items and all(isinstance(x, dict) and "fraction" in x for x in items):
        return {f"{x['fraction']:.0%}": x for x in items}
    if items and all(isinstance(x, dict) and "family" in x for x in items):
        return {x["family"]: x for x in items}
    return None


def compare(mine, theirs, path: str, found: list[dict], counted: list[int]) -> None:
    """Every number of `mine` against `theirs` at the same place; each that disagrees goes into `found`."""
    def missing(name: str, a, b) -> None:
        found.append({"name": name, "recomputed": a, "committed": b})

    if isinstance(mine, list) and (keyed := _keyed(mine)) is not None:
        other = _keyed(theirs) if isinstance(theirs, list) else None
        if other is None or len(other) != len(theirs):
            return missing(path, f"{len(mine)} entries", theirs)
        for k in [*keyed, *(k for k in other if k not in keyed)]:
            if k not in other:
                missing(f"{path}[{k}]", keyed[k], "absent")
            elif k not in keyed:
                missing(f"{path}[{k}]", "absent", other[k])
            else:
                compare(keyed[k], other[k], f"{path}[{k}]", found, counted)
        return
    if isinstance(mine, dict):
        if not isinstance(theirs, dict):
            return missing(path, "a mapping", theirs)
        whole = any(path == w or path.startswith((w + ".", w + "[")) for w in WHOLE)
        for k in [*mine, *(k for k in theirs if whole and k not in mine and k not in LABELS)]:
            if k not in theirs:
                missing(f"{path}.{k}", mine[k], "absent")
            elif k not in mine:
                missing(f"{path}.{k}", "absent", theirs[k])
            else:
                compare(mine[k], theirs[k], f"{path}.{k}", found, counted)
        return
    if isinstance(mine, list):
        if not isinstance(theirs, list) or len(theirs) != len(mine):
            return missing(path, mine, theirs)
        for i, (a, b) in enumerate(zip(mine, theirs)):
            compare(a, b, f"{path}[{i}]", found, counted)
        return
    counted[0] += 1
    if not _close(mine, theirs):
        missing(path, mine, theirs)


_NUMBER = re.compile(r"-?\d+\.\d+|(?<![\w.])-(?![\w.])")


def _tokens(text: str) -> list[float | None]:
    return [None if t == "-" else float(t) for t in _NUMBER.findall(text)]


def _printed(name: str, mine: list, printed: list, digits: int, found: list[dict], counted: list[int]) -> None:
    """Numbers a text prints to `digits` decimals against mine."""
    if len(printed) != len(mine):
        found.append({"name": name, "recomputed": mine, "committed": printed})
        return
    for a, b in zip(mine, printed):
        counted[0] += 1
        if (a is None) != (b is None) or (a is not None and abs(a - b) > 0.5 * 10 ** -digits + 1e-9):
            found.append({"name": name, "recomputed": mine, "committed": printed})
            return


def _line_numbers(c: dict) -> list:
    t = c.get("seed_t") or {}
    return [c.get("population_mean"), c.get("baseline"), c.get("difference"), c.get("low"), c.get("high"),
            t.get("low"), t.get("high")]


def check_readme(text: str, numbers: dict, found: list[dict], counted: list[int]) -> None:
    """The numbers README.md prints: the table at the last checkpoint (with each seed's difference), the table of
    every checkpoint, the warm start's line, the births' line and the shards' hours."""
    heading, last, every = "", {}, {}
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("| ") and not line.startswith("| benchmark") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if heading == "At the last checkpoint" and len(cells) == 6:
                last[cells[0]] = cells
            elif heading == "Every checkpoint" and len(cells) == 6:
                every[(cells[0], cells[1])] = cells
    cps = numbers.get("checkpoints", {})
    for b, rows in cps.items():
        c = next((c for c in reversed(rows) if "difference" in c), None)
        if c is None:
            continue
        name = f"README.md: {b} at the last checkpoint"
        if b not in last:
            found.append({"name": name, "recomputed": _line_numbers(c), "committed": "absent"})
            continue
        cells = last.pop(b)
        _printed(name, _line_numbers(c), _tokens(" ".join(cells[1:5])), 3, found, counted)
        seeds = dict(re.findall(r"([^\s:,]+): (-?\d+\.\d+|-)", cells[5]))
        _printed(f"{name}: each seed's difference", [v["difference"] for v in c["per_seed"].values()],
                 [None if seeds.get(s, "-") == "-" else float(seeds[s]) for s in c["per_seed"]], 3, found, counted)
        for r in rows:
            if "difference" not in r:
                continue
            key = (b, f"{r['fraction']:.0%}")
            if key not in every:
                found.append({"name": f"README.md: {b} at {key[1]}", "recomputed": _line_numbers(r),
                              "committed": "absent"})
                continue
            _printed(f"README.md: {b} at {key[1]}", _line_numbers(r), _tokens(" ".join(every.pop(key)[2:])), 3,
                     found, counted)
    for b in last:
        found.append({"name": f"README.md: {b} at the last checkpoint", "recomputed": "absent", "committed": last[b]})
    for b, label in every:
        found.append({"name": f"README.md: {b} at {label}", "recomputed": "absent", "committed": every[(b, label)]})
    prose = " ".join(line.strip() for line in text.splitlines() if not line.startswith(("|", "#", "```")))
    warm = re.search(r"The warm start every arm began from: (.*?)\.(?: |$)", prose)
    benchmarks = numbers.get("benchmarks", [])
    if warm or any(b.endswith(LOGPROB) for b in benchmarks):
        got = dict(re.findall(r"(\S+) (-?\d+\.\d+|-)(?:,|$)", warm.group(1) if warm else ""))
        _printed("README.md: the warm start", [numbers["summary"]["warm_start"].get(b) for b in benchmarks],
                 [None if got.get(b, "-") == "-" else float(got[b]) for b in benchmarks if b in got], 3, found,
                 counted)
    births_line = re.search(r"Births \(children's first-step rate minus the parent's\): (.*?)\.(?: |$)", prose)
    mine_births = [(op, role, v) for op, roles in sorted(numbers["births"].items()) for role, v in sorted(roles.items())]
    if births_line or mine_births:
        got = re.findall(r"(\S+) (\S+) n=(\d+) (-?\d+\.\d+|-)", births_line.group(1) if births_line else "")
        _printed("README.md: the births", [x for op, role, v in mine_births for x in (v["n"], v["difference"])],
                 [None if x == "-" else float(x) for g in got for x in (g[2], g[3])], 3, found, counted)
    hours = re.search(r"A shard took (\d+\.\d+) hours of its machine on average \(([^)]*)\)", prose)
    if hours:
        each = list(numbers["hours"].values())
        _printed("README.md: the shards' hours", [mean(each), *each], _tokens(f"{hours.group(1)} {hours.group(2)}"),
                 2, found, counted)


def check(results: Path, numbers: dict) -> dict | None:
    """Every number against scores.json (and README.md's printed ones); None without scores.json."""
    path = results / "scores.json"
    if not path.exists():
        return None
    committed = _json(path)
    found: list[dict] = []
    counted = [0]
    for key in COMPARED:
        if key in numbers or key in committed:
            compare(numbers.get(key, "absent"), committed.get(key, "absent"), key, found, counted)
    out = {"scores": str(path), "compared": counted[0], "disagree": found, "readme_compared": 0}
    if (results / "README.md").exists():
        printed = [0]
        check_readme((results / "README.md").read_text(), numbers, found, printed)
        out["readme_compared"] = printed[0]
    return out


# ---------------------------------------------------------------- the labelled lines

def _f(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _g(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def lines(numbers: dict, checked: dict | None) -> list[str]:
    sh = numbers["shards"]
    out = [f"experiment {numbers['experiment_id']}: {sh['count']} shards ({', '.join(sh['names'])}), seeds "
           f"{', '.join(map(str, sh['seeds']))}; with both arms: {', '.join(map(str, sh['complete_seeds'])) or 'none'}",
           "warm start: " + ", ".join(f"{b} {_f(v)}" for b, v in numbers["summary"]["warm_start"].items())]
    for key, pair in ARM_PAIRS.items():
        for b, rows in numbers.get(key, {}).items():
            for c in rows:
                out.append(f"{b} at {c['fraction']:.0%} ({c['flops']:.3g} FLOPs), {pair[0]} against {pair[1]}:")
                for s, arms in c["arms"].items():
                    out.append(f"  seed {s} stands at " + "; ".join(
                        f"{a} step {v['step']} ({_g(v['gap'])} FLOPs short)"
                        for a, v in arms.items()))
                if "difference" not in c:
                    out.append("  no seed with both arms' files: no comparison")
                    continue
                t = c["seed_t"]
                out += [f"  {pair[0]} mean {_f(c['population_mean'])}, {pair[1]} {_f(c['baseline'])}, difference "
                        f"{_f(c['difference'])}; worst / best member {_f(c['worst_member'])} / {_f(c['best_member'])}",
                        f"  95% hierarchical bootstrap [{_f(c['low'])}, {_f(c['high'])}] (drawn again: "
                        f"{RESAMPLES:,} resamples, default_rng({GENERATOR_SEED}), seeds then families)",
                        f"  t over {t['n_seeds']} seeds: mean {_f(t['mean'])}, sd {_f(t['sd'])}, "
                        + (f"t(0.975, {t['n_seeds'] - 1}) = {t_quantile(0.975, t['n_seeds'] - 1):.4f}, "
                           if t["n_seeds"] > 1 else "") + f"[{_f(t['low'])}, {_f(t['high'])}]",
                        f"  (seed, problem) pairs {c['n_pairs']}, families {c['n_families']}, interval over pairs "
                        f"[{_f(c['pairs_interval']['low'])}, {_f(c['pairs_interval']['high'])}]"
                        + ("" if c["counts"] is None else ", both / only population / only baseline / neither "
                           + " / ".join(str(c["counts"][k]) for k in ("both", "only_population", "only_baseline",
                                                                       "neither")))]
                out += [f"  seed {s}: population {_f(v['population'])}, baseline {_f(v['baseline'])}, difference "
                        f"{_f(v['difference'])}, problems {v['problems']}" for s, v in c["per_seed"].items()]
                if c.get("variance"):
                    out.append("  spread: " + ", ".join(f"{k} {_f(v)}" for k, v in c["variance"].items()))
                if "families" in c:
                    out.append(f"  families left out: {', '.join(c['removed']) or 'none'}")
                    out += [f"  family {r['family']}: {r['problems']} problems a seed, population "
                            f"{_f(r['population'])}, baseline {_f(r['baseline'])}, warm start {_f(r['warm_start'])}, "
                            f"difference {_f(r['difference'])}{' (left out)' if r['removed'] else ''}"
                            for r in c["families"]]
                    out += [f"  without {f}: {_f(v)}" for f, v in c["leave_one_out"].items()]
    for op, roles in sorted(numbers["births"].items()):
        for role, v in sorted(roles.items()):
            out.append(f"births {op} {role}: n={v['n']}, parent {_f(v['parent_rate'])}, child {_f(v['child_rate'])}, "
                       f"difference {_f(v['difference'])}, relative change {_f(v['relative_change'])}")
    for name, s in sh["each"].items():
        out.append(f"shard {name}: seed {s['seed']}, steps " + ", ".join(f"{r} {v}" for r, v in s["steps"].items())
                   + f"; {numbers['hours'][name]:.2f} hours")
    out.append("not recomputed: the dynamics, the arms' training numbers and per-arm means, the evaluation FLOPs, the "
               "shards' times and machines")
    if checked is None:
        out.append("no scores.json here: nothing compared")
    else:
        out.append(f"compared with {checked['scores']}: {checked['compared']} numbers; README.md: "
                   f"{checked['readme_compared']} printed numbers")
        out += [f"DISAGREES {d['name']}: recomputed {d['recomputed']}, committed {d['committed']}"
                for d in checked["disagree"]]
        out.append(f"{len(checked['disagree'])} disagree" if checked["disagree"] else "all agree")
    return out


def main(argv: list[str] | None = None) -> int:
    """Recompute a result made of shards from its files and compare it with the committed one (module docstring);
    exit status 1 when a number disagrees, 2 when the directory holds no result of shards."""
    p = argparse.ArgumentParser(prog="python -m coordinator.experiment.recompute", description=main.__doc__)
    p.add_argument("results", type=Path, help="an experiment's result directory, docs/results/<id> (with shards/)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of labelled lines")
    args = p.parse_args(argv)
    try:
        numbers = recompute(args.results)
    except (InputError, OSError, KeyError, ValueError) as e:
        print(f"error: {args.results}: {e}", file=sys.stderr)
        return 2
    checked = check(args.results, numbers)
    if args.json:
        print(json.dumps({"numbers": numbers, "check": checked}, indent=1))
    else:
        print("\n".join(lines(numbers, checked)))
    if checked and checked["disagree"]:
        print(f"error: {len(checked['disagree'])} numbers disagree with the committed result: "
              + "; ".join(d["name"] for d in checked["disagree"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
