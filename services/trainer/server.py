"""The trainer's gRPC server: `populora serve trainer`."""

from __future__ import annotations

import grpc

from populora.config import Config
from populora.pb import trainer_pb2_grpc
from populora.rpc import run_server, status_on_error
from services.trainer.service import TrainerService


class TrainerServicer(trainer_pb2_grpc.TrainerServicer):
    """Each RPC calls the service inside status_on_error, so ServiceError becomes its gRPC status."""

    def __init__(self, service: TrainerService):
        self.service = service

    def InitAdapter(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.InitAdapter(request)

    def AdoptAdapter(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.AdoptAdapter(request)

    def Update(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.Update(request)

    def UpdateBatch(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.UpdateBatch(request)

    def DropAdapter(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.DropAdapter(request)

    def WarmStart(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.WarmStart(request)


def add_to_server(service: TrainerService):
    """The add-servicer callback for populora.rpc.make_server / run_server."""
    return lambda server: trainer_pb2_grpc.add_TrainerServicer_to_server(TrainerServicer(service), server)


def serve(cfg: Config, port: int | None = None, host: str = "0.0.0.0") -> int:
    """Load the base once, then serve gRPC on cfg.services.trainer.port and /metrics on its metrics_port."""
    service = TrainerService.from_config(cfg)
    ep = cfg.services.trainer
    # One update at a time holds the model anyway (the service serialises them); few workers suffice.
    return run_server("trainer", [add_to_server(service)], port if port is not None else ep.port, host,
                      service_names=["populora.v1.Trainer"], metrics_port=ep.metrics_port, max_workers=4)
