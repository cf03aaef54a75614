"""Clients of the sandbox service: one interface, in-process (embedded mode) and gRPC (distributed mode)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from populora.config import Config
from populora.pb import sandbox_pb2, sandbox_pb2_grpc
from populora.rpc import call, channel


class SandboxClient(ABC):
    """One snake_case method per RPC of proto/sandbox.proto; errors are populora.rpc.ServiceError."""

    @abstractmethod
    def execute(self, request: sandbox_pb2.ExecuteRequest) -> sandbox_pb2.ExecuteResponse: ...

    @abstractmethod
    def validate_proposals(self, request: sandbox_pb2.ValidateProposalsRequest
                           ) -> sandbox_pb2.ValidateProposalsResponse: ...

    @abstractmethod
    def check_answers(self, request: sandbox_pb2.CheckAnswersRequest) -> sandbox_pb2.CheckAnswersResponse: ...

    def close(self) -> None:
        """Release what the client holds."""
        return None


class InProcessSandboxClient(SandboxClient):
    """Calls a SandboxService in this process; `close` stops its workers when the client built the service."""

    def __init__(self, service, owns: bool = False):
        self.service = service
        self.owns = owns

    def execute(self, request):
        return self.service.Execute(request)

    def validate_proposals(self, request):
        return self.service.ValidateProposals(request)

    def check_answers(self, request):
        return self.service.CheckAnswers(request)

    def close(self) -> None:
        if self.owns:
            self.service.close()


class GrpcSandboxClient(SandboxClient):
    def __init__(self, address: str, timeout: float = 600.0):
        self._channel = channel(address)
        self._stub = sandbox_pb2_grpc.SandboxStub(self._channel)
        self.timeout = timeout

    def execute(self, request):
        return call(self._stub.Execute, request, self.timeout)

    def validate_proposals(self, request):
        return call(self._stub.ValidateProposals, request, self.timeout)

    def check_answers(self, request):
        return call(self._stub.CheckAnswers, request, self.timeout)

    def close(self) -> None:
        self._channel.close()


def make_client(cfg: Config, service=None) -> SandboxClient:
    """gRPC to cfg.services.sandbox in distributed mode; otherwise in-process (building the service if needed)."""
    if cfg.run.deployment == "distributed":
        ep = cfg.services.sandbox
        return GrpcSandboxClient(f"{ep.host}:{ep.port}", cfg.services.grpc_timeout_s)
    if service is not None:
        return InProcessSandboxClient(service)
    from services.sandbox.service import SandboxService

    return InProcessSandboxClient(SandboxService.from_config(cfg), owns=True)
