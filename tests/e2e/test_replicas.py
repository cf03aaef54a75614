"""End-to-end, distributed with two trainer and two inference replicas on loopback: each adapter placed on one of
them (spec 17), one of each stopped between the steps (the run goes on with one: their adapters move), and a trainer
replica killed with SIGKILL in the middle of an update phase (its adapters go to the other replica). Each time the
run's records, the weights and optimizer states of every version included, are the seeded one-process run's
(tests/e2e/golden): nothing lost, applied twice, or resumed without its optimizer state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

from coordinator.distributed import LocalCluster
from coordinator.run.journal import JournalDB
from populora.placement import owner
from populora.store import ArtifactStore
from tests.e2e.conftest import e2e_overrides
from tests.e2e.faults import span, updates_made
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


def _made_by(cluster: LocalCluster, names) -> dict[tuple[str, int], str]:
    """(adapter, version made) -> the trainer replica whose log says it made that update; each update once."""
    made = [(u, n) for n in names for u in updates_made(cluster.logs / f"{n}.log")]
    assert len({u for u, _ in made}) == len(made), f"an update was applied twice: {sorted(made)}"
    return dict(made)


def test_two_replicas_each_then_one_give_the_one_process_records(tmp_path, echo_model, pg_url, redis_url):
    """Step 1 on two trainer and two inference replicas; between the steps trainer-1 and inference-1 stop, and step
    2 runs on the others, which take their adapters from the store (weights and optimizer state)."""
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url)
    state = JournalDB(pg_url)
    trainers = {f"127.0.0.1:{cluster.replicas[n][1]}": n for n in ("trainer-0", "trainer-1")}
    try:
        cluster.start()
        train = _train(cluster)
        deadline = time.monotonic() + 900
        while state.get(RUN_ID, 1, "account") is None:
            assert train.poll() is None, (cluster.logs / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 1 never finished"
            time.sleep(0.02)
        train.send_signal(signal.SIGSTOP)  # the coordinator waits between the steps while the replicas go
        try:
            stopped = time.time()
            for name in ("trainer-1", "inference-1"):
                cluster.kill(name, signal.SIGTERM)
        finally:
            train.send_signal(signal.SIGCONT)
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()
    _check(cluster, state, pg_url, echo_model)
    assert span(state, RUN_ID, 2, "propose")[0] > stopped  # the rescale came between the steps
    # each update ran on its adapter's owner over the replicas live at its step: placement over both in step 1,
    # trainer-0 alone in step 2 (the adapters that were trainer-1's moved there)
    made = _made_by(cluster, trainers.values())
    expected = {}
    for step, live in ((1, sorted(trainers)), (2, [cluster.address("trainer-0")])):
        update = state.get(RUN_ID, step, "update")
        for a in update["stats"]:
            expected[(a, update["population"][a]["version"])] = trainers[owner(a, live)]
    assert made == expected


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
        killed = time.time()
        cluster.kill(victim)
        assert train.wait(900) == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()
    start, end = span(state, RUN_ID, 1, "update")
    assert start < killed < end, "the replica was not killed while step 1's update was in flight"
    # the victim made none of step 1's updates (frozen, then killed, with its part sent); the other made them all
    made = _made_by(cluster, trainers.values())
    assert {a for (a, v), n in made.items() if n == victim and v == 2} == set()
    lost = [json.loads(line) for line in (cluster.logs / "train.log").read_text().splitlines()
            if "does not answer" in line and line.startswith("{")]
    assert [(w["step"], victim in {trainers[a] for a in trainers if a in w["msg"]}) for w in lost] == [(1, True)]
    _check(cluster, state, pg_url, echo_model)
