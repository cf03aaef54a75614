"""The one gRPC layer checks every run, adapter and child id of every request against the rule of ids before the
service sees it (INVALID_ARGUMENT naming the field), for each of the five contracts, over a real gRPC server; the
evolver, called in process too, refuses a hostile child or parent id and writes nothing."""

from __future__ import annotations

import grpc
import pytest

from populora import names
from populora.pb import evolver_pb2, inference_pb2, league_pb2, sandbox_pb2, trainer_pb2
from populora.rpc import CONTRACTS, ServiceError
from populora.store import ArtifactStore
from tests.conftest import served


class Untouchable:
    """A service of one contract whose every method records that it was called."""

    def __init__(self, name: str):
        self.CONTRACT = CONTRACTS[name]
        self.calls: list[str] = []

    def __getattr__(self, method: str):
        def called(request):
            self.calls.append(method)
            raise AssertionError(f"{method} saw a request with a hostile id")

        return called


HOSTILE = ["../x", "a/b", "..", "é", "a b"]
REQUESTS = {
    "inference": [("LoadAdapter", lambda b: inference_pb2.LoadAdapterRequest(adapter={"adapter_id": b}),
                   "adapter.adapter_id"),
                  ("Generate", lambda b: inference_pb2.GenerateRequest(requests=[
                      inference_pb2.GenerationRequest(request_id="q", prompt="hi", adapter={"adapter_id": b})]),
                   "requests[0].adapter.adapter_id")],
    "trainer": [("InitAdapter", lambda b: trainer_pb2.InitAdapterRequest(adapter_id=b, role="student"), "adapter_id"),
                ("UpdateBatch", lambda b: trainer_pb2.UpdateBatchRequest(updates=[
                    trainer_pb2.UpdateRequest(adapter={"adapter_id": b, "version": 1})]),
                 "updates[0].adapter.adapter_id"),
                ("DropAdapter", lambda b: trainer_pb2.DropAdapterRequest(adapter_id=b), "adapter_id")],
    "league": [("CreateRun", lambda b: league_pb2.CreateRunRequest(run_id=b), "run_id"),
               ("RecordChild", lambda b: league_pb2.RecordChildRequest(run_id="r1", child_id="c", parent_ids=[b]),
                "parent_ids[0]")],
    "sandbox": [("ValidateProposals", lambda b: sandbox_pb2.ValidateProposalsRequest(proposals=[
        sandbox_pb2.Proposal(teacher_id=b)]), "proposals[0].teacher_id")],
    "evolver": [("Breed", lambda b: evolver_pb2.BreedRequest(operator="M1", parents=[{"adapter_id": "p"}],
                                                             child_id=b), "child_id")],
}


@pytest.mark.parametrize("service", list(REQUESTS))
def test_the_grpc_layer_refuses_hostile_ids_before_the_service(service):
    fake = Untouchable(service)
    with served(fake) as client:
        for bad in HOSTILE:
            for method, build, where in REQUESTS[service]:
                with pytest.raises(ServiceError) as e:
                    result = getattr(client, method)(build(bad))
                    list(result) if method == "Generate" else None  # a stream fails when read
                assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, (method, bad, e.value)
                assert e.value.message.startswith(f"{where}: ") and names.RULE in e.value.message, e.value
    assert fake.calls == []


def test_the_evolver_refuses_hostile_child_and_parent_ids_and_writes_nothing(tmp_path):
    from services.evolver.service import EvolverService

    root = tmp_path / "store"
    evolver = EvolverService(ArtifactStore(root))
    for request, where in ((evolver_pb2.BreedRequest(operator="M1", parents=[{"adapter_id": "p"}],
                                                     child_id="../escape"), "child_id"),
                           (evolver_pb2.BreedRequest(operator="M1", parents=[{"adapter_id": "../../p"}],
                                                     child_id="c1"), "parent")):
        with pytest.raises(ServiceError) as e:
            evolver.Breed(request)  # in process: no gRPC layer in front
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and e.value.message.startswith(where), e.value
    assert sorted(p.name for p in tmp_path.rglob("*") if p != root and root not in p.parents) == []
    assert not (root / "adapters").exists() or list((root / "adapters").iterdir()) == []
