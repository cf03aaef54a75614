"""The evolver's gRPC server: `populora serve evolver`."""

from __future__ import annotations

import grpc

from populora.config import Config
from populora.pb import evolver_pb2_grpc
from populora.rpc import run_server, status_on_error
from services.evolver.service import EvolverService


class EvolverServicer(evolver_pb2_grpc.EvolverServicer):
    """Each RPC calls the service inside status_on_error, so ServiceError becomes its gRPC status."""

    def __init__(self, service: EvolverService):
        self.service = service

    def Breed(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.Breed(request)

    def ListOperators(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.ListOperators(request)


def add_to_server(service: EvolverService):
    """The add-servicer callback for populora.rpc.make_server / run_server."""
    return lambda server: evolver_pb2_grpc.add_EvolverServicer_to_server(EvolverServicer(service), server)


def serve(cfg: Config, port: int | None = None, host: str = "0.0.0.0") -> int:
    """Serve gRPC on cfg.services.evolver.port and /metrics on its metrics_port."""
    service = EvolverService.from_config(cfg)
    ep = cfg.services.evolver
    # A 7B child holds about two adapters' worth of memory while it is built; a few at a time is plenty.
    return run_server("evolver", [add_to_server(service)], port if port is not None else ep.port, host,
                      service_names=["populora.v1.Evolver"], metrics_port=ep.metrics_port, max_workers=4)
