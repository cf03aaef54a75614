"""The step queue (in-process and Redis Streams) and the phase state store (SQLite and Postgres)."""

import threading
import time

import pytest

from coordinator.run.journal import JournalDB
from coordinator.run.queue import PhaseJob, RedisStreamQueue


def _redis_queue(redis_url, claim_idle_ms=200):
    url, prefix = redis_url
    return RedisStreamQueue(url, "run1", prefix=prefix, claim_idle_ms=claim_idle_ms)


@pytest.fixture
def queue(redis_url):
    q = _redis_queue(redis_url)
    yield q
    q.close()


def test_fifo_and_ack(queue):
    jobs = [PhaseJob("run1", 1, p) for p in ("match", "propose", "validate")]
    for j in jobs:
        queue.publish(j)
    assert queue.depth() == 3
    got = []
    for _ in jobs:
        d = queue.consume("c1", block_ms=500)
        got.append(d.job)
        queue.ack(d)
    assert got == jobs
    assert queue.depth() == 0
    assert queue.consume("c1", block_ms=100) is None


def test_unacked_job_is_reclaimed_by_another_consumer(queue):
    queue.publish(PhaseJob("run1", 2, "update"))
    first = queue.consume("dies", block_ms=500)
    assert first.deliveries == 1
    # "dies" never acks; before the idle timeout nobody else gets it
    assert queue.consume("other", block_ms=50) is None
    time.sleep(0.3)
    again = queue.consume("other", block_ms=500)
    assert again is not None and again.job == first.job and again.entry_id == first.entry_id
    assert again.deliveries >= 2
    queue.ack(again)
    assert queue.depth() == 0


def test_redis_consumers_share_the_stream(redis_url):
    """Two consumers of one group split the stream: each job goes to exactly one of them, and while one holds a job
    (not acked yet) the other is handed a different one, so both get work."""
    q1, q2 = _redis_queue(redis_url, 60_000), _redis_queue(redis_url, 60_000)
    for s in range(10):
        q1.publish(PhaseJob("run1", s, "match"))
    seen: dict[str, list[int]] = {"a": [], "b": []}
    # each consumer holds its first job until the other has taken one too: a queue that gave both the same job,
    # or gave the second nothing while the first is in flight, breaks the barrier
    both_hold_one = threading.Barrier(2, timeout=10)
    errors = []

    def consume(q, name):
        try:
            while True:
                d = q.consume(name, block_ms=200)
                if d is None:
                    return
                seen[name].append(d.job.step)
                if len(seen[name]) == 1:
                    both_hold_one.wait()
                q.ack(d)
        except threading.BrokenBarrierError:
            errors.append(f"consumer {name} held job {seen[name]} and the other consumer got no job beside it")

    threads = [threading.Thread(target=consume, args=(q, n)) for q, n in ((q1, "a"), (q2, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q1.close()
    q2.close()
    assert not errors, errors
    assert seen["a"] and seen["b"], f"one consumer got every job: {seen}"
    assert sorted(seen["a"] + seen["b"]) == list(range(10)), f"each job delivered once: {seen}"


@pytest.fixture(params=["sqlite", "postgres"])
def state(request, tmp_path):
    if request.param == "sqlite":
        s = JournalDB(f"sqlite:///{tmp_path / 'state.sqlite'}")
    else:
        s = JournalDB(request.getfixturevalue("pg_url"))
    yield s
    s.close()


def test_phase_results_are_insert_once(state):
    assert state.create_run("r", "population", "x: 1")
    assert not state.create_run("r", "population", "x: 2")
    assert state.get("r", 1, "match") is None
    assert state.put("r", 1, "match", {"pairings": [1]}, 0.5)
    assert not state.put("r", 1, "match", {"pairings": [2]}, 0.1)  # a second writer changes nothing
    assert state.get("r", 1, "match") == {"pairings": [1]}
    state.put("r", 1, "propose", {}, 1.0)
    assert [(r["step"], r["phase"]) for r in state.phase_rows("r")] == [(1, "match"), (1, "propose")]
    state.set_status("r", "finished")
    assert state.get_run("r")["status"] == "finished"


def test_discard_earlier_drops_every_entry_and_the_queue_works_after(queue):
    """A run whose journal holds nothing drops what an earlier run of its id left: entries pending at a consumer
    that died and entries never delivered; publishing and consuming then work as on a new stream."""
    for p in ("match", "propose", "update"):
        queue.publish(PhaseJob("run1", 2, p))
    assert queue.consume("dead", block_ms=500) is not None  # delivered, never acked
    assert queue.discard_earlier() == 3
    assert queue.depth() == 0
    assert queue.consume("c1", block_ms=100) is None
    assert queue.discard_earlier() == 0  # nothing left: nothing dropped
    job = PhaseJob("run1", 0, "warmstart")
    queue.publish(job)
    got = queue.consume("c1", block_ms=500)
    assert got is not None and got.job == job and got.deliveries == 1
    queue.ack(got)
    assert queue.depth() == 0


def test_a_consumer_waiting_on_the_stream_reads_on_after_it_is_dropped(redis_url):
    """A worker blocked on the stream while a starting coordinator drops an earlier run's jobs (the stream key is
    deleted: Redis answers the blocked read with UNBLOCKED) gets no job, not an error, and takes the next one."""
    waiting, dropping = _redis_queue(redis_url), _redis_queue(redis_url)
    try:
        dropping.publish(PhaseJob("run1", 1, "match"))
        assert waiting.consume("c1", block_ms=500) is not None  # the group exists; nothing is left to read
        got: list = []
        reader = threading.Thread(target=lambda: got.append(waiting.consume("c1", block_ms=5000)))
        reader.start()
        time.sleep(0.5)  # the read is blocked on the stream now
        assert dropping.discard_earlier() == 1
        reader.join(timeout=10)
        assert not reader.is_alive() and got == [None]
        job = PhaseJob("run1", 0, "warmstart")
        dropping.publish(job)
        after = waiting.consume("c1", block_ms=1000)
        assert after is not None and after.job == job
    finally:
        waiting.close()
        dropping.close()
