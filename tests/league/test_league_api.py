"""League interfaces: gRPC round trips through the client, REST endpoints, the web page, tokens and errors."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from fastapi.testclient import TestClient
from grpc import StatusCode

from coordinator.clients.services import build
from populora.config import load_config
from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError
from services.league.rest import create_app
from services.league.service import LeagueService
from tests.conftest import served

AUTH = {"Authorization": "Bearer s3cret"}


def _season(client) -> None:
    """A small run through a client: 2 teachers, 2 students, two steps of matches, one child."""
    assert client.CreateRun(pb.CreateRunRequest(run_id="r1", mode="population")).created
    client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="r1", adapters=[
        pb.AdapterSpec(adapter_id=a, role=role, rank=8) for a, role in
        (("T0", "teacher"), ("T1", "teacher"), ("S0", "student"), ("S1", "student"))]))
    for step in range(2):
        pairings = client.Matchmake(pb.MatchmakeRequest(run_id="r1", step=step, seed=1)).pairings
        assert len(pairings) == 6
        results = [pb.MatchResult(match_id=p.match_id, teacher_id=p.teacher_id, student_id=p.student_id,
                                  task_type=p.task_type, step=step, rhos=[1.0 if p.student_id == "S0" else 0.0])
                   for p in pairings]
        out = client.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=results))
        assert out.applied == 6
    client.RecordChild(pb.RecordChildRequest(run_id="r1", child_id="S2", role="student", parent_ids=["S0"],
                                              operator="M1", step=2, retire_id="S1", rank=8))


@pytest.fixture
def grpc_client(league):
    with served(league) as client:
        yield client


def test_grpc_round_trip_matches_in_process(grpc_client, league):
    _season(grpc_client)
    local = league
    remote = grpc_client.GetRatings(pb.GetRatingsRequest(run_id="r1", include_retired=True))
    assert remote == local.GetRatings(pb.GetRatingsRequest(run_id="r1", include_retired=True))
    by_id = {r.adapter_id: r for r in remote.ratings}
    assert by_id["S1"].status == "retired" and list(by_id["S2"].parents) == ["S0"]
    assert by_id["S0"].wins == by_id["S0"].matches > 0
    lin = grpc_client.GetLineage(pb.GetLineageRequest(adapter_id="S2"))
    assert [(e.parent_id, e.operator, e.step) for e in lin.ancestors] == [("S0", "M1", 2)]
    sel = grpc_client.SelectForReplacement(pb.SelectForReplacementRequest(run_id="r1", step=10))
    assert {r.role for r in sel.replacements} == {"teacher", "student"}
    with pytest.raises(ServiceError) as e:
        grpc_client.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=[pb.MatchResult(
            match_id="x", teacher_id="T0", student_id="T1", task_type="code_o", rhos=[0.5])]))
    assert e.value.code == StatusCode.INVALID_ARGUMENT and "matches[0].student_id" in e.value.message
    with pytest.raises(ServiceError) as e:
        grpc_client.GetRatings(pb.GetRatingsRequest(run_id="nope"))
    assert e.value.code == StatusCode.NOT_FOUND


# ids with a control character: tab, newline, U+0013, DEL (NUL has its own check); refused as the sandbox does
CONTROL_IDS = ["a\tb", "a\nb", "a\x13b", "a\x7fb"]


def _league_state(client) -> tuple:
    return (client.GetRatings(pb.GetRatingsRequest(run_id="r1", include_retired=True)),
            client.GetLineage(pb.GetLineageRequest(adapter_id="S0")),
            client.GetCompute(pb.GetComputeRequest(run_id="r1")),
            client.GetEvals(pb.GetEvalsRequest(run_id="r1", include_problems=True)))


def test_grpc_ids_with_control_characters_are_refused(grpc_client, league):
    _season(grpc_client)
    before, runs = _league_state(grpc_client), league.db.list_runs()
    for bad in CONTROL_IDS:
        match = dict(match_id="m", teacher_id="T0", student_id="S0", task_type="code_o", step=3, rhos=[0.5])
        child = dict(run_id="r1", child_id="S9", role="student", parent_ids=["S0"], operator="M1", step=3)
        score = dict(adapter_id="", version=0, benchmark="heldout", step=0, samples=1, n_problems=1, pass_at_1=1.0)
        writes = [
            ("run_id", "CreateRun", pb.CreateRunRequest(run_id=bad, mode="population")),
            ("adapters[0].adapter_id", "RegisterAdapters", pb.RegisterAdaptersRequest(
                run_id="r1", adapters=[pb.AdapterSpec(adapter_id=bad, role="teacher", rank=8)])),
            ("matches[0].match_id", "ReportMatches", pb.ReportMatchesRequest(
                run_id="r1", matches=[pb.MatchResult(**{**match, "match_id": bad})])),
            ("child_id", "RecordChild", pb.RecordChildRequest(**{**child, "child_id": bad})),
            ("operator", "RecordChild", pb.RecordChildRequest(**{**child, "operator": bad})),
            ("usage[0].adapter_id", "RecordCompute", pb.RecordComputeRequest(
                run_id="r1", step=3, usage=[pb.Usage(adapter_id=bad, generated_tokens=5)])),
            ("scores[0].benchmark", "RecordEvals", pb.RecordEvalsRequest(
                run_id="r1", scores=[pb.EvalScore(**{**score, "benchmark": bad})])),
            ("scores[0].problems[0].problem_id", "RecordEvals", pb.RecordEvalsRequest(run_id="r1", scores=[
                pb.EvalScore(**score, problems=[pb.EvalProblem(problem_id=bad, passed=1, n=1)])])),
        ]
        for where, name, request in writes:
            with pytest.raises(ServiceError) as e:
                getattr(grpc_client, name)(request)
            assert e.value.code == StatusCode.INVALID_ARGUMENT, (name, bad, e.value)
            assert e.value.message.startswith(f"{where}: holds the control character U+{ord(bad[1]):04X}"), \
                e.value.message
    assert _league_state(grpc_client) == before and league.db.list_runs() == runs  # nothing written


def test_rest_ids_with_control_characters_are_refused(rest):
    before = {path: rest.get(path).json() for path in ("/v1/runs", "/v1/runs/r1/leaderboard",
                                                      "/v1/runs/r1/lineage", "/v1/runs/r1/matches")}
    match = {"match_id": "m", "teacher_id": "T0", "student_id": "S0", "task_type": "code_o", "step": 3,
             "rhos": [0.5]}
    child = {"child_id": "S9", "role": "student", "parent_ids": ["S0"], "operator": "M1", "step": 3}
    for bad in CONTROL_IDS:
        writes = [
            ("/v1/runs", {"run_id": bad}, ["body", "run_id"]),
            ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": bad, "role": "teacher"}]},
             ["body", "adapters", 0, "adapter_id"]),
            ("/v1/runs/r1/matches", {"matches": [{**match, "match_id": bad}]}, ["body", "matches", 0, "match_id"]),
            ("/v1/runs/r1/matches", {"matches": [{**match, "teacher_id": bad}]},
             ["body", "matches", 0, "teacher_id"]),
            ("/v1/runs/r1/children", {**child, "child_id": bad}, ["body", "child_id"]),
            ("/v1/runs/r1/children", {**child, "parent_ids": [bad]}, ["body", "parent_ids", 0]),
            ("/v1/runs/r1/children", {**child, "retire_id": bad}, ["body", "retire_id"]),
            ("/v1/runs/r1/children", {**child, "operator": bad}, ["body", "operator"]),
            ("/v1/runs/r1/children", {**child, "params": {bad: 1.0}}, ["body", "params", bad, "[key]"]),
        ]
        for path, body, loc in writes:
            resp = rest.post(path, json=body, headers=AUTH)
            assert resp.status_code == 422, (path, body, resp.text)
            assert [d["loc"] for d in resp.json()["detail"]] == [loc], resp.text
        quoted = bad.encode().hex()
        quoted = "%" + "%".join(quoted[i:i + 2] for i in range(0, len(quoted), 2))
        for path in (f"/v1/runs/{quoted}/leaderboard", f"/v1/adapters/{quoted}/lineage"):
            assert rest.get(path).status_code == 422, path
    assert {path: rest.get(path).json() for path in before} == before  # nothing written


def test_embedded_services_build_the_league_in_process(tmp_path):
    cfg = load_config(env=False, overrides=[f"run.output_dir={tmp_path}"])
    league = build("league", cfg)
    try:
        assert isinstance(league, LeagueService)
        assert league.CreateRun(pb.CreateRunRequest(run_id="x")).created
        assert (tmp_path / "league.sqlite").exists()
    finally:
        league.close()


@pytest.fixture
def rest(league):
    _season(league)
    with TestClient(create_app(league)) as client:
        yield client


def test_rest_reads(rest):
    assert rest.get("/healthz").json() == {"status": "ok"}
    metrics = rest.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    runs = rest.get("/v1/runs").json()
    assert [(r["run_id"], r["adapters"], r["active"]) for r in runs] == [("r1", 5, 4)]
    board = rest.get("/v1/runs/r1/leaderboard", params={"role": "student"}).json()
    rows = board["rows"]
    assert [r["adapter_id"] for r in rows][0] == "S0"
    assert {r["adapter_id"] for r in rows} == {"S0", "S1", "S2"}
    skills = [r["conservative_skill"] for r in rows]
    assert skills == sorted(skills, reverse=True)
    s0 = rows[0]
    assert s0["conservative_skill"] == pytest.approx(s0["mu"] - 3 * s0["sigma"])
    assert s0["wins"] == s0["matches"] and s0["status"] == "active"
    s2 = next(r for r in rows if r["adapter_id"] == "S2")
    assert (s2["parents"], s2["operator"]) == (["S0"], "M1")
    active = rest.get("/v1/runs/r1/leaderboard", params={"include_retired": False}).json()["rows"]
    assert "S1" not in {r["adapter_id"] for r in active}
    lin = rest.get("/v1/adapters/S0/lineage").json()
    assert lin["descendants"] == [{"parent_id": "S0", "child_id": "S2", "operator": "M1", "step": 2}]
    hist = rest.get("/v1/adapters/S0/history").json()["history"]
    assert [h["step"] for h in hist] == [0, 1]
    pay = rest.get("/v1/runs/r1/payoff").json()
    assert pay["teachers"] == ["T0", "T1"]
    for t_row in pay["solve_rate"]:
        for j, s in enumerate(pay["students"]):
            if t_row[j] is not None:
                assert t_row[j] == (1.0 if s == "S0" else 0.0)


def test_rest_match_pages_and_filters(rest):
    seen, after = [], 0
    while True:
        page = rest.get("/v1/runs/r1/matches", params={"limit": 5, "after": after}).json()
        seen += page["matches"]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert len(seen) == 12 and len({m["match_id"] for m in seen}) == 12
    assert [m["seq"] for m in seen] == sorted(m["seq"] for m in seen)
    only = rest.get("/v1/runs/r1/matches", params={"teacher_id": "T0", "task_type": "code_f", "step_min": 1}).json()
    assert [(m["teacher_id"], m["task_type"], m["step"]) for m in only["matches"]] == [("T0", "code_f", 1)]
    assert only["matches"][0]["match_id"] == "r1/1/T0/code_f"
    by_adapter = rest.get("/v1/runs/r1/matches", params={"adapter_id": "T1"}).json()["matches"]
    assert len(by_adapter) == 6


def test_rest_unknown_ids_and_bad_queries(rest):
    assert rest.get("/v1/runs/nope/leaderboard").status_code == 404
    assert rest.get("/v1/runs/nope/matches").status_code == 404
    assert rest.get("/v1/runs/nope/payoff").status_code == 404
    assert rest.get("/v1/adapters/nope/lineage").status_code == 404
    assert rest.get("/v1/adapters/nope/history").status_code == 404
    bad = rest.get("/v1/runs/r1/leaderboard", params={"role": "coach"})
    assert bad.status_code == 422 and "role" in bad.text
    assert rest.get("/v1/runs/r1/matches", params={"limit": 0}).status_code == 422


def test_rest_writes_need_the_token_and_validate(rest, league):
    match = {"match_id": "r1/5/T0/code_o", "teacher_id": "T0", "student_id": "S0", "task_type": "code_o",
             "step": 5, "rhos": [0.0]}
    assert rest.post("/v1/runs/r1/matches", json={"matches": [match]}).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert rest.post("/v1/runs/r1/matches", json={"matches": [match]}, headers=wrong).status_code == 401
    before = rest.get("/v1/runs/r1/leaderboard").json()
    bad_rho = rest.post("/v1/runs/r1/matches", json={"matches": [{**match, "rhos": [1.2]}]}, headers=AUTH)
    assert bad_rho.status_code == 422 and "rhos" in bad_rho.text
    tt = rest.post("/v1/runs/r1/matches", json={"matches": [{**match, "student_id": "T1"}]}, headers=AUTH)
    assert tt.status_code == 400 and "matches[0].student_id" in tt.json()["detail"]
    ghost = rest.post("/v1/runs/r1/matches", json={"matches": [{**match, "teacher_id": "ghost"}]}, headers=AUTH)
    assert ghost.status_code == 400 and "matches[0].teacher_id" in ghost.json()["detail"]
    assert rest.post("/v1/runs/nope/matches", json={"matches": [match]}, headers=AUTH).status_code == 404
    assert rest.get("/v1/runs/r1/leaderboard").json() == before
    ok = rest.post("/v1/runs/r1/matches", json={"matches": [match]}, headers=AUTH)
    assert ok.status_code == 200 and ok.json()["applied"] == 1
    assert rest.post("/v1/runs/r1/matches", json={"matches": [match]}, headers=AUTH).json()["duplicates"] == 1
    # A write through the service invalidates the cached leaderboard at once.
    assert rest.get("/v1/runs/r1/leaderboard").json() != before
    assert rest.post("/v1/runs", json={"run_id": "r2"}, headers=AUTH).json() == {"run_id": "r2", "created": True}
    reg = rest.post("/v1/runs/r2/adapters", json={"adapters": [{"adapter_id": "B0", "role": "both"}]}, headers=AUTH)
    assert reg.json() == {"registered": ["B0"]}
    child = rest.post("/v1/runs/r1/children", headers=AUTH, json={
        "child_id": "T2", "role": "teacher", "parent_ids": ["T0"], "operator": "M2", "step": 3, "retire_id": "T1"})
    assert child.status_code == 200 and child.json()["adapter_id"] == "T2"


def test_writes_are_refused_without_a_configured_token(league_url):
    from tests.league.conftest import make_service

    service: LeagueService = make_service(league_url, token="")
    try:
        with TestClient(create_app(service)) as client:
            resp = client.post("/v1/runs", json={"run_id": "x"}, headers={"Authorization": "Bearer "})
            assert resp.status_code == 403 and "token" in resp.json()["detail"]
    finally:
        service.close()


def test_web_page_and_openapi(rest):
    page = rest.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "/static/dashboard.js" in page.text
    spec = rest.get("/openapi.json").json()
    for path in ("/v1/runs", "/v1/runs/{run_id}/leaderboard", "/v1/adapters/{adapter_id}/lineage",
                 "/v1/runs/{run_id}/matches", "/v1/runs/{run_id}/payoff", "/healthz"):
        assert path in spec["paths"]
    assert rest.get("/docs").status_code == 200


def test_read_cache_single_flight_invalidation_and_stale_while_revalidate():
    from services.league.rest_cache import ReadCache

    gen = [0]
    calls = []
    gate = threading.Event()

    def build():
        calls.append(gen[0])
        gate.wait(5)
        return {"gen": gen[0], "n": len(calls)}

    async def scenario():
        cache = ReadCache(ttl=0.2, generation=lambda: gen[0])
        waiters = [asyncio.ensure_future(cache.get(("k",), build)) for _ in range(8)]
        await asyncio.sleep(0.05)
        gate.set()
        bodies = await asyncio.gather(*waiters)
        assert len(calls) == 1 and len(set(bodies)) == 1          # eight misses, one query
        assert await cache.get(("k",), build) == bodies[0]        # a hit
        gen[0] += 1                                               # a write through the service
        assert json.loads(await cache.get(("k",), build))["gen"] == 1
        assert len(calls) == 2
        time.sleep(0.25)                                          # past the TTL: stale answer, one refresh
        stale = await cache.get(("k",), build)
        assert json.loads(stale)["n"] == 2
        await asyncio.sleep(0.1)
        assert json.loads(await cache.get(("k",), build))["n"] == 3

    asyncio.run(scenario())


@pytest.mark.parametrize("ttl", [0.0, 5.0])
def test_read_queries_run_at_most_n_at_once_in_arrival_order(ttl):
    """Uncached reads (and cache misses of distinct keys) take one of `queries` slots; the rest wait in order."""
    from services.league.rest_cache import ReadCache

    running, peak, started = [0], [0], []
    lock = threading.Lock()

    def build(i):
        def run():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                started.append(i)
            time.sleep(0.02)
            with lock:
                running[0] -= 1
            return {"i": i}
        return run

    async def scenario():
        cache = ReadCache(ttl=ttl, generation=lambda: 0, queries=2)
        tasks = []
        for i in range(10):
            tasks.append(asyncio.ensure_future(cache.get(("k", i), build(i))))
            await asyncio.sleep(0.001)  # arrival order 0, 1, 2, ...
        bodies = await asyncio.gather(*tasks)
        assert [json.loads(b)["i"] for b in bodies] == list(range(10))

    asyncio.run(scenario())
    assert peak[0] == 2  # never more than the slots, and both slots used
    # in arrival order, up to the two slots' own race: each read starts within one place of its turn
    assert sorted(started) == list(range(10)) and all(abs(pos - i) <= 1 for pos, i in enumerate(started))


def test_read_queries_default_to_twice_the_cores(tmp_path):
    import os

    from services.league.db import LeagueDB
    from services.league.service import LeagueService

    service = LeagueService(LeagueDB(f"sqlite:///{tmp_path}/l.sqlite"))
    try:
        assert service.read_queries == 2 * (os.cpu_count() or 1)
    finally:
        service.close()
    other = LeagueService(LeagueDB(f"sqlite:///{tmp_path}/m.sqlite"), read_queries=3)
    assert other.read_queries == 3
    other.close()
