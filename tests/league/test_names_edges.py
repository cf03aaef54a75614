"""The league's edges agree on what a name is, against its real REST server (uvicorn) and its real gRPC server, on
SQLite and Postgres: hostile run, adapter and child ids are refused (422, INVALID_ARGUMENT) with nothing written;
valid ones round-trip; a write that contradicts what exists is a 409 (ALREADY_EXISTS) and changes nothing, while the
same write again still succeeds; and the OpenAPI document declares the bearer scheme on exactly the writes."""

from __future__ import annotations

import urllib.parse

import httpx
import pytest
from grpc import StatusCode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from populora import names
from populora.pb import league_pb2 as pb
from populora.ports import free_port
from populora.rpc import ServiceError
from services.league.rest import LeagueRestServer
from tests.conftest import served
from tests.league.test_league_api import _league_state, _season

TOKEN = "s3cret"  # the `league` fixture's
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# what fuzzing the REST API and the CLI from outside found accepted, and its relatives
HOSTILE = ["a/b", "..", "../x", ".", "a\\b", "é", "run\u200b", "a b", "-x", ".x", "x" * 129, "a\x00b", "a\tb",
           "S0/../S1"]


@pytest.fixture
def api(league):
    """The league after a small season, behind its real REST server with writes enabled."""
    _season(league)
    server = LeagueRestServer(league, port=free_port(), read_only=False).start()
    with httpx.Client(base_url=server.url.rstrip("/"), timeout=30) as client:
        yield client
    server.server.should_exit = True
    server._thread.join(10)  # the fixture `league` closes the service


def _refused_with_422(resp: httpx.Response, loc: list) -> None:
    assert resp.status_code == 422, resp.text
    assert [d["loc"] for d in resp.json()["detail"]] == [loc], resp.text


def test_rest_refuses_hostile_ids_and_writes_nothing(api, league):
    before, runs = _league_state(league), league.db.list_runs()
    match = {"match_id": "m-new", "teacher_id": "T0", "student_id": "S0", "task_type": "code_o", "step": 3,
             "rhos": [0.5]}
    child = {"child_id": "S9", "role": "student", "parent_ids": ["S0"], "operator": "M1", "step": 3}
    for bad in HOSTILE:
        writes = [
            ("/v1/runs", {"run_id": bad}, ["body", "run_id"]),
            ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": bad, "role": "teacher"}]},
             ["body", "adapters", 0, "adapter_id"]),
            ("/v1/runs/r1/matches", {"matches": [{**match, "teacher_id": bad}]}, ["body", "matches", 0, "teacher_id"]),
            ("/v1/runs/r1/matches", {"matches": [{**match, "student_id": bad}]}, ["body", "matches", 0, "student_id"]),
            ("/v1/runs/r1/children", {**child, "child_id": bad}, ["body", "child_id"]),
            ("/v1/runs/r1/children", {**child, "parent_ids": [bad]}, ["body", "parent_ids", 0]),
            ("/v1/runs/r1/children", {**child, "retire_id": bad}, ["body", "retire_id"]),
        ]
        for path, body, loc in writes:
            _refused_with_422(api.post(path, json=body, headers=AUTH), loc)
        quoted = urllib.parse.quote(bad, safe="")
        for path, loc in ((f"/v1/runs/{quoted}/leaderboard", ["path", "run_id"]),
                          (f"/v1/adapters/{quoted}/lineage", ["path", "adapter_id"]),
                          (f"/v1/runs/{quoted}/overview", ["path", "run_id"])):
            resp = api.get(path)
            if "/" in bad or bad in (".", ".."):  # more segments once decoded, or a dot segment the URL resolves:
                # no route takes the path
                assert resp.status_code == 404, (path, resp.text)
            else:
                _refused_with_422(resp, loc)
        _refused_with_422(api.get("/v1/runs/r1/matches", params={"teacher_id": bad or " "}),
                          ["query", "teacher_id"])
    assert _league_state(league) == before and league.db.list_runs() == runs  # no row anywhere


def test_rest_valid_ids_round_trip(api):
    run, teacher, student = "exp-7.population-s1", "exp-7.population-s1.T0", "exp-7.population-s1.S0"
    assert api.post("/v1/runs", json={"run_id": run, "mode": "population"}, headers=AUTH).json() == {
        "run_id": run, "created": True}
    reg = api.post(f"/v1/runs/{run}/adapters", headers=AUTH, json={"adapters": [
        {"adapter_id": teacher, "role": "teacher"}, {"adapter_id": student, "role": "student"}]})
    assert reg.json() == {"registered": [teacher, student]}
    board = api.get(f"/v1/runs/{run}/leaderboard").json()
    assert {r["adapter_id"] for r in board["rows"]} == {teacher, student}
    assert api.get(f"/v1/adapters/{student}/lineage").json()["run_id"] == run


def test_rest_conflicts_are_409_and_repeats_still_succeed(api, league):
    before = _league_state(league)
    conflicts = [
        ("/v1/runs", {"run_id": "r1", "mode": "baseline"}, "mode 'population'"),
        ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": "T0", "role": "student"}]}, "role 'teacher'"),
        ("/v1/runs/r1/children", {"child_id": "S2", "role": "student", "parent_ids": ["S1"], "operator": "M1",
                                  "step": 2}, "parents ['S0']"),
        ("/v1/runs/r1/children", {"child_id": "S2", "role": "student", "parent_ids": ["S0"], "operator": "X1",
                                  "step": 2}, "operator 'M1'"),
        ("/v1/runs/r1/children", {"child_id": "T0", "role": "teacher", "parent_ids": ["T1"], "operator": "M1",
                                  "step": 2}, "'T0' already exists"),
        ("/v1/runs/r1/matches", {"matches": [{"match_id": "r1/0/T0/code_o", "teacher_id": "T1", "student_id": "S0",
                                              "task_type": "code_o", "step": 0, "rhos": [0.5]}]}, "teacher 'T0'"),
    ]
    for path, body, said in conflicts:
        resp = api.post(path, json=body, headers=AUTH)
        assert resp.status_code == 409 and said in resp.json()["detail"], (path, resp.text)
    assert _league_state(league) == before  # nothing written
    assert api.post("/v1/runs", json={"run_id": "r2"}, headers=AUTH).status_code == 200
    assert api.post("/v1/runs/r2/adapters", json={"adapters": [{"adapter_id": "T0", "role": "teacher"}]},
                    headers=AUTH).status_code == 409  # an adapter id names one adapter, in one run
    # the same writes again: idempotent, 200, nothing changed
    assert api.post("/v1/runs", json={"run_id": "r1", "mode": "population"}, headers=AUTH).json()["created"] is False
    assert api.post("/v1/runs/r1/adapters", json={"adapters": [{"adapter_id": "T0", "role": "teacher"}]},
                    headers=AUTH).status_code == 200
    again = api.post("/v1/runs/r1/children", headers=AUTH, json={
        "child_id": "S2", "role": "student", "parent_ids": ["S0"], "operator": "M1", "step": 2, "retire_id": "S1"})
    assert again.status_code == 200 and again.json()["adapter_id"] == "S2"
    played = league.db.list_matches("r1", limit=1)[0]
    same = {k: played[k] for k in ("match_id", "teacher_id", "student_id", "task_type", "step")}
    resent = api.post("/v1/runs/r1/matches", headers=AUTH, json={"matches": [{**same, "rhos": played["rhos"]}]})
    assert resent.status_code == 200 and resent.json()["duplicates"] == 1
    assert _league_state(league) == before


def test_openapi_declares_the_bearer_scheme_on_every_operation_but_health(api):
    spec = api.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerToken"] == {
        "type": "http", "scheme": "bearer", "description": spec["components"]["securitySchemes"]["bearerToken"][
            "description"]}
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            if path == "/healthz":
                assert "security" not in op, (method, path)  # health checks stay open
                continue
            # the reads are open only on a server that takes no credential for them (docs/operations.md), as this
            # plaintext one without scoped tokens is: its document says their credential is optional there
            assert op["security"] == ([{}, {"bearerToken": []}] if method == "get" else [{"bearerToken": []}]), path
            assert {"401", "403"} <= set(op["responses"]), path
            assert not any(p["name"].lower() == "authorization" for p in op.get("parameters", [])), path
            if method == "post":
                assert "409" in op["responses"], path
    run_id = spec["components"]["schemas"]["RunIn"]["properties"]["run_id"]
    assert (run_id["pattern"], run_id["maxLength"]) == (names.RUN_ID_PATTERN, names.MAX_RUN_ID)
    anonymous = api.post("/v1/runs", json={"run_id": "r9"})
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(run_id=st.one_of(st.text(max_size=12), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,11}", fullmatch=True)))
def test_rest_creates_a_run_exactly_when_the_rule_allows_its_id(api, league, run_id):
    resp = api.post("/v1/runs", json={"run_id": run_id}, headers=AUTH)
    valid = names.problem(run_id, names.MAX_RUN_ID) == ""
    assert resp.status_code == (200 if valid else 422), (run_id, resp.text)
    assert all(names.problem(r["run_id"], names.MAX_RUN_ID) == "" for r in league.db.list_runs())


def test_grpc_refuses_hostile_ids_before_the_league_sees_them(league):
    _season(league)
    before, runs = _league_state(league), league.db.list_runs()
    with served(league) as client:
        for bad in HOSTILE:
            if "\x00" in bad:
                continue  # NUL has its own check, earlier (text must not contain NUL)
            calls = [
                ("run_id", "CreateRun", pb.CreateRunRequest(run_id=bad, mode="population")),
                ("adapters[0].adapter_id", "RegisterAdapters", pb.RegisterAdaptersRequest(
                    run_id="r1", adapters=[pb.AdapterSpec(adapter_id=bad, role="teacher")])),
                ("matches[0].student_id", "ReportMatches", pb.ReportMatchesRequest(run_id="r1", matches=[
                    pb.MatchResult(match_id="m-new", teacher_id="T0", student_id=bad, task_type="code_o",
                                   rhos=[0.5])])),
                ("child_id", "RecordChild", pb.RecordChildRequest(
                    run_id="r1", child_id=bad, role="student", parent_ids=["S0"], operator="M1", step=3)),
                ("parent_ids[0]", "RecordChild", pb.RecordChildRequest(
                    run_id="r1", child_id="S9", role="student", parent_ids=[bad], operator="M1", step=3)),
                ("run_id", "RecordRun", pb.RecordRunRequest(run_id=bad, mode="population", status="running")),
                ("run_id", "GetRatings", pb.GetRatingsRequest(run_id=bad)),
                ("adapter_id", "GetLineage", pb.GetLineageRequest(adapter_id=bad)),
            ]
            for where, name, request in calls:
                for call in (getattr(client, name), getattr(league, name)):  # over the network and in process
                    with pytest.raises(ServiceError) as e:
                        call(request)
                    assert e.value.code == StatusCode.INVALID_ARGUMENT, (name, bad, e.value)
                    assert e.value.message.startswith(f"{where}: ") and names.RULE in e.value.message, e.value
    assert _league_state(league) == before and league.db.list_runs() == runs


def test_grpc_conflicts_are_already_exists(league):
    _season(league)
    with served(league) as client:
        for name, request in (
                ("RegisterAdapters", pb.RegisterAdaptersRequest(run_id="r1", adapters=[
                    pb.AdapterSpec(adapter_id="S0", role="teacher")])),
                ("RecordChild", pb.RecordChildRequest(run_id="r1", child_id="S2", role="student", parent_ids=["S1"],
                                                      operator="M1", step=2)),
                ("CreateRun", pb.CreateRunRequest(run_id="r1", mode="baseline"))):
            with pytest.raises(ServiceError) as e:
                getattr(client, name)(request)
            assert e.value.code == StatusCode.ALREADY_EXISTS, (name, e.value)
