"""Phase workers (distributed mode): take a phase job from the step queue, run that phase, store its result, then
acknowledge. A worker runs the same step function as the coordinator: replaying it, every earlier phase is read from
the journal and the job's phase is computed (coordinator.run.journal.PhaseJournal).

`python -m coordinator.run.worker --run-id RUN --db-url URL` joins a distributed run as one more worker; its config is
the run's own (read from the journal), its token comes from the environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
import traceback

from coordinator.run.journal import ForeignJob, JournalDB, PhaseDone, PhaseJournal, failed_key
from coordinator.run.phases import Run
from coordinator.run.queue import Delivery, RedisStreamQueue
from coordinator.run.step import prepare, train_step
from populora.logs import run_id_var, step_var
from populora.retry import Backoff

log = logging.getLogger(__name__)
MAX_DELIVERIES = 4


def run_phase(run: Run, db: JournalDB, step: int, phase: str, attempts: int = 1) -> None:
    """Compute and store one phase of one step (a no-op when it is stored already)."""
    j = PhaseJournal(db, run.run_id, step, phase, attempts)
    try:
        if step == 0:
            prepare(j, run)
        else:
            train_step(j, run, step)
    except PhaseDone:
        return
    raise RuntimeError(f"run {run.run_id}: step {step} has no phase '{phase}'")


class Worker:
    def __init__(self, run: Run, db: JournalDB, queue: RedisStreamQueue, name: str | None = None):
        self.run, self.db, self.queue = run, db, queue
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{threading.get_ident() % 10000}"

    def process(self, delivery: Delivery) -> None:
        """Run one job, holding it while it runs; store, then ack. A failure leaves the job pending (taken over after
        the idle timeout) until MAX_DELIVERIES, then the run is marked failed."""
        job = delivery.job
        run_id_var.set(job.run_id)
        step_var.set(job.step)
        start = time.perf_counter()
        try:
            with self.queue.holding(self.name, delivery):  # a phase longer than claim_idle_ms is not run twice
                run_phase(self.run, self.db, job.step, job.phase, delivery.deliveries)
        except ForeignJob as e:  # not this run's job: retrying cannot help, and failing it would fail the run
            log.warning("dropped a job of an earlier run with this id (phase %s of step %d): %s", job.phase,
                        job.step, e)
            self.queue.ack(delivery)
            return
        except Exception as e:
            log.error("phase %s of step %d failed (delivery %d): %s", job.phase, job.step, delivery.deliveries, e)
            if delivery.deliveries >= MAX_DELIVERIES:
                self.db.put(job.run_id, job.step, failed_key(job.phase),
                            {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-4000:]},
                            time.perf_counter() - start, delivery.deliveries)
                self.db.set_status(job.run_id, "failed")
                self.queue.ack(delivery)
            return
        self.queue.ack(delivery)

    def run_forever(self, stop: threading.Event, block_ms: int = 1000) -> None:
        while not stop.is_set():
            delivery = self.queue.consume(self.name, block_ms=block_ms)
            if delivery is not None and delivery.job.run_id == self.run.run_id:
                self.process(delivery)


def start_worker_threads(run: Run, db: JournalDB, queue: RedisStreamQueue, n: int) -> threading.Event:
    """`n` worker threads in this process (the coordinator's own); set the returned event to stop them."""
    stop = threading.Event()
    for i in range(n):
        w = Worker(run, db, queue, name=f"coordinator-{i}")
        threading.Thread(target=w.run_forever, args=(stop,), daemon=True, name=f"worker-{i}").start()
    return stop


def main(argv: list[str] | None = None) -> int:
    import signal

    from coordinator.clients.services import open_services
    from populora import names
    from populora.config import config_from_yaml
    from populora.logs import setup_logging
    from populora.store import ArtifactStore

    p = argparse.ArgumentParser(prog="python -m coordinator.run.worker", description=__doc__)
    p.add_argument("--run-id", required=True)
    p.add_argument("--db-url", required=True, help="the shared database holding the run's journal")
    p.add_argument("--name", default=None, help="consumer name (default: host-pid)")
    p.add_argument("--wait-s", type=float, default=300.0, help="how long to wait for the run to be created")
    args = p.parse_args(argv)
    why = names.reason(args.run_id, names.MAX_RUN_ID)
    if why:
        print(f"error: --run-id {args.run_id!r}: {why}", file=sys.stderr)
        return 2
    setup_logging(json_lines=True)
    db = JournalDB(args.db_url, Backoff())  # the run's own outage settings once its config is read
    deadline = time.monotonic() + args.wait_s
    stored = db.get_run(args.run_id)
    while stored is None and time.monotonic() < deadline:  # a worker may start before the coordinator
        time.sleep(0.5)
        stored = db.get_run(args.run_id)
    if stored is None:
        print(f"error: run '{args.run_id}' not found in {args.db_url} after {args.wait_s:.0f}s", file=sys.stderr)
        return 2
    cfg = config_from_yaml(stored["config_yaml"], f"the stored config of run {args.run_id}")
    db.backoff = Backoff.from_config(cfg)
    run = Run(args.run_id, cfg, open_services(cfg), ArtifactStore(cfg.store_root))
    worker = Worker(run, db, RedisStreamQueue.from_config(cfg, args.run_id), args.name)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("worker %s consuming run %s", worker.name, args.run_id)
    while not stop.is_set():
        delivery = worker.queue.consume(worker.name, block_ms=1000)
        if delivery is not None:
            worker.process(delivery)
        elif db.get_run(args.run_id)["status"] != "running":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
