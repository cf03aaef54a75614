"""End-to-end, distributed: the five services as processes on loopback, Postgres, Redis Streams, an external
phase worker killed with SIGKILL in the middle of a phase and restarted."""

import subprocess
import time

import sqlalchemy as sa

from coordinator.distributed import LocalCluster
from coordinator.journal import JournalDB
from coordinator.queue import RedisStreamQueue
from tests.e2e.conftest import e2e_overrides


def test_distributed_run_survives_a_killed_worker(tmp_path, echo_model, pg_url, redis_url):
    url, prefix = redis_url
    over = [o for o in e2e_overrides(tmp_path, echo_model) if not o.startswith("league.db_url")]
    over += [f"queue.stream_prefix={prefix}", "queue.claim_idle_ms=2000", "sandbox.workers=1"]
    cluster = LocalCluster(tmp_path, "cpu-tiny", over, db_url=pg_url, redis_url=url)
    run_id = "dist-e2e"
    state = JournalDB(pg_url)
    try:
        cluster.start()
        train = subprocess.Popen(cluster.train_command(run_id, 2, "--workers", "0", "--no-report"),
                                 env=cluster.env(), stdout=open(cluster.logs / "train.log", "wb"),
                                 stderr=subprocess.STDOUT)
        cluster.start_worker(run_id, "worker-a")
        # wait until the worker is inside step 2's propose phase (a generation in flight), then kill it
        deadline = time.monotonic() + 900
        while state.get(run_id, 2, "match") is None:
            assert train.poll() is None, (cluster.logs / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 2 never started"
            time.sleep(0.1)
        # ... and holds the propose job, delivered and not yet acknowledged
        queue = RedisStreamQueue(url, run_id, prefix=prefix)
        while not queue.client.xpending_range(queue.stream, queue.GROUP, "-", "+", 10, consumername="worker-a"):
            assert time.monotonic() < deadline, "the worker never took step 2's propose job"
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
    assert state.get_run(run_id)["status"] == "finished"
    reported = [m for s in (1, 2) for m in state.get(run_id, s, "rate")["reported"]]
    engine = sa.create_engine(pg_url)
    with engine.connect() as c:
        db_matches = [r.match_id for r in c.execute(sa.text(
            "SELECT match_id FROM league_matches WHERE run_id = :r"), {"r": run_id})]
        played = c.execute(sa.text("SELECT adapter_id, matches FROM league_adapters WHERE run_id = :r"),
                           {"r": run_id}).all()
    engine.dispose()
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
