"""Clients of the trainer service: one interface, in-process (embedded mode) and gRPC (distributed mode)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from populora.config import Config
from populora.pb import trainer_pb2, trainer_pb2_grpc
from populora.rpc import call, channel


class TrainerClient(ABC):
    """One snake_case method per RPC of proto/trainer.proto; errors are populora.rpc.ServiceError."""

    @abstractmethod
    def init_adapter(self, request: trainer_pb2.InitAdapterRequest) -> trainer_pb2.InitAdapterResponse: ...

    @abstractmethod
    def adopt_adapter(self, request: trainer_pb2.AdoptAdapterRequest) -> trainer_pb2.AdoptAdapterResponse: ...

    @abstractmethod
    def update(self, request: trainer_pb2.UpdateRequest) -> trainer_pb2.UpdateResponse: ...

    @abstractmethod
    def update_batch(self, request: trainer_pb2.UpdateBatchRequest) -> trainer_pb2.UpdateBatchResponse: ...

    @abstractmethod
    def drop_adapter(self, request: trainer_pb2.DropAdapterRequest) -> trainer_pb2.DropAdapterResponse: ...

    @abstractmethod
    def warm_start(self, request: trainer_pb2.WarmStartRequest) -> trainer_pb2.WarmStartResponse: ...

    def close(self) -> None:
        """Release what the client holds (a channel); the in-process client leaves the service to its owner."""
        return None


class InProcessTrainerClient(TrainerClient):
    """Calls a TrainerService in this process."""

    def __init__(self, service):
        self.service = service

    def init_adapter(self, request):
        return self.service.InitAdapter(request)

    def adopt_adapter(self, request):
        return self.service.AdoptAdapter(request)

    def update(self, request):
        return self.service.Update(request)

    def update_batch(self, request):
        return self.service.UpdateBatch(request)

    def drop_adapter(self, request):
        return self.service.DropAdapter(request)

    def warm_start(self, request):
        return self.service.WarmStart(request)


class GrpcTrainerClient(TrainerClient):
    """Calls a trainer server over gRPC; a failed call raises ServiceError with the server's code."""

    def __init__(self, address: str, timeout: float | None = 600.0):
        self.address = address
        self.timeout = timeout
        self._channel = channel(address)
        self._stub = trainer_pb2_grpc.TrainerStub(self._channel)

    def init_adapter(self, request):
        return call(self._stub.InitAdapter, request, self.timeout)

    def adopt_adapter(self, request):
        return call(self._stub.AdoptAdapter, request, self.timeout)

    def update(self, request):
        return call(self._stub.Update, request, self.timeout)

    def update_batch(self, request):
        return call(self._stub.UpdateBatch, request, self.timeout)

    def drop_adapter(self, request):
        return call(self._stub.DropAdapter, request, self.timeout)

    def warm_start(self, request):
        return call(self._stub.WarmStart, request, self.timeout)

    def close(self) -> None:
        self._channel.close()


def make_client(cfg: Config, service=None) -> TrainerClient:
    """In-process when `cfg.run.deployment` is embedded (building the service from cfg unless one is given), gRPC to
    `cfg.services.trainer` when distributed."""
    if cfg.run.deployment == "embedded":
        if service is None:
            from services.trainer.service import TrainerService

            service = TrainerService.from_config(cfg)
        return InProcessTrainerClient(service)
    ep = cfg.services.trainer
    return GrpcTrainerClient(f"{ep.host}:{ep.port}", cfg.services.grpc_timeout_s)
