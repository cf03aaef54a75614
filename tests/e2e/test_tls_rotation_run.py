"""Rotation without a stop, in the middle of a distributed run. Over mutual TLS: while the seeded two-step run goes
on, every process's CA bundle takes a new CA beside the old, every identity's certificate and key are replaced by
the new CA's, and the old CA is dropped. With scoped tokens (TLS off): the servers take the coordinator's old and
new token (their verifiers: a server holds no token), the coordinator moves to the new one, the servers drop the
old. Each stage comes once the run has made progress after the one before; the run finishes with the one-process
records, no call was refused, and afterwards the old certificate or token is.

The TLS run is also the test of a run over mutual TLS: every service, the coordinator and its worker threads present
their own certificates, so every call of a real run goes through the handshake and the scope check of its caller's
identity (populora.scopes: a method the table left out of the coordinator's scope would fail the run with
PERMISSION_DENIED), and no service takes a plaintext connection."""

from __future__ import annotations

import subprocess
import time

import grpc
import pytest
import yaml

from coordinator.distributed import LocalCluster
from coordinator.run.journal import JournalDB
from populora import certs, rpc
from populora.pb import league_pb2
from populora.tls import TlsFiles
from populora.tokens import verifier
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import differences, reference_records, run_records
from tests.security.test_rotation import _bundle, _install

RUN_ID = "e2e"  # the golden run's id: the seeds derive from it


def _cluster(tmp_path, echo_model, pg_url, redis_url, tls: bool) -> LocalCluster:
    url, prefix = redis_url
    over = [o for o in e2e_overrides(tmp_path, echo_model) if not o.startswith("league.db_url")]
    over += [f"queue.stream_prefix={prefix}", "sandbox.workers=1"]
    return LocalCluster(tmp_path / "cluster", "cpu-tiny", over, db_url=pg_url, redis_url=url, tls=tls)


def _run_through(cluster: LocalCluster, state: JournalDB, stages: list, env: dict | None = None,
                 started=None) -> None:
    """Start the cluster (then call `started`, where given) and the run; apply each stage once the journal shows
    progress since the one before; the run must finish, and make progress after the last stage."""
    cluster.start()
    if started is not None:
        started()
    train = subprocess.Popen(cluster.train_command(RUN_ID, 2, "--no-report"), env=env or cluster.env(),
                             stdout=open(cluster.logs / "train.log", "wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900
    done: list[tuple[str, int]] = []
    mark = 0
    while train.poll() is None:
        assert time.monotonic() < deadline, (cluster.logs / "train.log").read_text()[-3000:]
        rows = len(state.phase_rows(RUN_ID))
        if len(done) < len(stages) and rows > mark:  # the run moved since the last stage: the next one
            name, act = stages[len(done)]
            act()
            done.append((name, rows))
            mark = rows
        time.sleep(0.2)
    assert train.returncode == 0, (cluster.logs / "train.log").read_text()[-3000:]
    final = len(state.phase_rows(RUN_ID))
    assert [n for n, _ in done] == [n for n, _ in stages] and done[-1][1] < final, (done, final)


def _same_records_none_refused(cluster: LocalCluster, state: JournalDB, pg_url: str, echo_model) -> None:
    logs = "".join(f.read_text(errors="replace") for f in cluster.logs.glob("*.log"))
    assert "PERMISSION_DENIED" not in logs and "UNAUTHENTICATED" not in logs
    assert state.get_run(RUN_ID)["status"] == "finished"
    diff = differences(reference_records(echo_model), run_records(state, pg_url, RUN_ID))
    assert not diff, "\n".join(diff)


def test_certificates_and_ca_rotated_mid_run_change_nothing(tmp_path, echo_model, pg_url, redis_url):
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url, tls=True)
    live, old, new = cluster.workdir / "certs", tmp_path / "old", tmp_path / "new"
    old.mkdir()
    for name in certs.NAMES:  # the first CA's files, kept to try them afterwards
        _install(old, live, name)
    _bundle(old, live)
    certs.write_certs(new, days=2)  # the next CA and every identity's certificate under it
    identities = [n for n in certs.NAMES if (live / f"{n}.pem").exists()]
    state = JournalDB(pg_url)
    stages = [
        ("both CAs trusted", lambda: _bundle(live, old, new)),
        ("new certificates", lambda: [_install(live, new, n) for n in identities]),
        ("old CA dropped", lambda: _bundle(live, new)),
    ]

    def plaintext_refused():
        for name in cluster.replicas:  # a plaintext client gets nothing from any of them
            with pytest.raises(grpc.RpcError):
                rpc.health_check(cluster.address(name), timeout=2.0)

    try:
        _run_through(cluster, state, stages, started=plaintext_refused)
        stale = TlsFiles("coordinator", certs.ca_file(old), certs.cert_file(old, "coordinator"),
                         certs.key_file(old, "coordinator"))
        with pytest.raises(grpc.RpcError):  # the old CA's certificate opens nothing now
            rpc.health_check(cluster.address("league"), timeout=3.0, tls=stale, server_name="league")
    finally:
        cluster.stop()
    for name in ("league", "sandbox", "evolver", "trainer", "inference"):  # each served mutual TLS as itself
        assert "mutual TLS as " + name in (cluster.logs / f"{name}.log").read_text(), name
    _same_records_none_refused(cluster, state, pg_url, echo_model)


def test_a_scoped_token_rotated_mid_run_changes_nothing(tmp_path, echo_model, pg_url, redis_url):
    cluster = _cluster(tmp_path, echo_model, pg_url, redis_url, tls=False)
    tokens, mine = tmp_path / "tokens.yaml", tmp_path / "coordinator-token"
    old_token, new_token = "old-" + "o" * 28, "new-" + "n" * 28
    old, new = verifier(old_token), verifier(new_token)  # the servers keep these, never the tokens
    tokens.write_text(yaml.safe_dump({"coordinator": old}))
    mine.write_text(old_token)
    servers = cluster.env()
    servers.pop("POPULORA_TOKEN")  # no deployment-wide token: every call needs its identity's own
    servers["POPULORA__SERVICES__TOKENS_PATH"] = str(tokens)
    cluster.env = lambda: dict(servers)
    coordinator = {**servers, "POPULORA__SERVICES__TOKEN_PATH": str(mine)}
    state = JournalDB(pg_url)
    stages = [
        ("servers take both", lambda: tokens.write_text(yaml.safe_dump({"coordinator": [old, new]}))),
        ("coordinator moves", lambda: mine.write_text(new_token)),
        ("servers drop the old", lambda: tokens.write_text(yaml.safe_dump({"coordinator": new}))),
    ]
    try:
        _run_through(cluster, state, stages, env=coordinator)
        stale = rpc.connect("league", cluster.address("league"), old_token, timeout=10, retries=0)
        try:
            with pytest.raises(rpc.ServiceError) as refused:  # the old token opens nothing now
                stale.CreateRun(league_pb2.CreateRunRequest(run_id="stale", mode="population"))
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        finally:
            stale.close()
    finally:
        cluster.stop()
    _same_records_none_refused(cluster, state, pg_url, echo_model)
