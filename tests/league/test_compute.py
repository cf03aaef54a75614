"""Compute accounting in the league (spec 14): per step and adapter, replaced when a step is recorded again."""

from __future__ import annotations

import grpc
import pytest

from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError


def _usage(adapter_id, generated=0, trained=0, jobs=0):
    return pb.Usage(adapter_id=adapter_id, generated_tokens=generated, trained_tokens=trained, sandbox_jobs=jobs)


def test_compute_totals_per_adapter_and_step(league):
    league.CreateRun(pb.CreateRunRequest(run_id="r1"))
    league.RecordCompute(pb.RecordComputeRequest(run_id="r1", step=0, usage=[_usage("base", 100), _usage("", jobs=7)]))
    league.RecordCompute(pb.RecordComputeRequest(run_id="r1", step=1, usage=[
        _usage("T0", 30, 80), _usage("S0", 50, 120), _usage("", jobs=9)]))
    # a retried step replaces its rows: counted once
    league.RecordCompute(pb.RecordComputeRequest(run_id="r1", step=1, usage=[
        _usage("T0", 30, 80), _usage("S0", 50, 120), _usage("", jobs=9)]))
    got = league.GetCompute(pb.GetComputeRequest(run_id="r1"))
    assert (got.total.generated_tokens, got.total.trained_tokens, got.total.sandbox_jobs) == (180, 200, 16)
    assert {u.adapter_id: u.trained_tokens for u in got.adapters} == {"base": 0, "S0": 120, "T0": 80}
    assert [(s.step, s.total.generated_tokens) for s in got.steps] == [(0, 100), (1, 80)]
    summary = league.compute_summary("r1")
    assert summary["total_tokens"] == 380 and [s["cumulative_tokens"] for s in summary["steps"]] == [100, 380]


@pytest.mark.parametrize("usage,field", [([_usage("T0", -1)], "usage[0].generated_tokens"),
                                         ([_usage("T0"), _usage("T0")], "usage[1].adapter_id"),
                                         ([_usage("x" * 129)], "usage[0].adapter_id")])
def test_bad_compute_is_refused_and_changes_nothing(league, usage, field):
    league.CreateRun(pb.CreateRunRequest(run_id="r1"))
    with pytest.raises(ServiceError) as e:
        league.RecordCompute(pb.RecordComputeRequest(run_id="r1", step=1, usage=usage))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.message
    assert league.GetCompute(pb.GetComputeRequest(run_id="r1")).total.generated_tokens == 0
    with pytest.raises(ServiceError) as e:
        league.GetCompute(pb.GetComputeRequest(run_id="nope"))
    assert e.value.code == grpc.StatusCode.NOT_FOUND
