"""`populora experiment ... --shard SEED[:ARM]`: one shard of an experiment, so a comparison too long for one stretch
of a machine is made a piece at a time, each piece small enough to commit.

A shard is one seed (both arms, trained from the shared warm start to the budget, and their scoring) or one seed and
one arm (`--shard 2:baseline`). It runs as `populora experiment` runs one seed (the same arms, run ids, journal,
resumption and evaluation files, coordinator/experiment/runner.py), under run.reproducible, so the same shard run
again from the same commit on the same machine gives the same weights and outcomes. Its working files go under
<run.output_dir>/<id>/shards/<shard>/; when that directory and the journal survive, a stopped shard run again
continues where it stopped, else it starts again. At the end it exports a small directory to commit,
<results>/<id>/shards/<shard>/ (no weights):

- `shard.json`: what ran (experiment id, seed, arms and their run ids, budget, the command, the commit), the machine
  (CPU model, AVX-512 and AVX2 flags, cores, torch version), the times (wall seconds of training per arm and of
  scoring, summed over every call that worked on the shard), each final adapter's weights digest (sha256 of its
  adapter_model.safetensors) and a digest of every per-problem outcome;
- `config.yaml`: the resolved config; `metrics/<run>.metrics.jsonl`: each arm's per-step metrics without their
  bulky `timeline` field (the comparison does not read it); `births.json`: how the population's children started;
- `dynamics/<run>.json`: each arm's dynamics (spec 11), computed while its adapters were there;
- `evals/<run>.json`: {"run", "benchmarks": {benchmark: scores}}, per version and problem, pass@1 (the problem sets'
  pass subset) and the likelihood of the reference answer (`<benchmark>-logprob`, the likelihood subset): ids and
  outcomes only, in one file per arm run named by the run, never by a published benchmark.

The problem sets (coordinator/experiment/problemsets.py) are <results>/<id>/problems.json, drawn by the first shard
before it trains and committed with it; every later shard scores the same problems. Then the result is computed again
from every shard under <results>/<id>/shards/ (coordinator/experiment/shardresult.py: scores.json and README.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from coordinator.experiment.armeval import arm_rows
from coordinator.experiment.checkpointeval import WARM, population_at
from coordinator.experiment.evalfiles import OVERLAP_FILE, eval_path, shard_evals_path, write_json
from coordinator.experiment.plan import ARMS, Experiment, default_id, plan
from coordinator.experiment.problemsets import PROBLEMS_FILE
from coordinator.experiment.shardconfig import committed_config, continued_id, continues
from coordinator.experiment.shardresult import SHARD_FILE, combine
from coordinator.record.births import birth_rates
from populora.config import Config, ConfigError

log = logging.getLogger(__name__)

DEFAULT_RESULTS = "docs/results"  # where shards are exported (--results), one directory per experiment
TRIMMED = ("timeline",)  # per-step fields the comparison does not read, left out of a shard's metrics
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ShardSpec:
    """One shard: a seed, and one arm of it or (None) every arm."""

    seed: int
    arm: str | None = None

    @property
    def name(self) -> str:
        return f"{self.seed}" if self.arm is None else f"{self.seed}-{self.arm}"


def parse_shard(text: str) -> ShardSpec:
    """`3` -> seed 3, both arms; `3:baseline` -> seed 3, the baseline alone."""
    seed, _, arm = text.partition(":")
    try:
        value = int(seed)
    except ValueError:
        raise ConfigError(f"--shard {text!r}: give SEED or SEED:ARM (e.g. --shard 1, --shard 2:baseline)") from None
    if arm and arm not in ARMS:
        raise ConfigError(f"--shard {text!r}: arm {arm!r} is not one of {', '.join(ARMS)}")
    return ShardSpec(value, arm or None)


# ---------------------------------------------------------------- what a shard records of where it ran

def machine() -> dict:
    """The CPU model, its AVX-512 and AVX2 flags, the cores and the torch version: what a shard's weights and times
    depend on beside the commit."""
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    return {"cpu": model, "avx512": sorted(f for f in flags if f.startswith("avx512")), "avx2": "avx2" in flags,
            "cores": os.cpu_count(), "torch": torch_version, "python": platform.python_version()}


def commit() -> dict:
    """The commit the code ran from, and whether tracked files differed from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "modified": bool(git("status", "--porcelain", "--untracked-files=no"))}


def weights_digest(version_dir: Path) -> str:
    """sha256 of a stored adapter version's weights file."""
    from populora.store import ADAPTER_WEIGHTS

    h = hashlib.sha256()
    with open(version_dir / ADAPTER_WEIGHTS, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def final_digests(exp: Experiment) -> dict[str, dict[str, str]]:
    """{run id: {adapter@vN: weights digest}} of each arm's population after its last step (every member), and the
    warm start every arm began from."""
    from populora.store import ArtifactStore

    store = ArtifactStore(exp.cfg.store_root)
    out: dict[str, dict[str, str]] = {}
    for arm in exp.arms:
        rows = arm_rows(arm)
        members = population_at(rows, rows[-1]["step"]) if rows else None
        out[arm.run_id] = {f"{a}@v{v}": weights_digest(store.path_of(store.ref(a, v)))
                           for a, v in sorted((members or {}).items())}
    warm = f"{exp.arms[0].run_id}.warm"
    if store.versions(warm):
        ref = store.latest(warm)
        out[WARM] = {f"{warm}@v{ref.version}": weights_digest(store.path_of(ref))}
    return out


def outcomes(files: dict[str, dict]) -> dict[str, dict[str, dict[str, float]]]:
    """{benchmark file name: {version label: {problem: outcome}}}: passed answers for pass@1, the summed
    log-probability of the reference answer for a likelihood; what a shard run twice must give again."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, body in sorted(files.items()):
        out[name] = {r["label"]: {p["id"]: p["logprob"] if "logprob" in p else p["passed"] for p in r["problems"]}
                     for r in body.get("results", [])}
    return out


def without_answers(body: dict) -> dict:
    """An evaluation file as a shard commits it: each problem's id and outcome, without the checker's message, which
    quotes the benchmark's reference answer (the published files stay with their publishers)."""
    for r in body.get("results", []):
        r["problems"] = [{k: v for k, v in p.items() if k != "error"} for p in r.get("problems", [])]
    return body


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- running one

def _times(path: Path, add: dict) -> dict:
    """The shard's wall seconds so far (training per arm, scoring), kept in its working directory and summed over
    the calls that worked on it."""
    times = json.loads(path.read_text()) if path.exists() else {"training": {}, "scoring": 0.0, "calls": 0}
    for arm, s in add["training"].items():
        times["training"][arm] = times["training"].get(arm, 0.0) + s
    times["scoring"] += add["scoring"]
    times["calls"] += 1
    write_json(path, times)
    return times


def run_shard(exp: Experiment, results: Path, argv: list[str], progress: bool = False) -> Path:
    """Train and score the shard's arms (continuing what its working directory and the journal hold), export it to
    <results>/shards/<shard>/ and compute the result again from every shard there; returns the shard's directory."""
    from coordinator.experiment.runner import run_experiment
    from coordinator.run.journal import JournalDB

    marks = {"last": time.perf_counter()}
    training: dict[str, float] = {}

    def after_arm(arm) -> None:
        now = time.perf_counter()
        training[arm.name] = training.get(arm.name, 0.0) + now - marks["last"]
        marks["last"] = now

    if (results / OVERLAP_FILE).exists() and not (exp.out_dir / OVERLAP_FILE).exists():
        exp.out_dir.mkdir(parents=True, exist_ok=True)  # the experiment's, found by its first shard
        shutil.copyfile(results / OVERLAP_FILE, exp.out_dir / OVERLAP_FILE)
    source = commit()  # the code it runs from: the tree may move on (commits, edits) before it ends
    db = JournalDB(exp.cfg.league_db_url)
    try:
        run_experiment(exp, db, progress=progress, after_arm=after_arm)
    finally:
        db.close()
    times = _times(exp.out_dir / "times.json", {"training": training, "scoring": time.perf_counter() - marks["last"]})
    shard = export(exp, results, argv, times, source)
    combine(results)
    return shard


def export(exp: Experiment, results: Path, argv: list[str], times: dict, source: dict | None = None) -> Path:
    """The shard's committed directory (module docstring), written anew from its working files; `source`: the commit
    (and whether tracked files differed from it) as the shard started, else as it ends."""
    spec = ShardSpec(exp.seeds[0], exp.arms[0].name if len(exp.arms) == 1 else None)
    out = results / "shards" / spec.name
    if out.exists():
        shutil.rmtree(out)
    (out / "metrics").mkdir(parents=True)
    files: dict[str, dict] = {}
    births = []
    for arm in exp.arms:
        rows = arm_rows(arm)
        with open(out / "metrics" / f"{arm.run_id}.metrics.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps({k: v for k, v in row.items() if k not in TRIMMED}, sort_keys=True) + "\n")
        if arm.name != "baseline":
            births += [{"run": arm.run_id, **b} for b in birth_rates(rows)]
        dyn = exp.out_dir / "dynamics" / f"{arm.run_id}.json"
        if dyn.exists():
            (out / "dynamics").mkdir(exist_ok=True)
            shutil.copyfile(dyn, out / "dynamics" / dyn.name)
        scored: dict[str, dict] = {}
        for b in exp.scored_benchmarks:
            path = eval_path(exp.out_dir, arm.run_id, b)
            if path.exists():
                files[path.name] = scored[b] = without_answers(json.loads(path.read_text()))
        if scored:
            write_json(shard_evals_path(out, arm.run_id), {"run": arm.run_id, "benchmarks": scored})
    write_json(out / "births.json", {"births": births})
    committed = committed_config(results)  # the experiment's text, where its code has grown settings since
    if committed is not None:
        continues(committed, exp.cfg)
    (out / "config.yaml").write_text(committed if committed is not None else exp.cfg.to_yaml())
    if (exp.out_dir / OVERLAP_FILE).exists() and not (results / OVERLAP_FILE).exists():
        shutil.copyfile(exp.out_dir / OVERLAP_FILE, results / OVERLAP_FILE)
    scored = outcomes(files)
    body = {"experiment_id": exp.experiment_id, "shard": spec.name, "seed": spec.seed,
            "arms": {a.name: a.run_id for a in exp.arms}, "benchmarks": exp.scored_benchmarks,
            "budget_flops": exp.cfg.run.budget_flops, "max_steps": exp.cfg.run.steps, "limit": exp.limit,
            "samples": exp.samples, "steps": {a.run_id: (arm_rows(a) or [{"step": 0}])[-1]["step"] for a in exp.arms},
            "command": argv, **(source or commit()), "machine": machine(),
            "seconds": {"training": times["training"], "scoring": times["scoring"], "calls": times["calls"]},
            "weights": final_digests(exp), "outcomes": _digest(scored),
            "problem_sets": (_digest(exp.problem_sets["benchmarks"]) if exp.problem_sets else None)}
    write_json(out / SHARD_FILE, body)
    log.info("shard %s exported to %s: outcomes %s", spec.name, out, body["outcomes"][:16])
    return out


# ---------------------------------------------------------------- the command

def command_of(args, spec: ShardSpec) -> list[str]:
    """The command line that runs this shard (another seed's: the same with its --shard)."""
    out = ["populora", "experiment"]
    out += ["--config", args.config_file] if args.config_file else ["--preset", args.preset]
    if args.budget:
        out += ["--budget", args.budget]
    out += ["--shard", spec.name.replace("-", ":", 1)]
    for flag, value in (("--id", args.experiment_id), ("--steps", args.steps), ("--limit", args.limit)):
        if value is not None:
            out += [flag, str(value)]
    if args.samples != 1:
        out += ["--samples", str(args.samples)]
    for b in args.benchmark:
        out += ["--benchmark", b]
    for s in args.overrides:
        out += ["--set", s]
    if args.results != DEFAULT_RESULTS:
        out += ["--results", args.results]
    return out


def shard_experiment(args, cfg: Config, label: str) -> tuple[Experiment, ShardSpec, Path]:
    """The shard's experiment from the command line: its id the experiment's whatever the seed and arm (the
    default from the training config and budget, as `populora experiment` makes it), under run.reproducible."""
    from coordinator.experiment.seedeval import attach_problem_sets

    spec = parse_shard(args.shard)
    if args.seeds or args.arms or args.jobs != 1:
        raise ConfigError("--shard runs one seed (and one arm with SEED:ARM) in this process: leave out --seeds, "
                          "--arms and --jobs")
    if not cfg.run.budget_flops:
        raise ConfigError("a shard needs a FLOP budget (--budget flops=F): the shards of one experiment are compared "
                          "at fractions of it")
    cfg.run.reproducible = True  # the same shard run again gives the same weights and outcomes
    cfg.run.run_id = ""
    experiment_id = args.experiment_id or default_id(cfg, label, [])
    root = Path(args.results)
    if not args.experiment_id and committed_config(root / experiment_id) is None:
        # settings the code gained since the experiment's first shard change the default id (shardconfig)
        experiment_id = continued_id(root, experiment_id.rsplit("-exp-", 1)[0], cfg) or experiment_id
    committed = committed_config(root / experiment_id)
    added = continues(committed, cfg) if committed is not None else []
    if added:
        log.info("continuing experiment %s: settings added since its first shard, at their defaults: %s",
                 experiment_id, ", ".join(added))
    exp = plan(cfg, experiment_id, [spec.seed], args.benchmark, args.limit, args.samples,
               [spec.arm] if spec.arm else None)
    exp.directory = Path(cfg.run.output_dir) / experiment_id / "shards" / spec.name
    results = root / experiment_id
    attach_problem_sets(exp, results / PROBLEMS_FILE)
    return exp, spec, results


def main(args, cfg: Config) -> int:
    """`populora experiment --shard SEED[:ARM]` (module docstring)."""
    from coordinator.train import apply_limits
    from populora.evals import EvalError
    from populora.logs import setup_logging

    setup_logging()
    label = args.preset if not args.config_file else Path(args.config_file).stem
    try:
        apply_limits(args, cfg)
        exp, spec, results = shard_experiment(args, cfg, label or "")
    except (ConfigError, EvalError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"experiment {exp.experiment_id}, shard {spec.name}: arms {', '.join(a.run_id for a in exp.arms)}, budget "
          f"flops={exp.cfg.run.budget_flops:.3g}, at most {exp.cfg.run.steps} steps each; benchmarks "
          f"{', '.join(exp.scored_benchmarks)}; problem sets {results / PROBLEMS_FILE}", flush=True)
    try:
        shard = run_shard(exp, results, command_of(args, spec), progress=sys.stderr.isatty())
    except EvalError as e:
        print(f"error: evaluation: {e}", file=sys.stderr)
        return 2
    print(f"shard: {shard}\nresult: {results / 'README.md'} ({results / 'scores.json'})")
    return 0
