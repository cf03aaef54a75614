"""`populora experiment`: the population and the AZR baseline from the same warm start, seeds and compute budget,
scored on held-out problems and published benchmarks, compared in one report (spec 1, 11, 13, 14, 15).

Each arm is trained by the same `run_training` as `populora train`. What is done is never redone: an arm whose run the
journal records as finished is skipped, an arm that stopped part way continues from its last stored phase, and an
evaluation whose scores file exists is read back. Rerunning the same command after a stop therefore continues where
it stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coordinator.experiment.comparison import write_comparison
from coordinator.experiment.evalfiles import write_json
from coordinator.experiment.headline import HELDOUT
from coordinator.experiment.plan import (
    Arm,
    Experiment,
    check_manifest,
    default_id,
    parse_arms,
    parse_seeds,
    plan,
)
from coordinator.experiment.seedeval import attach_problem_sets, ensure_overlap, evaluate_arms, load_benchmark
from coordinator.record.ledger import budget_spent
from coordinator.record.stepmetrics import read_metrics
from coordinator.run.journal import JournalDB
from coordinator.train import apply_limits, run_training
from populora.config import Config, ConfigError, config_from_yaml
from populora.evals import EvalError
from populora.records import Usage

log = logging.getLogger(__name__)

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
    ensure_overlap(exp)  # the held-out families the comparison leaves out, found once for the experiment
    report, scores = write_comparison(exp.comparison_input())
    return Outcome(trained, evaluated, report, scores)


def main(args, cfg: Config) -> int:
    """`populora experiment`: see the module docstring."""
    import sys

    from populora.logs import setup_logging

    setup_logging()
    apply_limits(args, cfg)
    seeds = parse_seeds(args.seeds, cfg.run.seed)
    arms = parse_arms(getattr(args, "arms", None))
    label = args.preset if not args.config_file else Path(args.config_file).stem
    cfg.run.run_id = ""
    experiment_id = args.experiment_id or default_id(cfg, label or "", seeds, arms)
    if args.jobs < 1:
        print(f"error: --jobs {args.jobs}: must be at least 1", file=sys.stderr)
        return 2
    exp = plan(cfg, experiment_id, seeds, args.benchmark, args.limit, args.samples, arms)
    try:  # the benchmark files (--data, $POPULORA_BENCHMARKS) before any arm trains, not after the training
        for benchmark in exp.benchmarks:
            if benchmark != HELDOUT:
                load_benchmark(exp, benchmark)
        attach_problem_sets(exp)  # the fixed subsets scored, drawn now when asked for (eval.*_problems)
    except (EvalError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
