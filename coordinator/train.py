"""`populora train`: step 0, then the training steps, each through the phase journal; metrics and the report."""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from coordinator.clients.services import open_services
from coordinator.record.ledger import StepBook
from coordinator.record.stepmetrics import MetricsWriter
from coordinator.run.journal import Journal, JournalDB, RunFailed
from coordinator.run.phases import Run
from coordinator.run.pipeline import step_records
from coordinator.run.queue import RedisStreamQueue
from coordinator.run.runprogress import RunProgress
from coordinator.run.step import StepRecord
from coordinator.run.worker import start_worker_threads
from populora.config import Config, ConfigError, config_from_yaml
from populora.logs import run_id_var, setup_logging, step_var
from populora.retry import Backoff
from populora.store import ArtifactStore

log = logging.getLogger(__name__)


def new_run_id(cfg: Config, label: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", label or cfg.model.name.split("/")[-1])[:40].strip("-_") or "run"
    return f"{stem}-{cfg.run.mode[:4]}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(j: Journal, run: Run, steps: int, metrics: MetricsWriter, progress: RunProgress) -> None:
    """Steps 0..steps, or fewer when a compute budget is spent (checked at every step boundary); a step already
    stored is read back (resume), so metrics.jsonl comes out the same. With loop.max_staleness >= 1 the games of a
    step overlap the update of the one before (coordinator.run.pipeline); the rows are still written in step order.
    `progress` copies each finished step's phases to the league."""
    book = StepBook(j, run, metrics, progress)
    records = step_records(j, run, steps)
    try:
        for record in records:
            t = record.step if isinstance(record, StepRecord) else 0
            step_var.set(t)
            if reached := book.add(record):
                log.info("compute budget spent after step %d (%s): the run ends here", t, reached)
                return
    finally:
        records.close()


BUDGET_KEYS = ("flops", "tokens", "sandbox_jobs")


def parse_budget(text: str) -> dict[str, int]:
    """`flops=1e15,tokens=2e6,sandbox_jobs=5000` -> {"flops": 10**15, "tokens": 2000000, "sandbox_jobs": 5000}."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if key not in BUDGET_KEYS:
            raise ConfigError(f"--budget {part!r}: unknown budget '{key}'; allowed: {', '.join(BUDGET_KEYS)} "
                              "(e.g. --budget tokens=2e6)")
        try:
            amount = float(value)
        except ValueError:
            raise ConfigError(f"--budget {part!r}: '{value}' is not a number") from None
        if not amount > 0 or amount != amount or amount == float("inf"):
            raise ConfigError(f"--budget {part!r}: the budget must be a positive number")
        out[key] = int(amount)
    return out


def apply_limits(args: argparse.Namespace, cfg: Config) -> None:
    """--steps, --budget and --run-id into cfg.run; a value the config refuses is a ConfigError naming the flag."""
    limits = {f"budget_{key}": ("--budget", value)
              for key, value in parse_budget(getattr(args, "budget", None) or "").items()}
    if args.steps is not None:
        limits["steps"] = ("--steps", args.steps)
    if getattr(args, "run_id", None):
        limits["run_id"] = ("--run-id", args.run_id)
    for field, (flag, value) in limits.items():
        try:
            setattr(cfg.run, field, value)
        except ValidationError as e:
            why = e.errors()[0]["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{flag} {value!r}: {why} (run.{field})") from None


def as_baseline(cfg: Config) -> Config:
    """The AZR baseline of `cfg` (spec 1): one adapter in both roles, AZR's learnability teacher reward (spec 4)."""
    cfg.run.mode = "baseline"
    cfg.rewards.teacher_reward = "learnability"
    cfg.population.n_teachers = cfg.population.n_students = 1
    return cfg


def resolve(args: argparse.Namespace, cfg: Config) -> tuple[Config, str, bool]:
    """The run's config and id from the CLI: a resumed run keeps the config it started with (steps may grow)."""
    modes = set(args.mode or [])
    apply_limits(args, cfg)  # checked before the run database is opened: a refused value leaves nothing behind
    if "baseline" in modes:
        as_baseline(cfg)
    if "population" in modes:
        cfg.run.mode = "population"
    if "distributed" in modes:
        cfg.use_deployment("distributed")
    if "embedded" in modes:
        cfg.use_deployment("embedded")
    if args.resume:
        if not args.run_id:
            raise ConfigError("--resume needs --run-id RUN")
        db = JournalDB(cfg.league_db_url, Backoff.from_config(cfg))
        stored = db.get_run(args.run_id)
        db.close()
        if stored is not None:
            cfg = config_from_yaml(stored["config_yaml"], f"the stored config of run {args.run_id}")
            apply_limits(args, cfg)  # a resumed run may be given more steps or a larger budget
            return cfg, args.run_id, True
        log.info("run %s not found in the journal: starting it", args.run_id)  # a restarted container just works
    apply_limits(args, cfg)
    run_id = args.run_id or cfg.run.run_id or new_run_id(cfg, args.preset or "")
    cfg.run.run_id = run_id
    return Config.model_validate(cfg.model_dump()), run_id, bool(args.resume)


def run_training(cfg: Config, run_id: str, db: JournalDB, workers: int | None = None, progress: bool = False
                 ) -> Path:
    """Train run `run_id` (created in `db` already) to cfg.run.steps, or until its budget is spent; returns the run
    directory. The run's status ends `finished`, or `stopped` when training raised (a phase that failed on every
    delivery marks it `failed`). Distributed (queue.backend=redis): phases go to the step queue, `workers` threads
    of this process among their consumers."""
    services = open_services(cfg)
    run = Run(run_id, cfg, services, ArtifactStore(cfg.store_root), progress=progress)
    queue = stop_workers = None
    if cfg.queue.backend == "redis":
        queue = RedisStreamQueue.from_config(cfg, run_id)
        if not db.phase_rows(run_id):  # nothing stored yet: whatever the stream holds is not this run's
            queue.discard_earlier()
        if workers is None:  # overlapped steps (spec 16) run a step's games beside the previous update: two jobs
            workers = 2 if cfg.loop.max_staleness else 1
        stop_workers = start_worker_threads(run, db, queue, workers)
    run_dir = Path(cfg.run.output_dir) / run_id
    metrics = MetricsWriter(run_dir)
    standing = RunProgress(services.league, db, run_id)  # the journal's status and phases, copied to the league
    standing.status("running")
    try:
        train(Journal(db, run_id, queue, on_phase=standing.stored), run, cfg.run.steps, metrics, standing)
        standing.status("finished")
    except RunFailed:
        standing.status("failed")  # a worker marked the journal's run failed already
        raise
    except BaseException:
        standing.status("stopped")
        raise
    finally:
        if stop_workers is not None:
            stop_workers.set()
        metrics.close()
        services.close()
    return run_dir


def main(args: argparse.Namespace, cfg: Config) -> int:
    setup_logging()
    cfg, run_id, resume = resolve(args, cfg)
    run_id_var.set(run_id)
    db = JournalDB(cfg.league_db_url, Backoff.from_config(cfg))
    if not db.create_run(run_id, cfg.run.mode, cfg.to_yaml()) and not resume:
        print(f"error: run '{run_id}' exists; pass --resume to continue it or choose another --run-id",
              file=sys.stderr)
        return 2
    print(f"run {run_id}: {cfg.run.mode}, {cfg.run.deployment}, model {cfg.model.name}, "
          f"{cfg.population.n_teachers}T+{cfg.population.n_students}S, {cfg.run.steps} steps", flush=True)
    try:
        run_dir = run_training(cfg, run_id, db, getattr(args, "workers", None), progress=sys.stderr.isatty())
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    if not getattr(args, "no_report", False):
        from coordinator.record.report import write_report

        print(f"report: {write_report(run_dir, cfg)}")
    return 0
