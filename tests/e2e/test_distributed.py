"""End-to-end, distributed: the five services as processes on loopback, Postgres, Redis Streams, an external
phase worker killed with SIGKILL in the middle of a phase and restarted, in lock-step and with two steps in flight
(loop.max_staleness=1)."""

import subprocess
import time

import sqlalchemy as sa

from coordinator.distributed import LocalCluster
from coordinator.journal import JournalDB
from coordinator.queue import PhaseJob, RedisStreamQueue
from tests.e2e.conftest import e2e_overrides


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


def test_distributed_run_survives_a_killed_worker(tmp_path, echo_model, pg_url, redis_url):
    url, prefix = redis_url
    # lock-step: one worker, one phase at a time (overlap: the test below)
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url, "loop.max_staleness=0")
    run_id = "dist-e2e"
    state = JournalDB(pg_url)
    # jobs an earlier run of this id left in the stream (against another journal, since gone): replayed against
    # this run's journal they would fail again and again and fail the run; a run whose journal holds nothing yet
    # drops them
    earlier = RedisStreamQueue(url, run_id, prefix=prefix)
    for step, phase in ((2, "update"), (1, "rate")):
        earlier.publish(PhaseJob(run_id, step, phase))
    earlier.close()
    try:
        cluster.start()
        train = _train(cluster, run_id, 2)
        cluster.start_worker(run_id, "worker-a")
        # wait until the worker is inside step 2's propose phase (a generation in flight), then kill it
        deadline = time.monotonic() + 600  # inside the test's own timeout, so a stall is reported with the logs
        while state.get(run_id, 2, "match") is None:
            assert train.poll() is None, (cluster.logs / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 2 never started; " + _tails(cluster)
            time.sleep(0.1)
        # ... and holds the propose job, delivered and not yet acknowledged
        queue = RedisStreamQueue(url, run_id, prefix=prefix)
        while not queue.client.xpending_range(queue.stream, queue.GROUP, "-", "+", 10, consumername="worker-a"):
            assert time.monotonic() < deadline, "the worker never took step 2's propose job; " + _tails(cluster)
            time.sleep(0.05)
        assert state.get(run_id, 2, "propose") is None
        cluster.kill("worker-a")
        queue.close()
        time.sleep(1.0)
        cluster.start_worker(run_id, "worker-b")
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()

    rows = {(r["step"], r["phase"]): r for r in state.phase_rows(run_id)}
    assert rows[(2, "propose")]["attempts"] >= 2  # the killed worker's job was reclaimed and run again
    logs = "".join(f.read_text() for f in cluster.logs.glob("*.log"))  # the coordinator's or the worker's word
    assert "held 2 jobs of an earlier run" in logs or "dropped a job of an earlier run" in logs
    assert state.get_run(run_id)["status"] == "finished"
    reported = [m for s in (1, 2) for m in state.get(run_id, s, "rate")["reported"]]
    engine = sa.create_engine(pg_url)
    with engine.connect() as c:
        db_matches = [r.match_id for r in c.execute(sa.text(
            "SELECT match_id FROM league_matches WHERE run_id = :r"), {"r": run_id})]
        played = c.execute(sa.text("SELECT adapter_id, matches FROM league_adapters WHERE run_id = :r"),
                           {"r": run_id}).all()
        # what the dashboard shows, recorded by the coordinator over gRPC: each journal row once, with its attempts
        progress = {(r.step, r.phase): r.attempts for r in c.execute(sa.text(
            "SELECT step, phase, attempts FROM league_phase_progress WHERE run_id = :r"), {"r": run_id})}
        status = c.execute(sa.text("SELECT status FROM league_run_status WHERE run_id = :r"), {"r": run_id}).scalar()
    engine.dispose()
    assert progress == {k: r["attempts"] for k, r in rows.items()} and status == "finished"
    assert reported and sorted(db_matches) == sorted(reported)  # every match id counted once
    assert sum(m for _, m in played) == 2 * len(reported)
    from populora.store import ArtifactStore

    store = ArtifactStore(cluster.cfg.store_root)
    updates: dict[str, int] = {}
    for s in (1, 2):
        for a in state.get(run_id, s, "update")["stats"]:
            updates[a] = updates.get(a, 0) + 1
    for a in state.get(run_id, 0, "init")["population"]:
        assert store.versions(a)[-1] == 1 + updates.get(a, 0), a


def _matches_once(pg_url, state, run_id, steps):
    reported = [m for s in steps for m in state.get(run_id, s, "rate")["reported"]]
    engine = sa.create_engine(pg_url)
    with engine.connect() as c:
        db_matches = [r.match_id for r in c.execute(sa.text(
            "SELECT match_id FROM league_matches WHERE run_id = :r"), {"r": run_id})]
    engine.dispose()
    assert reported and sorted(db_matches) == sorted(reported)  # every match id counted once


def test_a_worker_killed_with_two_steps_in_flight(tmp_path, echo_model, pg_url, redis_url):
    """k = 1, two external workers: step 2's games and step 1's update are both dispatched; one worker is killed
    while it holds one of them. The run finishes with every phase stored once, each match rated once, and each
    adapter's version 1 + the updates the journal holds (no update applied twice)."""
    from populora.store import ArtifactStore

    url, prefix = redis_url
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url, "loop.max_staleness=1", "evolution.every_k=1000")
    run_id = "dist-overlap"
    state = JournalDB(pg_url)
    try:
        cluster.start()
        train = _train(cluster, run_id, 3)
        cluster.start_worker(run_id, "worker-a")
        cluster.start_worker(run_id, "worker-b")
        deadline = time.monotonic() + 900
        while state.get(run_id, 2, "match") is None:  # step 2's games have started beside step 1's update
            assert train.poll() is None, (cluster.logs / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 2 never started"
            time.sleep(0.05)
        queue = RedisStreamQueue(url, run_id, prefix=prefix)
        held = []
        while not held:
            held = queue.client.xpending_range(queue.stream, queue.GROUP, "-", "+", 10, consumername="worker-a")
            assert time.monotonic() < deadline, "worker-a never took a job"
            time.sleep(0.02)
        in_flight = {(r["step"], r["phase"]) for r in state.phase_rows(run_id)}
        entry = queue.client.xrange(queue.stream, held[0]["message_id"], held[0]["message_id"])[0][1]
        killed_job = PhaseJob.from_json(entry[b"job"])
        cluster.kill("worker-a")
        queue.close()
        cluster.start_worker(run_id, "worker-c")
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()

    rows = {(r["step"], r["phase"]): r for r in state.phase_rows(run_id)}
    assert state.get_run(run_id)["status"] == "finished"
    assert (2, "match") in in_flight and (3, "account") in rows
    assert (killed_job.step, killed_job.phase) in rows  # the killed worker's job was taken over and stored
    _matches_once(pg_url, state, run_id, (1, 2, 3))
    store = ArtifactStore(tmp_path / "store")
    updates: dict[str, int] = {}
    for s in (1, 2, 3):
        for a in state.get(run_id, s, "update")["stats"]:
            updates[a] = updates.get(a, 0) + 1
    for a in state.get(run_id, 0, "init")["population"]:
        assert store.versions(a)[-1] == 1 + updates.get(a, 0), a
    stale = {k for st in state.get(run_id, 2, "update")["stats"].values() for k in st["staleness"]}
    assert stale == {"1"}  # step 2 was played by the versions step 1 trained from
