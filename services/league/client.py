"""Clients of the league service: one interface, in-process (embedded mode) and gRPC (distributed mode)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from populora.config import Config
from populora.pb import league_pb2, league_pb2_grpc
from populora.rpc import call, channel


class LeagueClient(ABC):
    """One snake_case method per RPC of proto/league.proto; errors are populora.rpc.ServiceError."""

    @abstractmethod
    def create_run(self, request: league_pb2.CreateRunRequest) -> league_pb2.CreateRunResponse: ...

    @abstractmethod
    def register_adapters(self, request: league_pb2.RegisterAdaptersRequest
                          ) -> league_pb2.RegisterAdaptersResponse: ...

    @abstractmethod
    def matchmake(self, request: league_pb2.MatchmakeRequest) -> league_pb2.MatchmakeResponse: ...

    @abstractmethod
    def report_matches(self, request: league_pb2.ReportMatchesRequest) -> league_pb2.ReportMatchesResponse: ...

    @abstractmethod
    def select_for_replacement(self, request: league_pb2.SelectForReplacementRequest
                               ) -> league_pb2.SelectForReplacementResponse: ...

    @abstractmethod
    def record_child(self, request: league_pb2.RecordChildRequest) -> league_pb2.RecordChildResponse: ...

    @abstractmethod
    def get_ratings(self, request: league_pb2.GetRatingsRequest) -> league_pb2.GetRatingsResponse: ...

    @abstractmethod
    def get_lineage(self, request: league_pb2.GetLineageRequest) -> league_pb2.GetLineageResponse: ...

    def close(self) -> None:
        """Release what the client holds (a channel); the in-process client leaves the service to its owner."""
        return None


class InProcessLeagueClient(LeagueClient):
    """Calls a LeagueService in this process."""

    def __init__(self, service):
        self.service = service

    def create_run(self, request):
        return self.service.CreateRun(request)

    def register_adapters(self, request):
        return self.service.RegisterAdapters(request)

    def matchmake(self, request):
        return self.service.Matchmake(request)

    def report_matches(self, request):
        return self.service.ReportMatches(request)

    def select_for_replacement(self, request):
        return self.service.SelectForReplacement(request)

    def record_child(self, request):
        return self.service.RecordChild(request)

    def get_ratings(self, request):
        return self.service.GetRatings(request)

    def get_lineage(self, request):
        return self.service.GetLineage(request)


class GrpcLeagueClient(LeagueClient):
    """Calls a league server over gRPC; a failed call raises ServiceError with the server's code."""

    def __init__(self, address: str, timeout: float | None = 600.0):
        self.address = address
        self.timeout = timeout
        self._channel = channel(address)
        self._stub = league_pb2_grpc.LeagueStub(self._channel)

    def create_run(self, request):
        return call(self._stub.CreateRun, request, self.timeout)

    def register_adapters(self, request):
        return call(self._stub.RegisterAdapters, request, self.timeout)

    def matchmake(self, request):
        return call(self._stub.Matchmake, request, self.timeout)

    def report_matches(self, request):
        return call(self._stub.ReportMatches, request, self.timeout)

    def select_for_replacement(self, request):
        return call(self._stub.SelectForReplacement, request, self.timeout)

    def record_child(self, request):
        return call(self._stub.RecordChild, request, self.timeout)

    def get_ratings(self, request):
        return call(self._stub.GetRatings, request, self.timeout)

    def get_lineage(self, request):
        return call(self._stub.GetLineage, request, self.timeout)

    def close(self) -> None:
        self._channel.close()


def make_client(cfg: Config, service=None) -> LeagueClient:
    """In-process when `cfg.run.deployment` is embedded (building the service from cfg unless one is given), gRPC to
    `cfg.services.league` when distributed."""
    if cfg.run.deployment == "embedded":
        if service is None:
            from services.league.service import LeagueService

            service = LeagueService.from_config(cfg)
        return InProcessLeagueClient(service)
    ep = cfg.services.league
    return GrpcLeagueClient(f"{ep.host}:{ep.port}", cfg.services.grpc_timeout_s)
