"""End-to-end, distributed: the five services as processes on loopback, Postgres, Redis Streams, an external
phase worker killed with SIGKILL in the middle of a phase and restarted, in lock-step and with two steps in flight
(loop.max_staleness=1)."""

import subprocess
import time

import sqlalchemy as sa

from coordinator.distributed import LocalCluster
from coordinator.run.journal import JournalDB
from coordinator.run.queue import PhaseJob, RedisStreamQueue
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import differences, reference_records, run_records
from tests.e2e.test_overlap import _without

RUN_ID = "e2e"  # the golden run's id: the seeds derive from it


def _cluster(tmp_path, echo_model, pg_url, redis_url, *extra: str) -> LocalCluster:
    """cpu-tiny on loopback against the test's Postgres schema and Redis prefix, with `extra` overrides."""
    url, prefix = redis_url
    over = [o for o in e2e_overrides(tmp_path, echo_model) if not o.startswith("league.db_url")]
    over += [f"queue.stream_prefix={prefix}", "queue.claim_idle_ms=2000", "sandbox.workers=1", *extra]
    return LocalCluster(tmp_path, "cpu-tiny", over, db_url=pg_url, redis_url=url)


def _train(cluster: LocalCluster, run_id: str, steps: int) -> subprocess.Popen:
    """The coordinator with no worker threads of its own: the external workers take every phase."""
    return subprocess.Popen(cluster.train_command(run_id, steps, "--workers", "0", "--no-report"),
                            env=cluster.env(), stdout=open(cluster.logs / "train.log", "wb"),
                            stderr=subprocess.STDOUT)


def _tails(cluster, chars: int = 1500) -> str:
    """The end of every log of the cluster (the coordinator's, the worker's, each service's)."""
    return "\n".join(f"--- {f.name}:\n{f.read_text(errors='replace')[-chars:]}" for f in sorted(cluster.logs.glob("*.log")))


STEP_PHASES = ["match", "propose", "validate", "solve", "check", "rate", "update", "evolve", "account"]


class JournalGate:
    """Holds the journal's phase table locked (Postgres EXCLUSIVE: reads go on, inserts wait), so a worker that has
    done a phase's work waits to store its result, holding its job: the window between a phase's effects (ratings,
    versions, buffers) and its record, where a killed worker must leave nothing applied twice. `let_one` lets the
    waiting insert through and locks again behind it, before any later phase can be stored (it is published only
    once this one is)."""

    def __init__(self, url: str):
        self.engine = sa.create_engine(url)
        self.conn = self.engine.connect()
        self._lock()

    def _lock(self) -> None:
        self.conn.execute(sa.text("LOCK TABLE coord_phases IN EXCLUSIVE MODE"))

    def waiting(self) -> bool:
        """Whether an insert into the phase table waits for the lock."""
        with self.engine.connect() as c:
            return bool(c.execute(sa.text(
                "SELECT count(*) FROM pg_locks l JOIN pg_class t ON t.oid = l.relation "
                "WHERE t.relname = 'coord_phases' AND NOT l.granted")).scalar())

    def let_one(self) -> None:
        self.conn.commit()  # the waiting insert takes the table, then this lock queues behind it
        self._lock()

    def close(self) -> None:
        self.conn.commit()
        self.conn.close()
        self.engine.dispose()


def _held(queue: RedisStreamQueue, consumer: str) -> list[PhaseJob]:
    """The jobs `consumer` holds (delivered, not acknowledged)."""
    out = []
    for p in queue.client.xpending_range(queue.stream, queue.GROUP, "-", "+", 10, consumername=consumer):
        entry = queue.client.xrange(queue.stream, p["message_id"], p["message_id"])
        if entry:
            out.append(PhaseJob.from_json(entry[0][1][b"job"]))
    return out


def test_a_worker_killed_in_every_phase_gives_the_one_process_records(tmp_path, echo_model, pg_url, redis_url):
    """Lock-step, one external worker at a time, run "e2e" (the golden run's id and seeds). Every phase of step 2
    (evolution included) is made to wait before its result is stored (JournalGate); the worker holding it is killed
    with SIGKILL and a new one takes the job over. The run's records, weights and optimizer states included, are
    the seeded one-process run's, and the journal shows each of those phases stored on a later delivery."""
    url, prefix = redis_url
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url, "loop.max_staleness=0")
    run_id = RUN_ID
    state = JournalDB(pg_url)
    # jobs an earlier run of this id left in the stream (against another journal, since gone): replayed against
    # this run's journal they would fail again and again and fail the run; a run whose journal holds nothing yet
    # drops them
    earlier = RedisStreamQueue(url, run_id, prefix=prefix)
    for step, phase in ((2, "update"), (1, "rate")):
        earlier.publish(PhaseJob(run_id, step, phase))
    earlier.close()
    gate = JournalGate(pg_url)
    queue = RedisStreamQueue(url, run_id, prefix=prefix)
    killed = []
    try:
        cluster.start()
        train = _train(cluster, run_id, 2)
        worker = 0
        cluster.start_worker(run_id, f"worker-{worker}")
        deadline = time.monotonic() + 900
        while train.poll() is None:
            assert time.monotonic() < deadline, "the run did not finish; " + _tails(cluster)
            if not gate.waiting():
                time.sleep(0.02)
                continue
            held = _held(queue, f"worker-{worker}")
            job = held[0] if held else None
            if job is not None and job.step == 2 and job.phase not in {p for _, p in killed}:
                cluster.kill(f"worker-{worker}")  # it did the phase's work; its result is not stored
                killed.append((job.step, job.phase))
                worker += 1
                cluster.start_worker(run_id, f"worker-{worker}")
                continue  # the new worker takes the job over (claim_idle_ms) and waits at the gate in its turn
            gate.let_one()
        assert train.wait(60) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        gate.close()
        queue.close()
        cluster.stop()

    assert [p for _, p in killed] == STEP_PHASES, killed
    rows = {(r["step"], r["phase"]): r for r in state.phase_rows(run_id)}
    for step, phase in killed:  # each stored on a later delivery than the killed worker's
        assert rows[(step, phase)]["attempts"] >= 2, (step, phase)
    logs = "".join(f.read_text() for f in cluster.logs.glob("*.log"))  # the coordinator's or the worker's word
    assert "held 2 jobs of an earlier run" in logs or "dropped a job of an earlier run" in logs
    assert state.get_run(run_id)["status"] == "finished"
    # the versions the killed update had written are recognised, not made again (`reused`)
    diff = differences(_without(reference_records(echo_model)), _without(run_records(state, pg_url, run_id)))
    assert not diff, "\n".join(diff)
    engine = sa.create_engine(pg_url)
    with engine.connect() as c:
        # what the dashboard shows, recorded by the coordinator over gRPC: each journal row once, with its attempts
        progress = {(r.step, r.phase): r.attempts for r in c.execute(sa.text(
            "SELECT step, phase, attempts FROM league_phase_progress WHERE run_id = :r"), {"r": run_id})}
        status = c.execute(sa.text("SELECT status FROM league_run_status WHERE run_id = :r"), {"r": run_id}).scalar()
    engine.dispose()
    assert progress == {k: r["attempts"] for k, r in rows.items()} and status == "finished"


def _matches_once(pg_url, state, run_id, steps):
    reported = [m for s in steps for m in state.get(run_id, s, "rate")["reported"]]
    engine = sa.create_engine(pg_url)
    with engine.connect() as c:
        db_matches = [r.match_id for r in c.execute(sa.text(
            "SELECT match_id FROM league_matches WHERE run_id = :r"), {"r": run_id})]
    engine.dispose()
    assert reported and sorted(db_matches) == sorted(reported)  # every match id counted once


def test_a_worker_killed_with_two_steps_in_flight(tmp_path, echo_model, pg_url, redis_url):
    """k = 1, two external workers, the overlapped run of tests/e2e/test_overlap.py (run "ov", three steps, evolution
    at step 2): step 2's games and step 1's update are both dispatched, and the worker holding step 1's update is
    killed while step 2's games go on beside it. The run finishes with the records, weights and optimizer states of
    the seeded one-process overlapped run: every phase stored once, each match rated once, no update applied
    twice."""
    from populora.store import ArtifactStore
    from tests.e2e.test_overlap import OVERLAP, RUN, STEPS, overlap_reference

    url, prefix = redis_url
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url, *OVERLAP)
    state = JournalDB(pg_url)
    queue = RedisStreamQueue(url, RUN, prefix=prefix)
    try:
        cluster.start()
        train = _train(cluster, RUN, STEPS)
        for name in ("worker-a", "worker-b"):
            cluster.start_worker(RUN, name)
        deadline, victim = time.monotonic() + 900, None
        while victim is None:  # the worker holding step 1's update, once step 2's games have begun beside it
            assert train.poll() is None, (cluster.logs / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 2's games never ran beside step 1's update"
            assert state.get(RUN, 1, "update") is None, "step 1's update ended before step 2's games were seen"
            if state.get(RUN, 2, "match") is not None:
                victim = next((n for n in ("worker-a", "worker-b")
                               if any((j.step, j.phase) == (1, "update") for j in _held(queue, n))), None)
            time.sleep(0.01)
        in_flight = {(r["step"], r["phase"]) for r in state.phase_rows(RUN)}
        killed = time.time()
        cluster.kill(victim)
        cluster.start_worker(RUN, "worker-c")
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        queue.close()
        cluster.stop()

    rows = {(r["step"], r["phase"]): r for r in state.phase_rows(RUN)}
    assert state.get_run(RUN)["status"] == "finished"
    # two steps were in flight at the kill, and step 1's update was stored after it, on a later delivery
    assert (2, "match") in in_flight and (1, "update") not in in_flight
    assert rows[(1, "update")]["attempts"] >= 2 and rows[(1, "update")]["finished_at"] > killed
    _matches_once(pg_url, state, RUN, (1, 2, 3))
    store = ArtifactStore(tmp_path / "store")
    updates: dict[str, int] = {}
    for s in (1, 2, 3):
        for a in state.get(RUN, s, "update")["stats"]:
            updates[a] = updates.get(a, 0) + 1
    for a in state.get(RUN, 0, "init")["population"]:
        assert store.versions(a)[-1] == 1 + updates.get(a, 0), a
    # the versions the killed worker's update had written are recognised, not made again (`reused`)
    diff = differences(_without(overlap_reference(echo_model)), _without(run_records(state, pg_url, RUN)))
    assert not diff, "\n".join(diff)
