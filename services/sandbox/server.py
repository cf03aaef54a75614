"""gRPC server of the sandbox (and its REST app on rest_port)."""

from __future__ import annotations

import grpc

from populora.config import Config
from populora.pb import sandbox_pb2_grpc
from populora.rpc import run_server, status_on_error
from services.sandbox.service import SandboxService


class SandboxServicer(sandbox_pb2_grpc.SandboxServicer):
    def __init__(self, service: SandboxService):
        self.service = service

    def Execute(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.Execute(request)

    def ValidateProposals(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.ValidateProposals(request)

    def CheckAnswers(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.CheckAnswers(request)


def add_to_server(service: SandboxService):
    def add(server: grpc.Server) -> None:
        sandbox_pb2_grpc.add_SandboxServicer_to_server(SandboxServicer(service), server)

    return add


def serve(cfg: Config, port: int | None = None, host: str = "0.0.0.0") -> int:
    """Serve gRPC on cfg.services.sandbox.port and REST (+ /metrics) on its rest_port."""
    from services.sandbox.rest import create_app

    service = SandboxService.from_config(cfg)
    ep = cfg.services.sandbox
    try:
        return run_server("sandbox", [add_to_server(service)], port if port is not None else ep.port, host,
                          service_names=["populora.v1.Sandbox"], metrics_port=ep.metrics_port,
                          rest_app=create_app(service), rest_port=ep.rest_port)
    finally:
        service.close()
