"""End-to-end, distributed with mutual TLS: every service, the coordinator and its worker threads present their
own certificates, so every call of a real run goes through the handshake and the scope check of its caller's
identity (populora.scopes: a method the table left out of the coordinator's scope would fail the run with
PERMISSION_DENIED). The run's records are the seeded one-process run's, and no service took a plaintext
connection."""

from __future__ import annotations

import subprocess
import time

import grpc
import pytest

from coordinator.distributed import LocalCluster
from coordinator.run.journal import JournalDB
from populora import rpc
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import differences, reference_records, run_records

RUN_ID = "e2e"  # the golden run's id: the seeds derive from it


def test_a_run_over_mutual_tls_gives_the_one_process_records(tmp_path, echo_model, pg_url, redis_url):
    url, prefix = redis_url
    over = [o for o in e2e_overrides(tmp_path, echo_model) if not o.startswith("league.db_url")]
    over += [f"queue.stream_prefix={prefix}", "sandbox.workers=1"]
    cluster = LocalCluster(tmp_path, "cpu-tiny", over, db_url=pg_url, redis_url=url, tls=True)
    state = JournalDB(pg_url)
    try:
        cluster.start()
        for name in cluster.replicas:  # a plaintext client gets nothing from any of them
            with pytest.raises(grpc.RpcError):
                rpc.health_check(cluster.address(name), timeout=2.0)
        train = subprocess.Popen(cluster.train_command(RUN_ID, 2, "--no-report"), env=cluster.env(),
                                 stdout=open(cluster.logs / "train.log", "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 900
        while train.poll() is None:
            assert time.monotonic() < deadline, (cluster.logs / "train.log").read_text()[-3000:]
            time.sleep(0.5)
        assert train.returncode == 0, (cluster.logs / "train.log").read_text()[-3000:]
    finally:
        cluster.stop()
    logs = "".join(f.read_text(errors="replace") for f in cluster.logs.glob("*.log"))
    assert "PERMISSION_DENIED" not in logs and "UNAUTHENTICATED" not in logs
    for name in ("league", "sandbox", "evolver", "trainer", "inference"):
        assert "mutual TLS as " + name in (cluster.logs / f"{name}.log").read_text(), name
    assert state.get_run(RUN_ID)["status"] == "finished"
    diff = differences(reference_records(echo_model), run_records(state, pg_url, RUN_ID))
    assert not diff, "\n".join(diff)
