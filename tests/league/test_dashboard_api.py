"""The dashboard's REST reads (both backends), the leaderboard statement of Postgres against the Python path, the
page and its files, and the edge checks every request goes through (issue 13: a hostile request gets a 4xx)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from populora.pb import league_pb2 as pb
from services.league import reads
from services.league.rest import MAX_BODY_BYTES, PAGE_HEADERS, STATIC_DIR, create_app
from tests.league.test_league_api import AUTH, _season


@pytest.fixture
def rest(league):
    _season(league)
    with TestClient(create_app(league)) as client:
        yield client


def test_rating_curves_are_the_rating_history(rest, league):
    curves = rest.get("/v1/runs/r1/ratings").json()
    ids = {c["adapter_id"] for c in curves["adapters"]}
    assert ids == {"T0", "T1", "S0", "S1", "S2"}
    for c in curves["adapters"]:
        history = league.db.rating_history(c["adapter_id"])
        assert c["steps"] == [h["step"] for h in history]
        assert c["mu"] == [h["mu"] for h in history]
        assert c["conservative_skill"] == pytest.approx([h["mu"] - 3 * h["sigma"] for h in history])
    assert curves["events"] == [{"step": 2, "child_id": "S2", "role": "student", "operator": "M1",
                                 "parents": ["S0"], "epsilon": None, "retired_ids": ["S1"]}]


def test_run_lineage_has_every_adapter_and_every_parent_link(rest, league):
    league.RecordChild(pb.RecordChildRequest(
        run_id="r1", child_id="T2", role="teacher", parent_ids=["T0", "T1"], operator="X1", step=4,
        retire_id="T1", params_json='{"epsilon": 0.125, "p": 0.5}'))
    lin = rest.get("/v1/runs/r1/lineage").json()
    assert sorted(n["adapter_id"] for n in lin["nodes"]) == ["S0", "S1", "S2", "T0", "T1", "T2"]
    assert {(e["parent_id"], e["child_id"], e["operator"], e["step"], e["epsilon"]) for e in lin["edges"]} == {
        ("S0", "S2", "M1", 2, None), ("T0", "T2", "X1", 4, 0.125), ("T1", "T2", "X1", 4, 0.125)}
    assert all(e["relative_change"] is None for e in lin["edges"])  # no step summary recorded the children
    # the step that made a child records its relative change (the evolver's) in its summary's evolution events
    event = {"role": "teacher", "retired": "T1", "child": "T2", "parents": ["T0", "T1"], "operator": "X1"}
    for change in (float("nan"), 0.25):  # a retried evolution has none; a step recorded again replaces it
        league.RecordStepSummary(pb.RecordStepSummaryRequest(run_id="r1", step=4, summary_json=json.dumps(
            {"step": 4, "evolution": [{**event, "relative_change": None if change != change else change}]})))
    lin = rest.get("/v1/runs/r1/lineage").json()
    assert {e["parent_id"]: e["relative_change"] for e in lin["edges"] if e["child_id"] == "T2"} == {"T0": 0.25,
                                                                                                     "T1": 0.25}
    assert next(n for n in lin["nodes"] if n["adapter_id"] == "T2")["relative_change"] == 0.25
    assert next(n for n in lin["nodes"] if n["adapter_id"] == "T0")["relative_change"] is None
    t2 = next(n for n in lin["nodes"] if n["adapter_id"] == "T2")
    assert t2["params"] == {"epsilon": 0.125, "p": 0.5} and t2["parents"] == ["T0", "T1"]
    assert next(n for n in lin["nodes"] if n["adapter_id"] == "T1")["status"] == "retired"


def test_adapter_page_and_overview_without_a_journal(rest, league):
    page = rest.get("/v1/adapters/S2").json()
    assert page["adapter"]["operator"] == "M1" and page["adapter"]["parents"] == ["S0"]
    assert page["versions"] == [] and page["journal"] is False and page["k"] == 3.0
    assert rest.get("/v1/adapters/S2/samples").json() == {"adapter_id": "S2", "proposals": [], "answers": []}
    ov = rest.get("/v1/runs/r1/overview").json()
    assert ov["journal"] is False and ov["league"] == {"adapters": 5, "active": 4, "last_match_seq": 12, "evals": 0,
                                                     "evals_recorded_at": 0.0}
    assert rest.get("/v1/runs/r1/steps").json() == {"run_id": "r1", "steps": []}
    assert rest.get("/v1/runs/r1/tasks").json()["tasks"] == []
    # the revision moves with the league: one more match
    league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=[pb.MatchResult(
        match_id="r1/3/T0/code_o", teacher_id="T0", student_id="S0", task_type="code_o", step=3, rhos=[0.5])]))
    after = rest.get("/v1/runs/r1/overview").json()
    assert after["revision"] != ov["revision"] and after["league"]["last_match_seq"] == 13
    # and with held-out scores: the leaderboard shows them, so a page open on it must refresh
    league.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[pb.EvalScore(
        adapter_id="", version=0, benchmark="heldout", label="base", n_problems=0, samples=1)]))
    scored = rest.get("/v1/runs/r1/overview").json()
    assert scored["revision"] != after["revision"] and scored["league"]["evals"] == 1
    assert rest.get("/v1/runs/r1/dynamics").json() == {
        "run_id": "r1", "steps": [], "flops": [], "complexity": {"ast_depth": [], "cyclomatic": [], "lines_of_code": []},
        "coverage": [], "behavioural_diversity": [], "behavioural_reference": [], "solve_rate": {}, "oscillation": {},
        "weight_diversity": []}
    for path in ("overview", "steps", "tasks", "ratings", "lineage", "dynamics"):
        assert rest.get(f"/v1/runs/nope/{path}").status_code == 404
    assert rest.get("/v1/adapters/nope").status_code == 404
    assert rest.get("/v1/adapters/nope/samples").status_code == 404


def test_match_log_newest_first(rest):
    page = rest.get("/v1/runs/r1/matches", params={"order": "desc", "limit": 5}).json()
    seqs = [m["seq"] for m in page["matches"]]
    assert seqs == sorted(seqs, reverse=True) and page["next_after"] is None and page["next_before"] == seqs[-1]
    rest_ = rest.get("/v1/runs/r1/matches", params={"order": "desc", "before": page["next_before"]}).json()
    assert [m["seq"] for m in rest_["matches"]] == list(range(seqs[-1] - 1, 0, -1))


@pytest.fixture
def pg_league(pg_url):
    """A small season on Postgres, with ids whose order differs between collations ('B' < 'Z' < 'a' < 'b' by code
    point, 'a' < 'b' < 'B' < 'Z' or 'a' < 'B' < 'b' < 'Z' in a language's), at the default rating (ties on
    mu - k*sigma), and a `both` adapter."""
    from tests.league.conftest import make_service

    league = make_service(pg_url)
    client = league
    _season(client)
    client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="r1", adapters=[
        pb.AdapterSpec(adapter_id=a, role=r, rank=k) for a, r, k in (("a", "student", 8), ("Z", "student", 64),
                                                                      ("b", "teacher", 16), ("B", "both", 32))]))
    yield league
    league.close()


def test_postgres_rating_curves_equal_the_python_path(pg_league):
    got = json.loads(reads.run_ratings(pg_league.db, "r1"))
    with pg_league.db.read_engine.connect() as conn:
        assert got["adapters"] == reads._curves(conn, "r1", 3.0)
    assert [c["adapter_id"] for c in got["adapters"]] == sorted(c["adapter_id"] for c in got["adapters"])


def test_postgres_leaderboard_statement_equals_the_python_rows(pg_league):
    league = pg_league
    for role in ("", "teacher", "student", "both"):
        for retired in (True, False):
            body = json.loads(reads.leaderboard_body(league.db, "r1", role, retired))
            assert body["rows"] == reads.leaderboard_rows(league.db, "r1", role, retired), (role, retired)
            assert body["run_id"] == "r1" and body["role"] == role and body["k"] == 3.0
    rows = json.loads(reads.leaderboard_body(league.db, "r1", "", True))["rows"]
    ids = [r["adapter_id"] for r in rows]
    assert ids.index("B") < ids.index("Z") < ids.index("a") < ids.index("b")
    assert {r["adapter_id"]: r["lora_rank"] for r in rows if r["adapter_id"] in "aZbB"} == {"a": 8, "Z": 64, "b": 16,
                                                                                          "B": 32}


def test_page_and_its_files_come_from_the_service(rest):
    page = rest.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == PAGE_HEADERS["Content-Security-Policy"]
    html = page.text
    import re

    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(r[0] in "/#" and not r.startswith("//") for r in refs), refs
    for ref in refs:
        if ref.startswith("/static/"):
            got = rest.get(ref)
            assert got.status_code == 200 and got.headers["x-content-type-options"] == "nosniff", ref
    # the charting library ships with its license; scripts never address another host
    assert (STATIC_DIR / "vendor" / "uplot" / "LICENSE").read_text().startswith("The MIT License")
    scripts = [r for r in refs if r.startswith("/static/") and r.endswith(".js") and "/vendor/" not in r]
    assert "/static/dashboard.js" in scripts and len(scripts) > 1, scripts
    for ref in scripts:  # every script of our own: text stays text, and nothing is fetched from another host
        script = rest.get(ref).text
        assert "innerHTML" not in script and "http://" not in script.replace("http://www.w3.org/2000/svg", ""), ref
        assert "https://" not in script, ref
    spec = rest.get("/openapi.json").json()
    for path in ("/v1/runs/{run_id}/overview", "/v1/runs/{run_id}/steps", "/v1/runs/{run_id}/dynamics",
                 "/v1/runs/{run_id}/ratings",
                 "/v1/runs/{run_id}/lineage", "/v1/runs/{run_id}/tasks", "/v1/adapters/{adapter_id}",
                 "/v1/adapters/{adapter_id}/samples"):
        assert "404" in spec["paths"][path]["get"]["responses"], path


def test_read_only_app_has_no_writes(league):
    with TestClient(create_app(league, read_only=True)) as client:
        assert client.post("/v1/runs", json={"run_id": "x"}, headers=AUTH).status_code == 405
        assert not any(m == "post" for p in client.get("/openapi.json").json()["paths"].values() for m in p)


# ---- issue 13: every field is bounded at the edge; a hostile request is a 4xx and writes nothing -----------------
MATCH = {"match_id": "r1/5/T0/code_o", "teacher_id": "T0", "student_id": "S0", "task_type": "code_o", "step": 5,
         "rhos": [0.5]}
HOSTILE_BODIES = [
    ("/v1/runs", {"run_id": "a\x00b"}),
    ("/v1/runs", {"run_id": "x" * 201}),
    ("/v1/runs", {"run_id": "ok", "mode": "m" * 33}),
    ("/v1/runs", {"run_id": "ok", "config_yaml": "a: \x00"}),
    ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": "A\x00", "role": "teacher"}]}),
    ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": "A", "role": "teacher", "rank": 2**31}]}),
    ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": "A", "role": "teacher", "created_step": 2**63}]}),
    ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": "A", "role": "teacher", "created_step": True}]}),
    ("/v1/runs/r1/adapters", {"adapters": [{"adapter_id": "A", "role": "teacher", "created_step": -1}]}),
    ("/v1/runs/r1/matches", {"matches": [{**MATCH, "step": 2**64}]}),
    ("/v1/runs/r1/matches", {"matches": [{**MATCH, "match_id": "m\x00"}]}),
    ("/v1/runs/r1/matches", {"matches": [{**MATCH, "teacher_id": "T0\x00"}]}),
    ("/v1/runs/r1/matches", {"matches": [{**MATCH, "rhos": [True]}]}),
    ("/v1/runs/r1/matches", {"matches": [{**MATCH, "rhos": []}]}),
    ("/v1/runs/r1/matches", {"matches": [{**MATCH, "match_id": "m" * 401}]}),
    ("/v1/runs/r1/children", {"child_id": "C", "role": "teacher", "parent_ids": ["T0"], "operator": "M1" * 9}),
    ("/v1/runs/r1/children", {"child_id": "C", "role": "teacher", "parent_ids": ["T0"], "operator": "M1",
                              "seed": 2**63}),
    ("/v1/runs/r1/children", {"child_id": "C", "role": "teacher", "parent_ids": ["T0"], "operator": "M1",
                              "params": {"epsilon": "x"}}),
    ("/v1/runs/r1/children", {"child_id": "C", "role": "teacher", "parent_ids": [], "operator": "M1"}),
]


@pytest.mark.parametrize("path,body", HOSTILE_BODIES)
def test_hostile_writes_are_refused_at_the_edge(rest, path, body):
    before = rest.get("/v1/runs/r1/leaderboard").json()
    runs = rest.get("/v1/runs").json()
    resp = rest.post(path, json=body, headers=AUTH)
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"][0]["loc"][0] == "body"
    assert rest.get("/v1/runs/r1/leaderboard").json() == before and rest.get("/v1/runs").json() == runs


def test_lone_surrogates_and_non_finite_numbers_are_refused(rest):
    raw = '{"run_id": "a\\ud800b"}'
    resp = rest.post("/v1/runs", content=raw, headers={**AUTH, "content-type": "application/json"})
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "run_id"]
    raw = ('{"child_id": "C", "role": "teacher", "parent_ids": ["T0"], "operator": "M1", '
           '"params": {"epsilon": NaN}}')
    resp = rest.post("/v1/runs/r1/children", content=raw, headers={**AUTH, "content-type": "application/json"})
    assert resp.status_code == 422


@pytest.mark.parametrize("path", [
    "/v1/runs/r%001/leaderboard", "/v1/runs/r1/matches?teacher_id=%00", "/v1/runs/r1/matches?step_min=99999999999999999999",
    "/v1/runs/r1/matches?after=-1", "/v1/runs/r1/tasks?step=18446744073709551616", "/v1/adapters/%00/lineage",
    "/v1/adapters/" + "a" * 129, "/v1/adapters/S0/samples?limit=0", "/v1/runs/r1/leaderboard?role=coach"])
def test_hostile_reads_are_refused_at_the_edge(rest, path):
    assert rest.get(path).status_code == 422


def test_request_limits_and_allowed_methods(rest):
    huge = b'{"run_id": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
    resp = rest.post("/v1/runs", content=huge, headers={**AUTH, "content-type": "application/json"})
    assert resp.status_code == 413
    resp = rest.request("OPTIONS", "/v1/runs/r1/matches")
    assert resp.status_code == 405 and set(resp.headers["allow"].split(", ")) >= {"GET", "POST"}


def test_one_statement_lineage_equals_the_level_by_level_walk(league):
    """A DAG with crossovers, several paths to one ancestor and a long line: same edges, same order."""
    client = league
    client.CreateRun(pb.CreateRunRequest(run_id="g"))
    client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="g", adapters=[
        pb.AdapterSpec(adapter_id=a, role="teacher") for a in ("A", "B", "C")]))
    children = [("D", ["A", "B"], 1), ("E", ["B", "C"], 1), ("F", ["D", "E"], 2), ("G", ["A", "F"], 3),
                ("H", ["G"], 4), ("I", ["H", "D"], 5)]
    for child, parents, step in children:
        client.RecordChild(pb.RecordChildRequest(run_id="g", child_id=child, role="teacher", parent_ids=parents,
                                                  operator="X1" if len(parents) == 2 else "M1", step=step))
    for adapter in "ABCDEFGHI":
        got = reads.adapter_lineage(league.db, adapter)
        ancestors, descendants = league.db.lineage(adapter)
        as_dicts = [[{"parent_id": e.parent_id, "child_id": e.child_id, "operator": e.operator, "step": e.step}
                     for e in es] for es in (ancestors, descendants)]
        assert [got["ancestors"], got["descendants"]] == as_dicts, adapter
    assert len(reads.adapter_lineage(league.db, "I")["ancestors"]) == 11
