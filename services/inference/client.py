"""Inference clients: one interface, in-process (embedded mode) and gRPC (distributed mode)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

from populora.pb import inference_pb2, inference_pb2_grpc
from populora.rpc import call, call_stream, channel

GenerateResult = inference_pb2.GenerateResult


class InferenceClient(ABC):
    @abstractmethod
    def generate(self, request: inference_pb2.GenerateRequest) -> Iterator[GenerateResult]: ...

    @abstractmethod
    def load_adapter(self, request: inference_pb2.LoadAdapterRequest) -> inference_pb2.LoadAdapterResponse: ...

    @abstractmethod
    def unload_adapter(self, request: inference_pb2.UnloadAdapterRequest) -> inference_pb2.UnloadAdapterResponse:
        ...

    @abstractmethod
    def list_adapters(self, request: inference_pb2.ListAdaptersRequest | None = None
                      ) -> inference_pb2.ListAdaptersResponse: ...

    def generate_all(self, request: inference_pb2.GenerateRequest) -> list[GenerateResult]:
        """Every result of a batch, in the order of the requests (the stream yields them as they finish)."""
        order = {r.request_id: i for i, r in enumerate(request.requests)}
        return sorted(self.generate(request), key=lambda r: order.get(r.request_id, len(order)))

    def close(self) -> None:
        """Release the connection (nothing to release in process)."""
        return None


class InProcessInferenceClient(InferenceClient):
    def __init__(self, service):
        self.service = service

    def generate(self, request):
        return self.service.Generate(request)

    def load_adapter(self, request):
        return self.service.LoadAdapter(request)

    def unload_adapter(self, request):
        return self.service.UnloadAdapter(request)

    def list_adapters(self, request=None):
        return self.service.ListAdapters(request or inference_pb2.ListAdaptersRequest())


class GrpcInferenceClient(InferenceClient):
    def __init__(self, address: str, timeout: float | None = 600.0):
        self.timeout = timeout
        self._channel = channel(address)
        self._stub = inference_pb2_grpc.InferenceStub(self._channel)

    def generate(self, request):
        return call_stream(self._stub.Generate, request, self.timeout)

    def load_adapter(self, request):
        return call(self._stub.LoadAdapter, request, self.timeout)

    def unload_adapter(self, request):
        return call(self._stub.UnloadAdapter, request, self.timeout)

    def list_adapters(self, request=None):
        return call(self._stub.ListAdapters, request or inference_pb2.ListAdaptersRequest(), self.timeout)

    def close(self) -> None:
        self._channel.close()


def make_client(cfg, service=None) -> InferenceClient:
    """In-process client over `service` (built from cfg when None) in embedded mode; gRPC in distributed mode."""
    if cfg.run.deployment == "distributed":
        ep = cfg.services.inference
        return GrpcInferenceClient(f"{ep.host}:{ep.port}", cfg.services.grpc_timeout_s)
    if service is None:
        from services.inference.service import InferenceService

        service = InferenceService.from_config(cfg)
    return InProcessInferenceClient(service)
