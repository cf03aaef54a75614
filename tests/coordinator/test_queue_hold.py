"""A phase longer than `queue.claim_idle_ms` stays with the worker computing it: no other consumer takes its job over
and runs the phase a second time beside it (SmolLM2's warm-start fit and propose batches take minutes on CPU, the
idle timeout one); a worker that stopped, killed or failed, still has its job taken over."""

import threading
import time

import pytest

from coordinator.run import worker as worker_module
from coordinator.run.queue import PhaseJob, RedisStreamQueue
from coordinator.run.worker import Worker

IDLE_MS = 300


@pytest.fixture
def queue(redis_url):
    url, prefix = redis_url
    q = RedisStreamQueue(url, "run1", prefix=prefix, claim_idle_ms=IDLE_MS)
    yield q
    q.close()


def _taken_over(queue: RedisStreamQueue, seconds: float) -> list:
    """What another consumer is handed first while polling for `seconds` (nothing, or one delivery)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        d = queue.consume("other", block_ms=50)
        if d is not None:
            return [d]
    return []


def test_a_held_job_is_not_taken_over_however_long_and_is_once_its_holder_stops(queue):
    queue.publish(PhaseJob("run1", 1, "propose"))
    first = queue.consume("slow", block_ms=500)
    with queue.holding("slow", first):
        assert _taken_over(queue, 4 * IDLE_MS / 1000) == []  # four idle timeouts, still held
    # stopped without acknowledging (a failed phase, a killed worker): taken over after the idle timeout, counted
    # as its second delivery (holding it did not count as deliveries)
    again = _taken_over(queue, 3 * IDLE_MS / 1000)
    assert [(d.entry_id, d.job, d.deliveries) for d in again] == [(first.entry_id, first.job, 2)]
    assert not queue.hold("slow", first)  # no longer the slow consumer's to hold
    queue.ack(again[0])
    assert queue.depth() == 0


def test_a_worker_holds_its_job_while_the_phase_runs(queue, monkeypatch):
    """Worker.process holds the job for the phase's whole run, and acknowledges it after."""
    seen: list = []
    running = threading.Event()

    def slow_phase(run, db, step, phase, attempts):
        running.set()
        time.sleep(4 * IDLE_MS / 1000)

    monkeypatch.setattr(worker_module, "run_phase", slow_phase)
    queue.publish(PhaseJob("run1", 1, "update"))
    w = Worker(run=None, db=None, queue=queue, name="slow")
    delivery = queue.consume("slow", block_ms=500)
    t = threading.Thread(target=w.process, args=(delivery,))
    t.start()
    assert running.wait(5)
    seen += _taken_over(queue, 3.5 * IDLE_MS / 1000)
    t.join(10)
    assert seen == [] and queue.depth() == 0  # never handed to another consumer; acknowledged once done


def test_a_job_nobody_holds_is_taken_over_after_the_idle_timeout(queue):
    """As before holding: a worker killed mid-phase (nothing holds its job) loses it to another consumer."""
    queue.publish(PhaseJob("run1", 2, "update"))
    queue.consume("killed", block_ms=500)
    again = _taken_over(queue, 3 * IDLE_MS / 1000)
    assert len(again) == 1 and again[0].deliveries == 2
