"""The league's REST writes: create a run, register adapters, report matches, record a child. Each needs a caller that
may call the gRPC method it runs (a client certificate over HTTPS, or `Authorization: Bearer <token>`: the OpenAPI
security scheme `bearerToken`) and goes through the same LeagueService method as its gRPC call. Sending a write again is safe: it changes nothing; a write that contradicts what the league
holds is a 409."""

from __future__ import annotations

import json

from fastapi import Depends, FastAPI

from populora.http import requirement
from populora.pb import league_pb2
from services.league.rest_schemas import responses
from services.league.rest_validation import AdaptersIn, ChildIn, MatchesIn, RunIn, RunPath
from services.league.service import LeagueService


def add_write_routes(app: FastAPI, service: LeagueService) -> None:
    """The write endpoints on `app`, each held to the gRPC method it runs (the app's Guard checks the caller)."""
    def auth(method: str) -> list:
        return [Depends(requirement("league", method))]

    errors = responses(400, 401, 403, 404, 409, 413)

    @app.post("/v1/runs", tags=["write"], dependencies=auth("CreateRun"), responses=responses(400, 401, 403, 409, 413))
    def create_run(body: RunIn) -> dict:
        resp = service.CreateRun(league_pb2.CreateRunRequest(**body.model_dump()))
        return {"run_id": resp.run_id, "created": resp.created}

    @app.post("/v1/runs/{run_id}/adapters", tags=["write"], dependencies=auth("RegisterAdapters"), responses=errors)
    def register(run_id: RunPath, body: AdaptersIn) -> dict:
        resp = service.RegisterAdapters(league_pb2.RegisterAdaptersRequest(
            run_id=run_id, adapters=[league_pb2.AdapterSpec(**a.model_dump()) for a in body.adapters]))
        return {"registered": [r.adapter_id for r in resp.ratings]}

    @app.post("/v1/runs/{run_id}/matches", tags=["write"], dependencies=auth("ReportMatches"), responses=errors)
    def report(run_id: RunPath, body: MatchesIn) -> dict:
        """Apply played matches (idempotent by match id); answers the new ratings of the adapters involved."""
        resp = service.ReportMatches(league_pb2.ReportMatchesRequest(
            run_id=run_id, matches=[league_pb2.MatchResult(**m.model_dump()) for m in body.matches]))
        return {"applied": resp.applied, "duplicates": resp.duplicates,
                "ratings": [{"adapter_id": r.adapter_id, "mu": r.mu, "sigma": r.sigma,
                             "conservative_skill": r.conservative_skill} for r in resp.ratings]}

    @app.post("/v1/runs/{run_id}/children", tags=["write"], dependencies=auth("RecordChild"), responses=errors)
    def record_child(run_id: RunPath, body: ChildIn) -> dict:
        fields = body.model_dump(exclude={"params"})
        resp = service.RecordChild(league_pb2.RecordChildRequest(
            run_id=run_id, params_json=json.dumps(body.params, sort_keys=True), **fields))
        return {"adapter_id": resp.child.adapter_id, "mu": resp.child.mu, "sigma": resp.child.sigma}

