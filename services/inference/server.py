"""The inference gRPC server: the servicer over InferenceService, and `serve` for `populora serve inference`."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from populora.pb import inference_pb2, inference_pb2_grpc
from populora.rpc import run_server, status_on_error
from services.inference.service import InferenceService

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name


class InferenceServicer(inference_pb2_grpc.InferenceServicer):
    def __init__(self, service: InferenceService):
        self.service = service

    def Generate(self, request, context):
        with status_on_error(context):
            yield from self.service.Generate(request)

    def LoadAdapter(self, request, context):
        with status_on_error(context):
            return self.service.LoadAdapter(request)

    def UnloadAdapter(self, request, context):
        with status_on_error(context):
            return self.service.UnloadAdapter(request)

    def ListAdapters(self, request, context):
        with status_on_error(context):
            return self.service.ListAdapters(request)


def add_to_server(service: InferenceService) -> Callable[[grpc.Server], None]:
    return lambda server: inference_pb2_grpc.add_InferenceServicer_to_server(InferenceServicer(service), server)


def serve(cfg, port: int | None = None, host: str = "0.0.0.0") -> int:
    endpoint = cfg.services.inference
    service = InferenceService.from_config(cfg)
    return run_server("inference", [add_to_server(service)], port if port is not None else endpoint.port, host,
                      service_names=[SERVICE_NAME], metrics_port=endpoint.metrics_port)
