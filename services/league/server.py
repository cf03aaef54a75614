"""The league's gRPC server (and its REST app on the same process): `populora serve league`."""

from __future__ import annotations

import grpc

from populora.config import Config
from populora.pb import league_pb2_grpc
from populora.rpc import run_server, status_on_error
from services.league.service import LeagueService


class LeagueServicer(league_pb2_grpc.LeagueServicer):
    """Each RPC calls the service inside status_on_error, so ServiceError becomes its gRPC status."""

    def __init__(self, service: LeagueService):
        self.service = service

    def CreateRun(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.CreateRun(request)

    def RegisterAdapters(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.RegisterAdapters(request)

    def Matchmake(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.Matchmake(request)

    def ReportMatches(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.ReportMatches(request)

    def SelectForReplacement(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.SelectForReplacement(request)

    def RecordChild(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.RecordChild(request)

    def GetRatings(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.GetRatings(request)

    def GetLineage(self, request, context: grpc.ServicerContext):
        with status_on_error(context):
            return self.service.GetLineage(request)


def add_to_server(service: LeagueService):
    """The add-servicer callback for populora.rpc.make_server / run_server."""
    return lambda server: league_pb2_grpc.add_LeagueServicer_to_server(LeagueServicer(service), server)


def serve(cfg: Config, port: int | None = None, host: str = "0.0.0.0") -> int:
    """Upgrade the schema, then serve gRPC on cfg.services.league.port and REST (+ /metrics) on its rest_port."""
    from services.league.rest import create_app

    service = LeagueService.from_config(cfg)
    ep = cfg.services.league
    return run_server("league", [add_to_server(service)], port if port is not None else ep.port, host,
                      service_names=["populora.v1.League"], metrics_port=ep.metrics_port,
                      rest_app=create_app(service), rest_port=ep.rest_port)
