"""Postgres and Redis go away and come back: a distributed run against servers of the test's own, each stopped in
the middle of a phase and started again. The coordinator and the phase worker wait (retries with backoff, logged),
then the run finishes with every phase stored once, every match applied once and the ratings those matches give.
While the database is away both REST services answer 503 with a body that says so, and refuse writes."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
import redis
import sqlalchemy as sa

from coordinator.distributed import LocalCluster
from coordinator.run.journal import JournalDB
from populora.pb import league_pb2
from populora.retry import Backoff, OutageError
from populora.rpc import ServiceError, connect
from tests.conftest import TEST_TOKEN, served
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import differences, reference_records, run_records
from tests.e2e.servers import OwnPostgres, OwnRedis, need_binaries

TIMEOUT = 600.0  # generous: CI runs the whole suite at once on two cores
STEP_PHASES = ["match", "propose", "validate", "solve", "check", "rate", "update"]


def _first_step(records: dict) -> dict:
    """A run's phase records of steps 0 and 1."""
    return {k: v for k, v in records["phases"].items() if int(k.split("/")[0]) <= 1}


def _own(server_class):
    """A server of the test's own (started on a free port in a temporary directory), stopped afterwards."""
    need_binaries()
    server = server_class()
    yield server
    server.close()


@pytest.fixture
def own_postgres():
    yield from _own(OwnPostgres)


@pytest.fixture
def own_redis():
    yield from _own(OwnRedis)


def wait_for(what: str, ready, deadline: float, alive=None, every: float = 0.1):
    """Poll `ready()` until it is truthy (returned); fail naming `what` at the deadline or when `alive()` says the
    run died."""
    while not (got := ready()):
        if alive is not None:
            alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return got


def retries_logged(log: Path, what: str) -> int:
    """How many retries of `what` (a part of the retried call's name) the JSON log lines of `log` report."""
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if "unavailable" in line and "retry" in line and what in line)


def test_a_distributed_run_waits_out_postgres_and_redis(tmp_path, echo_model, own_postgres, own_redis):
    pg, rd = own_postgres, own_redis
    over = [o for o in e2e_overrides(tmp_path, echo_model) if not o.startswith("league.db_url")]
    over += ["queue.claim_idle_ms=2000", "sandbox.workers=1", "outage.wait_s=300", "outage.backoff_initial_s=0.2",
             "outage.backoff_max_s=1.0"]
    cluster = LocalCluster(tmp_path, "cpu-tiny", over, db_url=pg.url, redis_url=rd.url)
    run_id = "e2e"  # the golden run's id and seeds: its first step must come out the same
    train_log, worker_log = cluster.logs / "train.log", cluster.logs / "worker-a.log"
    league_rest = f"http://127.0.0.1:{cluster.cfg.services.league.rest_port}"
    sandbox_rest = f"http://127.0.0.1:{cluster.cfg.services.sandbox.rest_port}"
    auth = {"Authorization": f"Bearer {cluster.token}"}
    deadline = time.monotonic() + TIMEOUT
    try:
        cluster.start()
        state = JournalDB(pg.url)
        train = subprocess.Popen(cluster.train_command(run_id, 1, "--workers", "0", "--no-report"),
                                 env=cluster.env(), stdout=open(train_log, "wb"), stderr=subprocess.STDOUT)

        def alive():
            assert train.poll() is None, train_log.read_text()[-4000:]

        cluster.start_worker(run_id, "worker-a")

        queue = redis.Redis.from_url(rd.url)

        def worker_holds(step: int, phase: str):
            """True once worker-a has taken the job of (step, phase) and not acknowledged it: the phase runs."""
            stream = f"{cluster.cfg.queue.stream_prefix}:steps:{run_id}"
            try:
                pending = queue.xpending_range(stream, "workers", "-", "+", 10, consumername="worker-a")
            except redis.ResponseError:  # the coordinator has not created the stream yet
                return False
            for p in pending:
                job = json.loads(queue.xrange(stream, p["message_id"], p["message_id"])[0][1][b"job"])
                if (job["step"], job["phase"]) == (step, phase):
                    return True
            return False

        # ---- Postgres goes away while step 1 proposes (the worker generating, the coordinator awaiting it)
        population = sorted(wait_for("step 0's init phase", lambda: state.get(run_id, 0, "init"), deadline,
                                     alive)["population"])
        wait_for("the worker to take step 1's propose job", lambda: worker_holds(1, "propose"), deadline, alive)
        pg_stopped = time.time()
        pg.stop()
        with httpx.Client(timeout=30) as http:
            # reads: 503 with a body that names the database (the leaderboard once its 1 s cache has expired)
            for path in (f"/v1/runs/{run_id}/leaderboard", f"/v1/runs/{run_id}/matches",
                         f"/v1/adapters/{population[0]}/history", "/healthz"):
                r = wait_for(f"{path} to stop answering from its cache",
                             lambda p=path: (x := http.get(league_rest + p)).status_code != 200 and x, deadline,
                             every=0.2)
                assert r.status_code == 503 and "league database does not answer" in r.json()["detail"], r.text
                assert r.headers["Retry-After"] == "5"
            # writes: refused, and (checked below) never applied
            probe = {"matches": [{"match_id": "outage-probe", "teacher_id": population[-1],
                                  "student_id": population[0], "task_type": "code_o", "step": 1, "rhos": [1.0]}]}
            r = http.post(f"{league_rest}/v1/runs/{run_id}/matches", json=probe, headers=auth)
            assert r.status_code == 503 and "does not answer" in r.json()["detail"], r.text
            r = http.get(f"{sandbox_rest}/v1/verifiers", headers=auth)
            assert r.status_code == 503 and "database is unavailable" in r.json()["detail"], r.text
            r = http.post(f"{sandbox_rest}/v1/verifiers", headers=auth,
                          json={"name": "outage-probe", "url": "http://127.0.0.1:9/v", "task_types": ["code_o"]})
            assert r.status_code == 503 and "database is unavailable" in r.json()["detail"], r.text
            r = http.delete(f"{sandbox_rest}/v1/verifiers/outage-probe", headers=auth)
            assert r.status_code == 503 and "database is unavailable" in r.json()["detail"], r.text
        # both the coordinator and the worker wait for the journal, and say so
        wait_for("the coordinator to retry the journal", lambda: retries_logged(train_log, "journal database"),
                 deadline, alive)
        wait_for("the worker to retry the journal", lambda: retries_logged(worker_log, "journal database"),
                 deadline, alive)
        pg.start()

        # ---- Redis goes away while step 1 solves (the worker holding the job it will acknowledge)
        wait_for("the worker to take step 1's solve job", lambda: worker_holds(1, "solve"), deadline, alive)
        queue.close()
        rd.stop()
        wait_for("the coordinator to retry the queue", lambda: retries_logged(train_log, "step queue"),
                 deadline, alive)
        wait_for("the worker to retry the queue", lambda: retries_logged(worker_log, "step queue"), deadline, alive)
        rd.start()

        assert train.wait(max(1.0, deadline - time.monotonic())) == 0, train_log.read_text()[-4000:]
    finally:
        cluster.stop()

    # ---- what the run left: every phase once, every match once, the ratings those matches give
    assert state.get_run(run_id)["status"] == "finished"
    rows = {(r["step"], r["phase"]): r for r in state.phase_rows(run_id)}
    assert sorted(rows) == sorted([(0, p) for p in ("warmstart", "init", "seed", "account")]
                                  + [(1, p) for p in [*STEP_PHASES, "account"]])  # no `failed:` row either
    assert rows[(1, "propose")]["finished_at"] > pg_stopped  # the phase in flight when Postgres went away
    reported = state.get(run_id, 1, "rate")["reported"]
    rated = state.get(run_id, 1, "rate")["ratings"]
    members = state.get(run_id, 0, "init")["population"]
    updated = state.get(run_id, 1, "update")["stats"]
    # the one-process run's step 0 and 1, weights and optimizer states included, whatever went away in between
    got = run_records(state, pg.url, run_id)
    state.close()
    diff = differences(*(_first_step(r) for r in (reference_records(echo_model), got)))
    assert not diff, "\n".join(diff)
    assert reported
    engine = sa.create_engine(pg.url)
    with engine.connect() as c:
        matches = c.execute(sa.text("SELECT match_id, teacher_id, student_id, task_type, step, rhos_json FROM "
                                    "league_matches WHERE run_id = :r ORDER BY id"), {"r": run_id}).all()
        adapters = {r.adapter_id: r for r in c.execute(sa.text(
            "SELECT adapter_id, mu, sigma, matches FROM league_adapters WHERE run_id = :r"), {"r": run_id})}
        history = c.execute(sa.text("SELECT adapter_id, step FROM league_rating_history WHERE adapter_id IN "
                                    "(SELECT adapter_id FROM league_adapters WHERE run_id = :r)"),
                            {"r": run_id}).all()
        compute = c.execute(sa.text("SELECT step, adapter_id FROM league_compute WHERE run_id = :r"),
                            {"r": run_id}).all()
        verifiers = c.execute(sa.text("SELECT count(*) FROM external_verifiers")).scalar()
    engine.dispose()
    # each reported match applied once, the refused probe never
    assert sorted(m.match_id for m in matches) == sorted(reported)
    assert verifiers == 0  # the refused registration was not applied either
    assert sum(a.matches for a in adapters.values()) == 2 * len(reported)
    assert len(history) == len(set(history)) and len(compute) == len(set(compute))
    from populora.store import ArtifactStore

    store = ArtifactStore(cluster.cfg.store_root)
    for a in members:  # one trainer update per adapter that had rollouts, none twice
        assert store.versions(a)[-1] == 1 + (a in updated), a

    # the ratings are those of applying each match exactly once, in order: replayed on a fresh league
    from services.league.service import LeagueService

    replay = LeagueService.from_config(cluster.cfg, f"sqlite:///{tmp_path / 'replay.sqlite'}")
    replay.CreateRun(league_pb2.CreateRunRequest(run_id=run_id, mode="population"))
    replay.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id=run_id, adapters=[
        league_pb2.AdapterSpec(adapter_id=a, role=m["role"], rank=cluster.cfg.lora.rank)
        for a, m in sorted(members.items())]))
    replay.ReportMatches(league_pb2.ReportMatchesRequest(run_id=run_id, matches=[
        league_pb2.MatchResult(match_id=m.match_id, teacher_id=m.teacher_id, student_id=m.student_id,
                               task_type=m.task_type, step=m.step, rhos=json.loads(m.rhos_json)) for m in matches]))
    got = {r.adapter_id: (r.mu, r.sigma)
           for r in replay.GetRatings(league_pb2.GetRatingsRequest(run_id=run_id)).ratings}
    replay.close()
    assert sorted(got) == sorted(rated) == sorted(adapters)
    for a, (mu, sigma) in got.items():  # what the league holds, and what the rate phase read back after reporting
        assert adapters[a].mu == pytest.approx(mu, abs=1e-9) and adapters[a].sigma == pytest.approx(sigma, abs=1e-9)
        assert rated[a]["mu"] == pytest.approx(mu, abs=1e-9) and rated[a]["sigma"] == pytest.approx(sigma, abs=1e-9)


# ---- the league over gRPC, its database away: UNAVAILABLE, retried by the client until it is back -------------
def _league(pg: OwnPostgres):
    from populora.config import load_config
    from services.league.service import LeagueService

    cfg = load_config(preset="cpu-tiny", env=False, overrides=[f"league.db_url={pg.url}"])
    return LeagueService.from_config(cfg)


def _match(match_id: str) -> league_pb2.MatchResult:
    return league_pb2.MatchResult(match_id=match_id, teacher_id="r.T0", student_id="r.S0", task_type="code_o",
                                  step=1, rhos=[0.25, 1.0])


def test_a_league_call_waits_for_its_database_and_applies_once(own_postgres, caplog):
    league = _league(own_postgres)
    league.CreateRun(league_pb2.CreateRunRequest(run_id="r", mode="population"))
    league.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id="r", adapters=[
        league_pb2.AdapterSpec(adapter_id="r.T0", role="teacher"), league_pb2.AdapterSpec(adapter_id="r.S0",
                                                                                         role="student")]))
    with served(league) as plain:
        address = plain.address
        own_postgres.stop()
        with pytest.raises(ServiceError) as refused:  # a client that does not wait gets UNAVAILABLE at once
            plain.ReportMatches(league_pb2.ReportMatchesRequest(run_id="r", matches=[_match("m1")]))
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert "league database does not answer" in refused.value.message

        waiting = connect("league", address, TEST_TOKEN, timeout=60, retries=0,
                          backoff=Backoff(wait_s=300, initial_s=0.1, max_s=0.5))
        out: dict = {}

        def report():
            try:
                out["resp"] = waiting.ReportMatches(league_pb2.ReportMatchesRequest(run_id="r",
                                                                                    matches=[_match("m1")]))
            except Exception as e:  # noqa: BLE001 - handed to the test thread
                out["error"] = e

        caplog.set_level("WARNING", logger="populora.retry")
        thread = threading.Thread(target=report, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        wait_for("two logged retries", lambda: len([r for r in caplog.records if "retry" in r.getMessage()]) >= 2,
                 deadline)
        assert thread.is_alive() and not out  # still waiting, nothing applied
        own_postgres.start()
        thread.join(120)
        assert not thread.is_alive()
        assert "error" not in out, out.get("error")
        assert out["resp"].applied == 1 and out["resp"].duplicates == 0
        assert any(re.search(r"League\.ReportMatches .* is back after", r.getMessage()) for r in caplog.records)
        again = waiting.ReportMatches(league_pb2.ReportMatchesRequest(run_id="r", matches=[_match("m1")]))
        assert again.applied == 0 and again.duplicates == 1
        waiting.close()
    ratings = {r.adapter_id: r for r in league.GetRatings(league_pb2.GetRatingsRequest(run_id="r")).ratings}
    assert ratings["r.T0"].matches == 1 and ratings["r.S0"].matches == 1
    league.close()


def test_a_wait_that_runs_out_fails_naming_the_database(own_postgres):
    league = _league(own_postgres)
    with served(league) as plain:
        own_postgres.stop()
        impatient = connect("league", plain.address, TEST_TOKEN, timeout=30, retries=0,
                            backoff=Backoff(wait_s=1.5, initial_s=0.2, max_s=0.5))
        start = time.monotonic()
        with pytest.raises(OutageError, match=r"League\.GetRatings .* still unavailable after .*outage\.wait_s=1\.5"
                                              r".*league database does not answer"):
            impatient.GetRatings(league_pb2.GetRatingsRequest(run_id="r"))
        assert time.monotonic() - start < 30
        impatient.close()
    league.close()


# ---- the sandbox over gRPC, the verifier registry's database away ------------------------------------------------
def test_a_check_routed_to_an_external_verifier_waits_for_the_registry(own_postgres):
    from populora.config import SandboxConfig, TasksConfig
    from populora.pb import common_pb2, sandbox_pb2
    from services.sandbox.registry import VerifierRegistry
    from services.sandbox.service import SandboxService

    registry = VerifierRegistry(own_postgres.url)
    # every code_o attempt goes to the external verifier "ext", looked up in the registry: no job runs here
    sandbox = SandboxService(None, TasksConfig(), SandboxConfig(verifiers={"code_o": "ext"}), registry)
    request = sandbox_pb2.CheckAnswersRequest(attempts=[sandbox_pb2.Attempt(
        attempt_id="a1", response_text="<answer>2</answer>", task=common_pb2.Task(
            task_type="code_o", program="def f(a):\n    return a * 2", inputs=["1"], outputs=["2"]))])
    with served(sandbox) as plain:
        own_postgres.stop()
        with pytest.raises(ServiceError) as refused:
            plain.CheckAnswers(request)
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert "verifier registry's database does not answer" in refused.value.message
        waiting = connect("sandbox", plain.address, TEST_TOKEN, timeout=60, retries=0,
                          backoff=Backoff(wait_s=300, initial_s=0.1, max_s=0.5))
        out: dict = {}
        thread = threading.Thread(target=lambda: out.setdefault("resp", waiting.CheckAnswers(request)), daemon=True)
        thread.start()
        time.sleep(1.0)  # the call keeps being refused while the database is away
        assert thread.is_alive() and not out
        own_postgres.start()
        thread.join(120)
        waiting.close()
    [result] = out["resp"].results  # answered once the registry could be read: "ext" was never registered
    assert result.outcome == "verifier_error" and "not registered" in result.detail
    registry.close()


# ---- the step queue, Redis restarted without its data -------------------------------------------------------------
def test_a_queue_that_lost_its_data_is_recreated_and_the_awaited_job_published_again(tmp_path):
    need_binaries()
    from coordinator.run.journal import Journal
    from coordinator.run.queue import RedisStreamQueue
    from populora.records import Matched, Pairing, to_json

    rd = OwnRedis(persistent=False)
    backoff = Backoff(wait_s=120, initial_s=0.1, max_s=0.5)
    try:
        coordinator_q = RedisStreamQueue(rd.url, "r", backoff=backoff)
        worker_q = RedisStreamQueue(rd.url, "r", backoff=backoff)
        db = JournalDB(f"sqlite:///{tmp_path / 'journal.sqlite'}")
        journal = Journal(db, "r", coordinator_q, poll_s=0.05)
        journal.REPUBLISH_CHECK_S = 0.5
        record = Matched([Pairing("r/1/m0", "r.T0", "r.S0", "code_o")])
        published = threading.Event()
        real_publish = coordinator_q.publish

        def publish(job):
            entry = real_publish(job)
            published.set()
            return entry

        coordinator_q.publish = publish
        out: dict = {}
        waiting = threading.Thread(target=lambda: out.setdefault("got", journal.once(1, "match", None)), daemon=True)
        waiting.start()
        assert published.wait(60)
        rd.stop()  # the job is lost with everything else
        rd.start()
        # a worker finds no group (recreated), then the job the coordinator publishes again
        deadline = time.monotonic() + 120
        delivery = None
        while delivery is None:
            assert time.monotonic() < deadline, "the job was never published again"
            delivery = worker_q.consume("w", block_ms=200)
        assert (delivery.job.step, delivery.job.phase) == (1, "match")
        db.put("r", 1, "match", to_json(record), 0.1)
        worker_q.ack(delivery)
        waiting.join(60)
        assert out["got"] == record
        coordinator_q.close()
        worker_q.close()
        db.close()
    finally:
        rd.close()
