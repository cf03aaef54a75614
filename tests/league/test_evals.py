"""Held-out evaluation scores in the league: stored per (run, adapter, version, benchmark), replaced when recorded
again, refused when malformed, served over gRPC and REST (both backends)."""

from __future__ import annotations

import grpc
import pytest
from fastapi.testclient import TestClient

from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError
from services.league.rest import create_app


def _score(adapter_id, version, step, p1, benchmark="heldout", problems=None, samples=1, **kw):
    problems = problems if problems is not None else [("p0", int(p1 >= 0.5), "" if p1 >= 0.5 else "wrong: x"),
                                                      ("p1", 0, "error: AssertionError")]
    return pb.EvalScore(adapter_id=adapter_id, version=version, benchmark=benchmark, step=step,
                        label=f"{adapter_id or 'base'}@v{version}", n_problems=len(problems), samples=samples,
                        pass_at_1=p1, pass_at_k={1: p1}, problems=[
                            pb.EvalProblem(problem_id=i, passed=ok, n=samples, error=err) for i, ok, err in problems],
                        **kw)


@pytest.fixture
def run(league):
    league.CreateRun(pb.CreateRunRequest(run_id="r1", mode="population"))
    league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="r1", adapters=[
        pb.AdapterSpec(adapter_id="T0", role="teacher", rank=8), pb.AdapterSpec(adapter_id="S0", role="student",
                                                                               rank=8)]))
    return league


def test_scores_are_stored_per_version_and_replaced_when_recorded_again(run):
    run.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[_score("", 0, 0, 0.0), _score("S0", 1, 0, 0.0),
                                                               _score("T0", 1, 0, 0.5)]))
    run.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[_score("S0", 3, 2, 0.5)]))
    # a re-run eval phase records the same key again: replaced, not added
    assert run.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[_score("S0", 3, 2, 0.5)])).recorded == 1
    got = run.GetEvals(pb.GetEvalsRequest(run_id="r1"))
    assert [(s.adapter_id, s.version, s.step, s.pass_at_1) for s in got.scores] == [
        ("", 0, 0, 0.0), ("S0", 1, 0, 0.0), ("T0", 1, 0, 0.5), ("S0", 3, 2, 0.5)]
    assert all(not s.problems for s in got.scores)  # problems only when asked
    one = run.GetEvals(pb.GetEvalsRequest(run_id="r1", adapter_id="S0", include_problems=True))
    assert [s.version for s in one.scores] == [1, 3]
    assert [(p.problem_id, p.passed, p.error) for p in one.scores[1].problems] == [
        ("p0", 1, ""), ("p1", 0, "error: AssertionError")]
    assert dict(one.scores[1].pass_at_k) == {1: 0.5}
    assert not run.GetEvals(pb.GetEvalsRequest(run_id="r1", benchmark="humaneval")).scores


@pytest.mark.parametrize("score,field", [
    (_score("X9", 1, 0, 0.5), "scores[0].adapter_id"),
    (_score("T0", 1, 0, 1.5), "scores[0].pass_at_1"),
    (_score("T0", 1, 0, float("nan")), "scores[0].pass_at_1"),
    (_score("T0", 1, 0, 0.5, benchmark=""), "scores[0].benchmark"),
    (_score("T0", 1, -1, 0.5), "scores[0].step"),
    (_score("T0", 1, 0, 0.5, samples=0), "scores[0].samples"),
    (_score("T0", 1, 0, 0.5, problems=[("p0", 2, "")]), "scores[0].problems[0]"),
    (_score("T0", 1, 0, 0.5, problems=[("p0", 1, ""), ("p0", 0, "")]), "scores[0].problems[1].problem_id"),
])
def test_bad_scores_are_refused_and_change_nothing(run, score, field):
    with pytest.raises(ServiceError) as e:
        run.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[_score("T0", 1, 0, 0.5), score]))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and field.replace("[0]", "[1]", 1) in e.value.message
    assert not run.GetEvals(pb.GetEvalsRequest(run_id="r1")).scores


def test_unknown_run_or_adapter_is_not_found(run):
    for req in (pb.GetEvalsRequest(run_id="nope"), pb.GetEvalsRequest(run_id="r1", adapter_id="X9")):
        with pytest.raises(ServiceError) as e:
            run.GetEvals(req)
        assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(ServiceError) as e:
        run.RecordEvals(pb.RecordEvalsRequest(run_id="nope", scores=[_score("", 0, 0, 0.0)]))
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_rest_serves_run_and_adapter_scores(run):
    run.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[_score("", 0, 0, 0.0), _score("T0", 2, 1, 0.5)]))
    with TestClient(create_app(run)) as client:
        body = client.get("/v1/runs/r1/evals").json()
        assert [(e["adapter_id"], e["version"], e["pass_at_1"], e["problems"]) for e in body["evals"]] == [
            (None, 0, 0.0, None), ("T0", 2, 0.5, None)]
        assert body["evals"][1]["pass_at_k"] == {"1": 0.5}
        one = client.get("/v1/runs/r1/adapters/T0/evals").json()
        assert one["adapter_id"] == "T0" and one["evals"][0]["problems"][1] == {
            "id": "p1", "passed": 0, "n": 1, "error": "error: AssertionError"}
        assert client.get("/v1/runs/r1/evals", params={"benchmark": "humaneval"}).json()["evals"] == []
        assert client.get("/v1/runs/nope/evals").status_code == 404
        assert client.get("/v1/runs/r1/adapters/X9/evals").status_code == 404
        assert client.get("/v1/runs/r1/adapters/S0/evals").json()["evals"] == []
