"""Clients of the evolver service: one interface, in-process (embedded mode) and gRPC (distributed mode)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from populora.config import Config
from populora.pb import evolver_pb2, evolver_pb2_grpc
from populora.rpc import call, channel


class EvolverClient(ABC):
    """One snake_case method per RPC of proto/evolver.proto; errors are populora.rpc.ServiceError."""

    @abstractmethod
    def breed(self, request: evolver_pb2.BreedRequest) -> evolver_pb2.BreedResponse: ...

    @abstractmethod
    def list_operators(self, request: evolver_pb2.ListOperatorsRequest) -> evolver_pb2.ListOperatorsResponse: ...

    def close(self) -> None:
        """Release what the client holds (a channel); the in-process client leaves the service to its owner."""
        return None


class InProcessEvolverClient(EvolverClient):
    """Calls an EvolverService in this process."""

    def __init__(self, service):
        self.service = service

    def breed(self, request):
        return self.service.Breed(request)

    def list_operators(self, request):
        return self.service.ListOperators(request)


class GrpcEvolverClient(EvolverClient):
    """Calls an evolver server over gRPC; a failed call raises ServiceError with the server's code."""

    def __init__(self, address: str, timeout: float | None = 600.0):
        self.address = address
        self.timeout = timeout
        self._channel = channel(address)
        self._stub = evolver_pb2_grpc.EvolverStub(self._channel)

    def breed(self, request):
        return call(self._stub.Breed, request, self.timeout)

    def list_operators(self, request):
        return call(self._stub.ListOperators, request, self.timeout)

    def close(self) -> None:
        self._channel.close()


def make_client(cfg: Config, service=None) -> EvolverClient:
    """In-process when `cfg.run.deployment` is embedded (building the service from cfg unless one is given), gRPC to
    `cfg.services.evolver` when distributed."""
    if cfg.run.deployment == "embedded":
        if service is None:
            from services.evolver.service import EvolverService

            service = EvolverService.from_config(cfg)
        return InProcessEvolverClient(service)
    ep = cfg.services.evolver
    return GrpcEvolverClient(f"{ep.host}:{ep.port}", cfg.services.grpc_timeout_s)
