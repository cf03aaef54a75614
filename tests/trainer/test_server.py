"""The trainer over gRPC: the same answers and error codes as in process."""

from __future__ import annotations

import grpc
import pytest

from coordinator.clients.services import open_services
from populora.pb import trainer_pb2
from populora.rpc import Remote, ServiceError
from tests.conftest import served
from tests.trainer.conftest import make_service, rollouts, trainer_config, update_one, update_request


def test_grpc_round_trip_and_error_codes(fresh_base, store):
    svc = make_service(fresh_base, store)
    with served(svc) as client:
        ref = client.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="s0", role="student", seed=1)).adapter
        resp = client.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[update_request(ref, rollouts())]))
        assert resp.mode == "sequential" and resp.results[0].adapter.version == 2
        assert resp.results[0].stats.tokens == 12

        bad = rollouts()
        del bad[0].response_token_ids[:]
        with pytest.raises(ServiceError) as err:
            update_one(client, update_request(resp.results[0].adapter, bad))
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "empty response" in err.value.message
        with pytest.raises(ServiceError) as err:
            update_one(client, update_request(ref, rollouts(offset=3)))  # v1 is stale now
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION and "version 2" in err.value.message
        assert client.DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id="s0")).dropped


def test_distributed_services_are_grpc_proxies_at_the_configured_address():
    cfg = trainer_config()
    cfg.run.deployment = "distributed"
    services = open_services(cfg)
    try:
        assert isinstance(services.trainer, Remote) and services.trainer.address.endswith(":50052")
        assert callable(services.trainer.UpdateBatch) and callable(services.inference.Generate)
    finally:
        services.close()
