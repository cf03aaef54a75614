"""End-to-end, distributed with two trainer and two inference replicas on loopback: each adapter placed on one of
them (spec 17), the run's records the same as the seeded one-process run's (tests/e2e/golden), and a trainer replica
killed with SIGKILL in the middle of an update phase: its adapters go to the other replica, and the run finishes
with nothing lost or applied twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

from coordinator.distributed import LocalCluster
from coordinator.journal import JournalDB
from populora.placement import owner
from populora.store import ArtifactStore
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import differences, reference_records, run_records

RUN_ID = "e2e"  # the golden run's id: the seeds derive from it


def _cluster(tmp_path, echo_model, pg_url, redis_url) -> LocalCluster:
    url, prefix = redis_url
    over = [o for o in e2e_overrides(tmp_path, echo_model) if not o.startswith("league.db_url")]
    over += [f"queue.stream_prefix={prefix}", "sandbox.workers=1"]
    return LocalCluster(tmp_path, "cpu-tiny", over, db_url=pg_url, redis_url=url, trainers=2, inference=2)


def _train(cluster: LocalCluster) -> subprocess.Popen:
    return subprocess.Popen(cluster.train_command(RUN_ID, 2, "--no-report"), env=cluster.env(),
                            stdout=open(cluster.logs / "train.log", "wb"), stderr=subprocess.STDOUT)


def _check(cluster: LocalCluster, state: JournalDB, pg_url: str, echo_model: str) -> None:
    """The records are the one-process run's, and every adapter's last version is 1 + the updates it had."""
    assert state.get_run(RUN_ID)["status"] == "finished"
    got = run_records(state, pg_url, RUN_ID)
    diff = differences(reference_records(echo_model), got)
    assert not diff, "\n".join(diff)
    store = ArtifactStore(cluster.cfg.store_root)
    updates = Counter(a for s in (1, 2) for a in state.get(RUN_ID, s, "update")["stats"])
    for a in state.get(RUN_ID, 0, "init")["population"]:
        assert store.versions(a)[-1] == 1 + updates[a], a


def _updated(cluster: LocalCluster, name: str) -> bool:
    """Whether trainer replica `name` updated an adapter (it logs each update)."""
    return "updated " in (cluster.logs / f"{name}.log").read_text()


def test_two_trainers_and_two_inference_replicas_give_the_one_process_records(tmp_path, echo_model, pg_url,
                                                                              redis_url):
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url)
    state = JournalDB(pg_url)
    try:
        cluster.start()
        train = _train(cluster)
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()
    _check(cluster, state, pg_url, echo_model)
    # each update ran on its adapter's owner: a trainer updated adapters exactly when placement gave it some that
    # had rollouts (on free ports the split differs from run to run)
    trainers = {f"127.0.0.1:{cluster.replicas[n][1]}": n for n in ("trainer-0", "trainer-1")}
    updated = {a for s in (1, 2) for a in state.get(RUN_ID, s, "update")["stats"]}
    owners = {trainers[owner(a, sorted(trainers))] for a in updated}
    assert {n for n in trainers.values() if _updated(cluster, n)} == owners


def test_a_trainer_replica_killed_during_an_update_loses_nothing(tmp_path, echo_model, pg_url, redis_url):
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url)
    state = JournalDB(pg_url)
    trainers = {f"127.0.0.1:{cluster.replicas[n][1]}": n for n in ("trainer-0", "trainer-1")}
    try:
        cluster.start()
        train = _train(cluster)
        deadline = time.monotonic() + 900
        while (init := state.get(RUN_ID, 0, "init")) is None or state.get(RUN_ID, 1, "rate") is None:
            assert train.poll() is None, (cluster.logs / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 1 never reached its update"
            time.sleep(0.05)
        # the replica owning the most adapters is frozen as step 1's update begins, so that the update's part sent
        # to it is in flight when it is killed: once the other replica has done its part (or after a while)
        owners = Counter(owner(a, sorted(trainers)) for a in init["population"])
        victim = trainers[owners.most_common(1)[0][0]]
        other = next(n for n in trainers.values() if n != victim)
        os.killpg(cluster.procs[victim].pid, signal.SIGSTOP)
        frozen = time.monotonic()
        while "-> v2" not in (cluster.logs / f"{other}.log").read_text() and time.monotonic() - frozen < 10:
            time.sleep(0.01)
        assert state.get(RUN_ID, 1, "update") is None
        cluster.kill(victim)
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()
    lost = [json.loads(line) for line in (cluster.logs / "train.log").read_text().splitlines()
            if "does not answer" in line and line.startswith("{")]
    assert [(w["step"], victim in {trainers[a] for a in trainers if a in w["msg"]}) for w in lost] == [(1, True)]
    _check(cluster, state, pg_url, echo_model)
