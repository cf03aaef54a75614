import grpc
import pytest

from populora import rpc
from populora.pb import (
    common_pb2,
    evolver_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
    league_pb2_grpc,
    sandbox_pb2_grpc,
    trainer_pb2_grpc,
)
from populora.store import AdapterRef


def test_stubs_import():
    for mod in (inference_pb2_grpc, trainer_pb2_grpc, league_pb2_grpc, sandbox_pb2_grpc, evolver_pb2_grpc):
        assert any(name.endswith("Stub") for name in dir(mod))
    req = inference_pb2.GenerationRequest(adapter=common_pb2.AdapterRef(adapter_id="T0", version=3))
    assert inference_pb2.GenerationRequest.FromString(req.SerializeToString()).adapter.version == 3


def test_ref_roundtrip():
    ref = AdapterRef("T0", 2, "file:///s/adapters/T0/v2")
    assert rpc.ref_from_pb(rpc.ref_to_pb(ref)) == ref


def test_health_check_answers():
    server, port, _ = rpc.make_server([], port=0, host="127.0.0.1", service_names=["populora.v1.Inference"])
    try:
        assert rpc.health_check(f"127.0.0.1:{port}") == "SERVING"
        assert rpc.health_check(f"127.0.0.1:{port}", "populora.v1.Inference") == "SERVING"
        with pytest.raises(grpc.RpcError) as e:
            rpc.health_check(f"127.0.0.1:{port}", "nope")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop(0)
