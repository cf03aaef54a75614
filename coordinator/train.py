"""`populora train`: the step loop. For each step, each phase is published to the step queue, run by a worker,
persisted, and only then is the next phase published; a restarted coordinator skips what is persisted."""

from __future__ import annotations

import logging
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from coordinator.context import RunContext, make_clients
from coordinator.phases import phases_of
from coordinator.queue import PhaseJob, make_queue
from coordinator.state import StateStore
from coordinator.stepmetrics import MetricsWriter, step_metrics
from coordinator.worker import Worker
from populora.config import Config, ConfigError, load_config
from populora.logs import run_id_var, setup_logging, step_var
from populora.metrics import QUEUE_DEPTH
from populora.store import ArtifactStore

log = logging.getLogger(__name__)


class RunFailed(RuntimeError):
    pass


def new_run_id(cfg: Config, label: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", label or cfg.model.name.split("/")[-1])[:40].strip("-") or "run"
    return f"{stem}-{cfg.run.mode[:4]}-{time.strftime('%Y%m%d-%H%M%S')}"


class Coordinator:
    """Drives one run: publishes phase jobs in order and waits for each to be persisted."""

    def __init__(self, cfg: Config, run_id: str, state: StateStore, clients=None, local_workers: int = 1,
                 progress: bool = True):
        self.cfg = cfg
        self.run_id = run_id
        self.state = state
        self.store = ArtifactStore(cfg.store_root)
        self.ctx = RunContext(run_id, cfg, clients or make_clients(cfg), state, self.store, progress=progress)
        self.queue = make_queue(cfg, run_id)
        self.run_dir = Path(cfg.run.output_dir) / run_id
        self.metrics = MetricsWriter(self.run_dir)
        self.local_workers = local_workers
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # In embedded mode (in-process queue) the coordinator's own thread runs each job; with Redis, worker threads
    # (and any `python -m coordinator.worker` processes) consume the stream.
    def _start_workers(self) -> None:
        if self.cfg.queue.backend != "redis":
            return
        for i in range(self.local_workers):
            w = Worker(self.ctx, self.queue, name=f"coordinator-{i}")
            t = threading.Thread(target=w.run_forever, args=(self._stop,), daemon=True, name=f"worker-{i}")
            t.start()
            self._threads.append(t)

    def _run_phase(self, step: int, phase: str) -> None:
        if self.state.get(self.run_id, step, phase) is not None:
            return
        self.queue.publish(PhaseJob(self.run_id, step, phase))
        QUEUE_DEPTH.labels(self.run_id).set(self.queue.depth())
        if self.cfg.queue.backend != "redis":
            delivery = self.queue.consume("coordinator", block_ms=0)
            Worker(self.ctx, self.queue, "coordinator").process(delivery, raise_errors=True)
            return
        while self.state.get(self.run_id, step, phase) is None:
            run = self.state.get_run(self.run_id)
            if run and run["status"] == "failed":
                failed = self.state.get(self.run_id, step, f"failed:{phase}") or {}
                raise RunFailed(f"phase {phase} of step {step} failed: {failed.get('error', 'see worker logs')}")
            time.sleep(0.2)

    def run(self, steps: int) -> Path:
        run_id_var.set(self.run_id)
        self._start_workers()
        done = {(s, p) for s, p in self.state.done_phases(self.run_id)}
        rows = []
        try:
            for step in range(0, steps + 1):
                step_var.set(step)
                names = phases_of(step, self.cfg)
                resumed = all((step, p) in done for p in names)
                start = time.perf_counter()
                for phase in names:
                    t0 = time.perf_counter()
                    self._run_phase(step, phase)
                    if (step, phase) not in done:
                        log.info("step %d %-8s %.1fs", step, phase, time.perf_counter() - t0)
                seconds = self._phase_seconds(step)
                row = step_metrics(self.ctx, step, seconds)
                rows.append(row)
                if resumed:
                    continue
                self.metrics.rewrite(rows[:-1])
                self.metrics.write(row)
                log.info("step %d done in %.1fs: %s", step, time.perf_counter() - start, summary(row))
            self.state.set_status(self.run_id, "finished")
        finally:
            self._stop.set()
            self.metrics.close()
        return self.run_dir

    def _phase_seconds(self, step: int) -> dict[str, float]:
        return {r["phase"]: r["seconds"] for r in self.state.phase_rows(self.run_id) if r["step"] == step
                and not r["phase"].startswith("failed:")}


def summary(row: dict) -> str:
    if row["step"] == 0:
        return f"seed buffers {row['seed_sizes']}"
    parts = [f"valid {row['valid_rate']:.2f}" if row.get("valid_rate") is not None else "valid -"]
    for tt, m in row.get("task_types", {}).items():
        sr = m.get("solve_rate")
        parts.append(f"{tt} solve {sr:.2f}" if sr is not None else f"{tt} solve -")
    if row.get("evolution"):
        parts.append("evolved " + ", ".join(f"{e['retired']}->{e['child']} ({e['operator']})"
                                            for e in row["evolution"]))
    return "; ".join(parts)


def _resolve(args) -> tuple[Config, str, bool]:
    """Config and run id from the CLI: a resumed run keeps the config it started with (steps may grow)."""
    from coordinator.cli import load_cli_config

    cfg = load_cli_config(args)
    modes = set(args.mode or [])
    if "baseline" in modes:
        cfg.run.mode = "baseline"
        cfg.rewards.teacher_reward = "learnability"
        cfg.population.n_teachers = cfg.population.n_students = 1
    if "population" in modes:
        cfg.run.mode = "population"
    if "distributed" in modes:
        cfg.run.deployment = "distributed"
        cfg.queue.backend = "redis"
    if "embedded" in modes:
        cfg.run.deployment = "embedded"
        cfg.queue.backend = "inprocess"
    if args.resume:
        if not args.run_id:
            raise ConfigError("--resume needs --run-id RUN")
        state = StateStore(cfg.league_db_url)
        run = state.get_run(args.run_id)
        state.close()
        if run is None:  # nothing to resume: start it (so a restarted coordinator container just works)
            log.info("run %s not found in the state store: starting it", args.run_id)
            if args.steps is not None:
                cfg.run.steps = args.steps
            cfg.run.run_id = args.run_id
            return Config.model_validate(cfg.model_dump()), args.run_id, True
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(run["config_yaml"])
        stored = load_config(path=f.name, env=False)
        Path(f.name).unlink()
        if args.steps is not None:
            stored.run.steps = args.steps
        return stored, args.run_id, True
    if args.steps is not None:
        cfg.run.steps = args.steps
    run_id = args.run_id or cfg.run.run_id or new_run_id(cfg, args.preset or "")
    cfg.run.run_id = run_id
    return Config.model_validate(cfg.model_dump()), run_id, False


def main(args) -> int:
    setup_logging()
    cfg, run_id, resume = _resolve(args)
    state = StateStore(cfg.league_db_url)
    if not state.create_run(run_id, cfg.run.mode, cfg.to_yaml()) and not resume:
        print(f"error: run '{run_id}' exists; pass --resume to continue it or choose another --run-id",
              file=sys.stderr)
        return 2
    state.set_status(run_id, "running")
    print(f"run {run_id}: {cfg.run.mode}, {cfg.run.deployment}, model {cfg.model.name}, "
          f"{cfg.population.n_teachers}T+{cfg.population.n_students}S, {cfg.run.steps} steps", flush=True)
    coord = Coordinator(cfg, run_id, state, local_workers=getattr(args, "workers", 1),
                        progress=sys.stderr.isatty())
    try:
        run_dir = coord.run(cfg.run.steps)
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BaseException:
        state.set_status(run_id, "stopped")
        raise
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    if not getattr(args, "no_report", False):
        from coordinator.report import write_report

        path = write_report(run_dir, cfg)
        print(f"report: {path}")
    return 0
