"""`populora experiment`: the population and the AZR baseline from the same warm start, seeds and compute budget,
scored on held-out problems, compared in one report (spec 1, 11, 13, 14, 15).

An experiment has an id; each arm is a run of its own whose id is derived from it (`<id>-population-s<seed>`,
`<id>-baseline-s<seed>`), trained by the same `run_training` as `populora train`. What is done is never redone:
an arm whose run the journal records as finished is skipped, an arm that stopped part way continues from its last
stored phase, and an evaluation whose scores file exists is read back. Rerunning the same command after a stop
therefore continues where it stopped.

Layout under <run.output_dir>/<id>/: experiment.json (what was asked: config, seeds, budget, benchmarks, arms),
evals/<run>.<benchmark>.json (one arm's scores on one benchmark, as `populora eval` writes them),
scores.json (the comparison's numbers), report.html and its PNG figures.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.armeval import HELDOUT, arm_state, eval_settings, evaluate_arms
from coordinator.comparison import ArmRun, ComparisonInput, write_comparison
from coordinator.evalfiles import write_json
from coordinator.journal import JournalDB
from coordinator.stepmetrics import read_metrics
from coordinator.train import _apply_limits, as_baseline, budget_spent, run_training
from populora.config import Config, ConfigError, config_from_yaml
from populora.evals import BENCHMARKS, EvalError
from populora.names import MAX_RUN_ID, reason
from populora.records import Usage

log = logging.getLogger(__name__)

ARMS = ("population", "baseline")
__all__ = ["ARMS", "HELDOUT", "Arm", "Experiment", "arm_state", "eval_settings", "evaluate_arms", "main", "plan",
           "run_experiment"]


@dataclass(frozen=True)
class Arm:
    """One run of the experiment: the population or the baseline, with one run seed."""

    name: str
    seed: int
    run_id: str
    cfg: Config


@dataclass
class Experiment:
    """What `populora experiment` was asked for; `arms` in the order they run (per seed: population, baseline)."""

    experiment_id: str
    cfg: Config
    seeds: list[int]
    benchmarks: list[str]
    limit: int | None = None
    samples: int = 1
    arms: list[Arm] = field(default_factory=list)

    @property
    def out_dir(self) -> Path:
        return Path(self.cfg.run.output_dir) / self.experiment_id

    def manifest(self) -> dict:
        return {"experiment_id": self.experiment_id, "config_yaml": self.cfg.to_yaml(), "seeds": self.seeds,
                "budget_flops": self.cfg.run.budget_flops, "budget_tokens": self.cfg.run.budget_tokens, "budget_sandbox_jobs": self.cfg.run.budget_sandbox_jobs,
                "max_steps": self.cfg.run.steps, "arms": [{"arm": a.name, "seed": a.seed, "run_id": a.run_id}
                                                          for a in self.arms]}

    def comparison_input(self) -> ComparisonInput:
        """What the comparison reads of the experiment: its arms' runs, benchmarks, evaluation settings and config."""
        return ComparisonInput(self.experiment_id, self.out_dir, self.cfg, list(self.seeds), list(self.benchmarks),
                               self.limit, self.samples,
                               [ArmRun(a.name, a.seed, a.run_id, Path(a.cfg.run.output_dir) / a.run_id)
                                for a in self.arms])


def parse_seeds(text: str | None, default: int) -> list[int]:
    """`1,2` -> [1, 2]; none given -> [run.seed]."""
    if not text:
        return [default]
    seeds = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            seeds.append(int(part))
        except ValueError:
            raise ConfigError(f"--seeds {text!r}: '{part}' is not an integer (e.g. --seeds 1,2)") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: give one or more distinct integers (e.g. --seeds 1,2)")
    return seeds


def default_id(cfg: Config, label: str, seeds: list[int]) -> str:
    """The same configuration, seeds and budget give the same id, so rerunning the same command continues it."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", label or cfg.model.name.split("/")[-1])[:32].strip("-_") or "exp"
    digest = hashlib.sha256((_training_yaml(cfg) + json.dumps(seeds)).encode()).hexdigest()[:8]
    return f"{stem}-exp-{digest}"


def arm_config(cfg: Config, arm: str, seed: int, run_id: str) -> Config:
    """One arm's run config: the experiment's, with its run seed and id; the baseline as `train --mode baseline`
    makes it (spec 1: one adapter in both roles, AZR's learnability reward). The warm start is the same section in
    both, so both start from the identical cached adapter (spec 13)."""
    out = Config.model_validate(cfg.model_dump())
    out.run.seed, out.run.run_id = seed, run_id
    if arm == "baseline":
        as_baseline(out)
    else:
        out.run.mode = "population"
    return Config.model_validate(out.model_dump())


def plan(cfg: Config, experiment_id: str, seeds: list[int], benchmarks: list[str], limit: int | None = None,
         samples: int = 1) -> Experiment:
    """The experiment's arms. Compute-matched (spec 14) means a budget: without one the arms would run equal steps."""
    if not (cfg.run.budget_flops or cfg.run.budget_tokens or cfg.run.budget_sandbox_jobs):
        raise ConfigError("an experiment compares the arms at equal compute (spec 14): give a budget, e.g. "
                          "--budget flops=2e15 (or set run.budget_flops)")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,90}", experiment_id):
        raise ConfigError(f"--id {experiment_id!r}: use 1-90 letters, digits, '-' or '_'")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit}: must be at least 1")
    if samples < 1:
        raise ConfigError(f"--samples {samples}: must be at least 1")
    if samples > 1 and cfg.eval.temperature == 0:
        raise ConfigError(f"--samples {samples} with eval.temperature 0 would score the same greedy answer "
                          f"{samples} times: set --set eval.temperature=0.8 for pass@k")
    for name in benchmarks:
        if name not in BENCHMARKS:
            raise ConfigError(f"--benchmark {name!r}: unknown; allowed: {', '.join(BENCHMARKS)}")
    base = Config.model_validate(cfg.model_dump())
    base.run.mode, base.run.run_id = "population", ""
    names = [HELDOUT] + [b for b in benchmarks if b != HELDOUT]
    exp = Experiment(experiment_id, base, seeds, list(dict.fromkeys(names)), limit, samples)
    for seed in seeds:
        for arm in ARMS:
            run_id = f"{experiment_id}-{arm}-s{seed}"
            if why := reason(run_id, MAX_RUN_ID):  # checked before any arm's run is created
                raise ConfigError(f"--id {experiment_id!r}, seed {seed}: the arm's run id {run_id!r} is refused: "
                                  f"{why}; choose another --id")
            exp.arms.append(Arm(arm, seed, run_id, arm_config(base, arm, seed, run_id)))
    return exp


LIMITS = ("budget_flops", "budget_tokens", "budget_sandbox_jobs", "max_steps")


def _training_yaml(cfg: Config, limits: bool = True) -> str:
    """The config as far as it decides what the arms train: without the `eval` section, which only says how they are
    scored (an evaluation file records its own settings, and one made with others is redone); `limits=False` also
    without the step cap and the budgets."""
    tree = cfg.model_dump(mode="json")
    tree.pop("eval", None)
    if not limits:
        for key in ("steps", "budget_flops", "budget_tokens", "budget_sandbox_jobs"):
            tree["run"].pop(key)
    return json.dumps(tree, sort_keys=True)


def _reach(limit: int) -> float:
    return float("inf") if limit == 0 else limit  # 0: no budget


def _spent(exp: Experiment) -> dict[str, float]:
    """The most any arm has spent so far of each limit (LIMITS), from the arms' metrics."""
    out = dict.fromkeys(LIMITS, 0.0)
    for arm in exp.arms:
        rows = read_metrics(Path(arm.cfg.run.output_dir) / arm.run_id)
        if not rows:
            continue
        c = rows[-1].get("compute_cumulative", {})
        for key, value in (("budget_flops", c.get("budget_flops", 0)), ("budget_tokens", c.get("tokens", 0)),
                           ("budget_sandbox_jobs", c.get("sandbox_jobs", 0)), ("max_steps", rows[-1]["step"])):
            out[key] = max(out[key], float(value))
    return out


def check_manifest(exp: Experiment) -> bool:
    """True if the experiment was started before. The same id is refused, and nothing is changed, for another config,
    other seeds, or a smaller budget or step cap than an arm has already spent (a smaller one that no arm has reached
    yet ends every arm there, as if the experiment had been started with it); a larger one continues the arms
    further (as `train --resume` does)."""
    path = exp.out_dir / "experiment.json"
    if not path.exists():
        return False
    stored = json.loads(path.read_text())
    # read through today's schema, so a field added since (with its default) is no difference
    stored["config_yaml"] = _training_yaml(config_from_yaml(stored["config_yaml"], f"the stored config of {path}"),
                                           limits=False)
    mine = exp.manifest()
    mine["config_yaml"] = _training_yaml(exp.cfg, limits=False)
    differs = [k for k in ("config_yaml", "seeds", "arms") if stored.get(k) != mine[k]]
    spent = _spent(exp)
    shrinks = [k for k in LIMITS if _reach(mine[k]) < _reach(stored.get(k, 0)) and spent[k] >= _reach(mine[k])]
    if differs or shrinks:
        what = ", ".join(differs + [f"larger {k} ({stored.get(k)}, now {mine[k]}; an arm has spent {spent[k]:.6g})"
                                    for k in shrinks])
        raise ConfigError(f"experiment '{exp.experiment_id}' was started with another {what} ({path}); rerun the "
                          "command it was started with (a budget or step cap may only grow, or shrink to what no "
                          "arm has reached yet), or pass a new --id")
    return True


# ---------------------------------------------------------------- arms

def arm_finished(db: JournalDB, arm: Arm) -> bool:
    """The journal records the arm's run as finished and its metrics show it reached the arm's limits as they are now:
    its budget (spec 14) or its step cap. After a budget or cap has grown, a finished run is not finished."""
    stored = db.get_run(arm.run_id)
    if stored is None or stored["status"] != "finished":
        return False
    rows = read_metrics(Path(arm.cfg.run.output_dir) / arm.run_id)
    if not rows:
        return False
    spent = rows[-1].get("compute_cumulative", {})
    used = Usage(spent.get("generated_tokens", 0), spent.get("trained_tokens", 0), spent.get("sandbox_jobs", 0))
    return bool(budget_spent(arm.cfg, used, spent.get("budget_flops", 0))) or rows[-1]["step"] >= arm.cfg.run.steps


def run_arm(db: JournalDB, arm: Arm, workers: int = 1, progress: bool = False) -> bool:
    """Train the arm to its budget; False if it was finished already (nothing runs). A run started before continues
    from its stored phases under the config it was started with (as `populora train --resume` does)."""
    if arm_finished(db, arm):
        log.info("arm %s (seed %d): run %s finished before, not redone", arm.name, arm.seed, arm.run_id)
        return False
    cfg = arm.cfg
    stored = db.get_run(arm.run_id)
    if stored is None:
        db.create_run(arm.run_id, cfg.run.mode, cfg.to_yaml())
    else:
        cfg = config_from_yaml(stored["config_yaml"], f"the stored config of run {arm.run_id}")
        cfg.run.steps = arm.cfg.run.steps
        cfg.run.budget_tokens, cfg.run.budget_sandbox_jobs = arm.cfg.run.budget_tokens, arm.cfg.run.budget_sandbox_jobs
        cfg.run.budget_flops = arm.cfg.run.budget_flops
        log.info("arm %s (seed %d): continuing run %s", arm.name, arm.seed, arm.run_id)
    start = time.perf_counter()
    run_training(cfg, arm.run_id, db, workers, progress=progress)
    log.info("arm %s (seed %d): run %s done in %.0f s", arm.name, arm.seed, arm.run_id, time.perf_counter() - start)
    return True


# ---------------------------------------------------------------- the whole experiment

@dataclass
class Outcome:
    """What one call of `run_experiment` did: the arms it trained, the evaluations it ran, the report it wrote."""

    trained: list[str]
    evaluated: list[Path]
    report: Path
    scores: dict


def _seed_job(exp: Experiment, seed: int, evaluate: bool) -> tuple[list[str], list[Path]]:
    """One seed's arms, trained and (with `evaluate`) scored, in a process of its own (`--jobs`): its own journal
    connection and services; the store, the warm-start cache and the databases are shared, each arm writing only its
    own runs and adapters."""
    from populora.logs import setup_logging

    setup_logging(tag=f"[seed {seed}]")
    db = JournalDB(exp.cfg.league_db_url)
    try:
        trained = [arm.run_id for arm in exp.arms if arm.seed == seed and run_arm(db, arm)]
    finally:
        db.close()
    return trained, (evaluate_arms(exp, [seed]) if evaluate else [])


def _run_parallel(exp: Experiment, jobs: int) -> tuple[list[str], list[Path]]:
    """The seeds `jobs` at a time, each in a spawned process (torch and the services are not fork-safe). With a FLOP
    budget each seed's arms are scored in their process as soon as they are trained (the checkpoints are fractions of
    that budget, the same for every seed); with a token or job budget the checkpoints depend on every arm's end, so
    the evaluations wait for all of them. A seed that fails is logged when it fails and the other seeds go on; the
    experiment then stops with the first failure's error, and rerunning continues every seed where it stopped."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from services.league.db import LeagueDB

    LeagueDB(exp.cfg.league_db_url).close()  # its schema made here, once: not by several processes at the same time
    per_seed = bool(exp.cfg.run.budget_flops)
    trained: list[str] = []
    evaluated: list[Path] = []
    failed: list[tuple[int, BaseException]] = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_seed_job, exp, seed, per_seed): seed for seed in exp.seeds}
        for future in as_completed(futures):
            try:
                t, e = future.result()
            except Exception as err:  # reported now, while the other seeds go on
                log.error("seed %d stopped: %s: %s", futures[future], type(err).__name__, err)
                failed.append((futures[future], err))
                continue
            log.info("seed %d: trained and scored", futures[future])
            trained += t
            evaluated += e
    if failed:
        seed, err = failed[0]
        raise RuntimeError(f"seed {seed} of experiment {exp.experiment_id} stopped ({type(err).__name__}: {err}); "
                           "rerun the command to continue it") from err
    if not per_seed:
        evaluated = evaluate_arms(exp)
    return trained, evaluated


def run_experiment(exp: Experiment, db: JournalDB, *, workers: int = 1, jobs: int = 1,
                   progress: bool = False, after_arm: Callable[[Arm], None] | None = None) -> Outcome:
    """Train every arm (skipping finished ones), evaluate them (skipping done evaluations), write the comparison.
    `after_arm` is called after each arm that is finished, whether it ran now or before (one seed at a time only).
    `jobs` > 1 trains and scores that many seeds at once, each in its own process (`_run_parallel`): the same arms,
    evaluations and files as one after another."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be at least 1")
    if jobs > 1 and after_arm is not None:
        raise ValueError("after_arm needs the arms run in this process: use jobs=1")
    exp.out_dir.mkdir(parents=True, exist_ok=True)
    check_manifest(exp)
    write_json(exp.out_dir / "experiment.json", exp.manifest())  # new, or the same with a grown budget
    if jobs > 1 and len(exp.seeds) > 1:
        trained, evaluated = _run_parallel(exp, min(jobs, len(exp.seeds)))
    else:
        trained = []
        for arm in exp.arms:
            if run_arm(db, arm, workers, progress):
                trained.append(arm.run_id)
            if after_arm is not None:
                after_arm(arm)
        evaluated = evaluate_arms(exp)
    report, scores = write_comparison(exp.comparison_input())
    return Outcome(trained, evaluated, report, scores)


def main(args, cfg: Config) -> int:
    """`populora experiment`: see the module docstring."""
    import sys

    from populora.logs import setup_logging

    setup_logging()
    _apply_limits(args, cfg)
    seeds = parse_seeds(args.seeds, cfg.run.seed)
    label = args.preset if not args.config_file else Path(args.config_file).stem
    cfg.run.run_id = ""
    experiment_id = args.experiment_id or default_id(cfg, label or "", seeds)
    if args.jobs < 1:
        print(f"error: --jobs {args.jobs}: must be at least 1", file=sys.stderr)
        return 2
    exp = plan(cfg, experiment_id, seeds, args.benchmark, args.limit, args.samples)
    print(f"experiment {experiment_id}: {len(exp.arms)} arms "
          f"({', '.join(a.run_id for a in exp.arms)}), budget flops={exp.cfg.run.budget_flops:.3g} "
          f"tokens={exp.cfg.run.budget_tokens} "
          f"sandbox_jobs={exp.cfg.run.budget_sandbox_jobs}, at most {exp.cfg.run.steps} steps each; "
          f"benchmarks {', '.join(exp.benchmarks)}", flush=True)
    db = JournalDB(exp.cfg.league_db_url)
    try:
        outcome = run_experiment(exp, db, jobs=args.jobs, progress=sys.stderr.isatty() and args.jobs == 1)
    except EvalError as e:
        print(f"error: evaluation: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()
    print(f"trained now: {', '.join(outcome.trained) or 'none (all arms finished before)'}")
    print(f"evaluations run now: {len(outcome.evaluated)}")
    print(f"scores: {exp.out_dir / 'scores.json'}")
    print(f"report: {outcome.report}")
    return 0
