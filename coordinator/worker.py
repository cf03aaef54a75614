"""Phase workers: consume phase jobs from the step queue, run the phase, persist its result, then acknowledge.

`python -m coordinator.worker --run-id RUN --db-url URL` joins a distributed run as one more worker; its config is
the run's own (read from the state store).
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

from coordinator.context import RunContext
from coordinator.phases import PHASES
from coordinator.queue import Delivery, StepQueue
from populora.logs import run_id_var, step_var

log = logging.getLogger(__name__)
MAX_DELIVERIES = 4


class PhaseFailed(RuntimeError):
    pass


class Worker:
    def __init__(self, ctx: RunContext, queue: StepQueue, name: str | None = None):
        self.ctx = ctx
        self.queue = queue
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{threading.get_ident() % 10000}"

    def process(self, delivery: Delivery, raise_errors: bool = False) -> None:
        """Run one job unless its result exists; persist, then ack. A failure leaves the job pending (retried after
        the idle timeout) until MAX_DELIVERIES, then the run is marked failed."""
        job = delivery.job
        run_id_var.set(job.run_id)
        step_var.set(job.step)
        if self.ctx.state.get(job.run_id, job.step, job.phase) is not None:
            self.queue.ack(delivery)
            return
        start = time.perf_counter()
        try:
            result = PHASES[job.phase](self.ctx, job.step)
        except Exception as e:
            log.error("phase %s of step %d failed (delivery %d): %s", job.phase, job.step, delivery.deliveries, e)
            if raise_errors:
                raise
            if delivery.deliveries >= MAX_DELIVERIES:
                self.ctx.state.put(job.run_id, job.step, f"failed:{job.phase}",
                                   {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-4000:]},
                                   time.perf_counter() - start, delivery.deliveries)
                self.ctx.state.set_status(job.run_id, "failed")
                self.queue.ack(delivery)
            return
        self.ctx.state.put(job.run_id, job.step, job.phase, result, time.perf_counter() - start,
                           delivery.deliveries)
        self.queue.ack(delivery)

    def run_forever(self, stop: threading.Event, block_ms: int = 1000) -> None:
        while not stop.is_set():
            delivery = self.queue.consume(self.name, block_ms=block_ms)
            if delivery is not None and delivery.job.run_id == self.ctx.run_id:
                self.process(delivery)


def main(argv: list[str] | None = None) -> int:
    from coordinator.context import make_clients
    from coordinator.queue import make_queue
    from coordinator.state import StateStore
    from populora.config import load_config
    from populora.logs import setup_logging
    from populora.store import ArtifactStore

    p = argparse.ArgumentParser(prog="python -m coordinator.worker", description=__doc__)
    p.add_argument("--run-id", required=True)
    p.add_argument("--db-url", required=True, help="the shared database holding the run's state")
    p.add_argument("--name", default=None, help="consumer name (default: host-pid)")
    p.add_argument("--wait-s", type=float, default=300.0, help="how long to wait for the run to be created")
    args = p.parse_args(argv)
    setup_logging(json_lines=True)
    state = StateStore(args.db_url)
    deadline = time.monotonic() + args.wait_s
    run = state.get_run(args.run_id)
    while run is None and time.monotonic() < deadline:  # a worker may start before the coordinator
        time.sleep(0.5)
        run = state.get_run(args.run_id)
    if run is None:
        print(f"error: run '{args.run_id}' not found in {args.db_url} after {args.wait_s:.0f}s", file=sys.stderr)
        return 2
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(run["config_yaml"])
    cfg = load_config(path=f.name, env=False)
    os.unlink(f.name)
    ctx = RunContext(args.run_id, cfg, make_clients(cfg), state, ArtifactStore(cfg.store_root), progress=False)
    worker = Worker(ctx, make_queue(cfg, args.run_id), args.name)
    stop = threading.Event()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("worker %s consuming run %s", worker.name, args.run_id)
    while not stop.is_set():
        delivery = worker.queue.consume(worker.name, block_ms=1000)
        if delivery is not None:
            worker.process(delivery)
        elif state.get_run(args.run_id)["status"] != "running":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
