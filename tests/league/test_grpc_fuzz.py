"""Every league RPC over real gRPC, on Postgres, with generated requests (NUL bytes, over-long ids, extreme
integers, unknown roles and task types): a bad request gets a client-error status, never INTERNAL or UNKNOWN, and
the server stays up."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError
from tests.conftest import served
from tests.league.conftest import make_service

CLIENT_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
                 grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED}

text = st.one_of(st.sampled_from(["r1", "T0", "S0", "teacher", "student", "both", "code_o", "M1", ""]),
                 st.text(max_size=12), st.text(min_size=129, max_size=600), st.just("a\x00b"))
int64 = st.one_of(st.integers(-3, 5), st.integers(-(2 ** 63), 2 ** 63 - 1))
int32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
rho = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1))

requests = st.one_of(
    st.builds(lambda r, m, c: ("CreateRun", pb.CreateRunRequest(run_id=r, mode=m, config_yaml=c)), text, text, text),
    st.builds(lambda r, a, role, rank, s: ("RegisterAdapters", pb.RegisterAdaptersRequest(run_id=r, adapters=[
        pb.AdapterSpec(adapter_id=a, role=role, rank=rank, created_step=s)])), text, text, text, int32, int64),
    st.builds(lambda r, s, tt, seed: ("Matchmake", pb.MatchmakeRequest(run_id=r, step=s, task_types=[tt], seed=seed)),
              text, int64, text, int64),
    st.builds(lambda r, mid, t, s, tt, step, rhos: ("ReportMatches", pb.ReportMatchesRequest(run_id=r, matches=[
        pb.MatchResult(match_id=mid, teacher_id=t, student_id=s, task_type=tt, step=step, rhos=rhos)])),
        text, text, text, text, text, int64, st.lists(rho, max_size=3)),
    st.builds(lambda r, s, seed: ("SelectForReplacement", pb.SelectForReplacementRequest(run_id=r, step=s, seed=seed)),
              text, int64, int64),
    st.builds(lambda r, c, role, p, op, step, seed, ret, rank: ("RecordChild", pb.RecordChildRequest(
        run_id=r, child_id=c, role=role, parent_ids=[p], operator=op, step=step, seed=seed, retire_id=ret,
        rank=rank)), text, text, text, text, text, int64, int64, text, int32),
    st.builds(lambda r, role: ("GetRatings", pb.GetRatingsRequest(run_id=r, role=role)), text, text),
    st.builds(lambda a: ("GetLineage", pb.GetLineageRequest(adapter_id=a)), text),
    st.builds(lambda r, s, a, g, j: ("RecordCompute", pb.RecordComputeRequest(run_id=r, step=s, usage=[
        pb.Usage(adapter_id=a, generated_tokens=g, sandbox_jobs=j)])), text, int64, text, int64, int64),
    st.builds(lambda r: ("GetCompute", pb.GetComputeRequest(run_id=r)), text),
    st.builds(lambda r, a, v, b, s, n, p1, k, pid, passed, err: ("RecordEvals", pb.RecordEvalsRequest(
        run_id=r, scores=[pb.EvalScore(adapter_id=a, version=v, benchmark=b, step=s, samples=n, n_problems=1,
                                       pass_at_1=p1, pass_at_k={k: p1},
                                       problems=[pb.EvalProblem(problem_id=pid, passed=passed, n=n, error=err)])])),
        text, text, int64, text, int64, int32, rho, int32, text, int32, text),
    st.builds(lambda r, a, b, p: ("GetEvals", pb.GetEvalsRequest(run_id=r, adapter_id=a, benchmark=b,
                                                                 include_problems=p)), text, text, text, st.booleans()),
    st.builds(lambda r, s, j: ("RecordStepSummary", pb.RecordStepSummaryRequest(run_id=r, step=s, summary_json=j)),
              text, int64, st.one_of(text, st.sampled_from(['{"step": 1}', "[1]", '{"x": NaN}', '{"x": 1e999}']))),
    st.builds(lambda r, m, c, status: ("RecordRun", pb.RecordRunRequest(run_id=r, mode=m, config_yaml=c,
                                                                         status=status)),
              text, text, text, st.one_of(text, st.sampled_from(["running", "finished", "failed", "stopped"]))),
    st.builds(lambda r, s, p, sec, a, at, f, e: ("RecordPhases", pb.RecordPhasesRequest(run_id=r, phases=[
        pb.PhaseProgress(step=s, phase=p, seconds=sec, attempts=a, finished_at=at, failed=f, error=e)])),
        text, int64, text, rho, int32, rho, st.booleans(), text),
    st.builds(lambda r, s, j: ("RecordStepProblems", pb.RecordStepProblemsRequest(run_id=r, step=s, problems_json=j)),
              text, int64, st.one_of(text, st.sampled_from(['{"tasks": [], "answers": []}', '{"tasks": [1]}',
                                                            '{"tasks": [], "answers": [{"rho": NaN}]}']))),
)


@pytest.mark.postgres
def test_generated_requests_never_get_a_server_error(pg_url):
    league = make_service(pg_url)
    league.CreateRun(pb.CreateRunRequest(run_id="r1", mode="population"))
    league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="r1", adapters=[
        pb.AdapterSpec(adapter_id="T0", role="teacher", rank=8), pb.AdapterSpec(adapter_id="S0", role="student",
                                                                               rank=8)]))
    try:
        with served(league) as client:
            @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
            @given(requests)
            def call(named):
                name, req = named
                try:
                    getattr(client, name)(req)
                except ServiceError as e:
                    assert e.code in CLIENT_ERRORS, f"{name}({req}) -> {e.code.name}: {e.message}"

            call()
            assert client.GetRatings(pb.GetRatingsRequest(run_id="r1")).ratings  # still serving
    finally:
        league.close()
