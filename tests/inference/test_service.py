"""The inference service over gRPC and in process: round trip, streaming, adapter RPCs, error codes, health."""

from __future__ import annotations

import grpc
import pytest

from populora.pb import common_pb2, inference_pb2
from populora.rpc import ServiceError, health_check
from services.inference.service import InferenceService
from tests.conftest import served

SERVICE_NAME = InferenceService.CONTRACT.full_name


def _gen(rid, adapter_id="", version=0, n=1, max_new_tokens=6, **kw):
    req = inference_pb2.GenerationRequest(
        request_id=rid, messages=[inference_pb2.ChatMessage(role="user", content=f"Solve {rid}.")],
        sampling=inference_pb2.SamplingParams(max_new_tokens=max_new_tokens, n=n, **kw))
    if adapter_id:
        req.adapter.CopyFrom(common_pb2.AdapterRef(adapter_id=adapter_id, version=version))
    return req


@pytest.fixture
def service(make_backend, adapters):
    return InferenceService(make_backend(max_batch=8, max_resident=3), default_max_new_tokens=6)


def generate_all(client, request: inference_pb2.GenerateRequest) -> list[inference_pb2.GenerateResult]:
    """Every result of a batch in the order of its requests (the stream yields them as they finish)."""
    order = {r.request_id: i for i, r in enumerate(request.requests)}
    return sorted(client.Generate(request), key=lambda r: order[r.request_id])


@pytest.fixture
def grpc_client(service):
    with served(service) as client:
        yield client, int(client.address.rsplit(":", 1)[1])


def test_grpc_round_trip(grpc_client, service):
    client, port = grpc_client
    assert health_check(f"127.0.0.1:{port}", SERVICE_NAME) == "SERVING"
    batch = inference_pb2.GenerateRequest(requests=[_gen("a", "a0"), _gen("b"), _gen("c", "a1", 1, n=2,
                                                                                     temperature=1.0, seed=3)])
    results = generate_all(client, batch)
    assert [r.request_id for r in results] == ["a", "b", "c"]
    assert results[0].adapter.adapter_id == "a0" and results[0].adapter.version == 1
    assert not results[1].HasField("adapter")
    assert [c.index for c in results[2].completions] == [0, 1]
    for r in results:
        assert r.prompt_token_ids and all(len(c.token_ids) == 6 for c in r.completions)
        assert all(c.finish_reason == "length" for c in r.completions)
    in_process = generate_all(service, batch)
    assert [list(c.token_ids) for c in in_process[0].completions] == [list(c.token_ids)
                                                                       for c in results[0].completions]

    loaded = client.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=common_pb2.AdapterRef(adapter_id="a2")))
    assert loaded.adapter.version == 1 and not loaded.already_resident
    listed = client.ListAdapters(inference_pb2.ListAdaptersRequest())
    assert {r.adapter_id for r in listed.adapters} == {"a0", "a1", "a2"}
    assert (listed.max_resident, listed.max_batch, listed.backend, listed.base_model) == (3, 8, "hf", "tiny")
    evicting = client.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=common_pb2.AdapterRef(adapter_id="a3")))
    assert [r.adapter_id for r in evicting.evicted] == ["a0"]
    gone = client.UnloadAdapter(inference_pb2.UnloadAdapterRequest(adapter=common_pb2.AdapterRef(adapter_id="a3")))
    assert gone.unloaded == 1


@pytest.mark.parametrize("where", ["grpc", "in_process"])
def test_errors_have_codes_and_the_server_survives(grpc_client, service, where):
    client = grpc_client[0] if where == "grpc" else service

    def code_of(request):
        with pytest.raises(ServiceError) as e:
            list(client.Generate(request))
        return e.value.code, e.value.message

    code, msg = code_of(inference_pb2.GenerateRequest(requests=[_gen("x", "nobody")]))
    assert code == grpc.StatusCode.NOT_FOUND and "nobody" in msg
    code, msg = code_of(inference_pb2.GenerateRequest(requests=[_gen("x", n=9)]))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_batch=8" in msg
    code, msg = code_of(inference_pb2.GenerateRequest(requests=[_gen(f"x{i}", f"a{i}") for i in range(4)]))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_resident_adapters=3" in msg
    code, _ = code_of(inference_pb2.GenerateRequest(requests=[inference_pb2.GenerationRequest(request_id="e")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = code_of(inference_pb2.GenerateRequest(requests=[_gen("x", temperature=-1.0)]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = code_of(inference_pb2.GenerateRequest())
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ServiceError) as e:
        client.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=common_pb2.AdapterRef(adapter_id="a0",
                                                                                           version=7)))
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(ServiceError) as e:
        client.LoadAdapter(inference_pb2.LoadAdapterRequest())
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert generate_all(client, inference_pb2.GenerateRequest(requests=[_gen("ok", "a0")]))[0].completions
