"""The gRPC layer every service shares: contracts, the generic server and client, the token, health."""

from __future__ import annotations

import grpc
import pytest

from coordinator.clients.services import service_type
from populora import rpc
from populora.config import load_config
from populora.pb import common_pb2, inference_pb2, league_pb2
from populora.store import AdapterRef
from services.league.service import LeagueService
from tests.conftest import TEST_TOKEN, served


def test_messages_round_trip():
    req = inference_pb2.GenerationRequest(adapter=common_pb2.AdapterRef(adapter_id="T0", version=3))
    assert inference_pb2.GenerationRequest.FromString(req.SerializeToString()).adapter.version == 3


def test_ref_roundtrip():
    ref = AdapterRef("T0", 2, "file:///s/adapters/T0/v2")
    assert rpc.ref_from_pb(rpc.ref_to_pb(ref)) == ref


@pytest.mark.parametrize("name", rpc.SERVICE_NAMES)
def test_every_service_implements_its_whole_contract(name):
    cls = service_type(name)
    assert cls.CONTRACT is rpc.CONTRACTS[name]
    missing = [m.name for m in cls.CONTRACT.methods if not callable(getattr(cls, m.name, None))]
    assert not missing, f"{cls.__name__} lacks {missing}"


def test_read_only_methods_are_marked_in_the_contracts():
    marked = {m.full_name for c in rpc.CONTRACTS.values() for m in c.methods if rpc.is_read_only(m)}
    assert marked == {"populora.v1.League.GetRatings", "populora.v1.League.GetLineage", "populora.v1.League.GetCompute",
                      "populora.v1.League.GetEvals",
                      "populora.v1.Inference.ListAdapters", "populora.v1.Evolver.ListOperators"}


def test_health_check_answers():
    server, port, _ = rpc.make_server([], port=0, host="127.0.0.1")
    try:
        assert rpc.health_check(f"127.0.0.1:{port}") == "SERVING"
        with pytest.raises(grpc.RpcError) as e:
            rpc.health_check(f"127.0.0.1:{port}", "nope")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop(0)


@pytest.fixture
def league(tmp_path):
    cfg = load_config(env=False, overrides=[f"run.output_dir={tmp_path}"])
    service = LeagueService.from_config(cfg)
    yield service
    service.close()


def _unauthenticated(call) -> str:
    with pytest.raises(rpc.ServiceError) as e:
        call()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    return e.value.message


@pytest.mark.parametrize("token", ["", "wrong-token"])
def test_a_write_without_the_token_is_refused_and_changes_nothing(league, token):
    with served(league, token=token) as client:
        msg = _unauthenticated(lambda: client.CreateRun(league_pb2.CreateRunRequest(run_id="r1", mode="population")))
        assert "authorization" in msg
        _unauthenticated(lambda: client.RegisterAdapters(league_pb2.RegisterAdaptersRequest(
            run_id="r1", adapters=[league_pb2.AdapterSpec(adapter_id="T0", role="teacher", rank=8)])))
        # reads stay open, and they show nothing was written
        with pytest.raises(rpc.ServiceError) as e:
            client.GetRatings(league_pb2.GetRatingsRequest(run_id="r1"))
        assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert not league.db.run_exists("r1")


def test_the_token_opens_writes(league):
    with served(league, token=TEST_TOKEN) as client:
        assert client.CreateRun(league_pb2.CreateRunRequest(run_id="r1", mode="population")).created
        assert client.GetRatings(league_pb2.GetRatingsRequest(run_id="r1")).ratings == []


def test_a_server_without_a_token_refuses_every_write(league):
    server, port, _ = rpc.make_server([league], 0, "127.0.0.1", token="")
    client = rpc.Remote(league.CONTRACT, f"127.0.0.1:{port}", token="anything", retries=0)
    try:
        msg = _unauthenticated(lambda: client.CreateRun(league_pb2.CreateRunRequest(run_id="r1")))
        assert "no credential configured" in msg
    finally:
        client.close()
        server.stop(None)


class _Streamer:
    """A stand-in with the Inference contract, to see the token guard a server-streaming method too."""

    CONTRACT = rpc.CONTRACTS["inference"]
    calls = 0

    def Generate(self, request):
        _Streamer.calls += 1
        yield inference_pb2.GenerateResult(request_id="x")

    def LoadAdapter(self, request):
        return inference_pb2.LoadAdapterResponse()

    UnloadAdapter = LoadAdapter

    def ListAdapters(self, request):
        return inference_pb2.ListAdaptersResponse(backend="stand-in")

    def Score(self, request):
        return inference_pb2.ScoreResponse()


def test_streaming_writes_need_the_token_too():
    service = _Streamer()
    with served(service, token="wrong") as client:
        _unauthenticated(lambda: list(client.Generate(inference_pb2.GenerateRequest())))
        assert client.ListAdapters(inference_pb2.ListAdaptersRequest()).backend == "stand-in"
    assert _Streamer.calls == 0
    with served(service) as client:
        assert [r.request_id for r in client.Generate(inference_pb2.GenerateRequest())] == ["x"]
    assert _Streamer.calls == 1
