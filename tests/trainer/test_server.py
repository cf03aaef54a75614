"""The trainer over gRPC: the same answers and error codes as in process."""

from __future__ import annotations

import grpc
import pytest

from populora.pb import trainer_pb2
from populora.rpc import ServiceError, make_server
from services.trainer.client import GrpcTrainerClient, InProcessTrainerClient, make_client
from services.trainer.server import add_to_server
from tests.trainer.conftest import make_service, rollouts, trainer_config, update_request


def test_grpc_round_trip_and_error_codes(fresh_base, store):
    svc = make_service(fresh_base, store)
    server, port, _ = make_server([add_to_server(svc)], port=0, host="127.0.0.1")
    client = GrpcTrainerClient(f"127.0.0.1:{port}", timeout=60)
    try:
        ref = client.init_adapter(trainer_pb2.InitAdapterRequest(adapter_id="s0", role="student", seed=1)).adapter
        resp = client.update_batch(trainer_pb2.UpdateBatchRequest(updates=[update_request(ref, rollouts())]))
        assert resp.mode == "sequential" and resp.results[0].adapter.version == 2
        assert resp.results[0].stats.tokens == 12

        bad = rollouts()
        del bad[0].response_token_ids[:]
        with pytest.raises(ServiceError) as err:
            client.update(update_request(resp.results[0].adapter, bad))
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "empty response" in err.value.message
        with pytest.raises(ServiceError) as err:
            client.update(update_request(ref, rollouts(offset=3)))  # v1 is stale now
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION and "version 2" in err.value.message
        assert client.drop_adapter(trainer_pb2.DropAdapterRequest(adapter_id="s0")).dropped
    finally:
        client.close()
        server.stop(None)


def test_make_client_picks_in_process_when_embedded(fresh_base, store):
    svc = make_service(fresh_base, store)
    client = make_client(trainer_config(), service=svc)
    assert isinstance(client, InProcessTrainerClient)
    cfg = trainer_config()
    cfg.run.deployment = "distributed"
    remote = make_client(cfg)
    assert isinstance(remote, GrpcTrainerClient) and remote.address.endswith(":50052")
    remote.close()
