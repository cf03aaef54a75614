"""The league's REST app (FastAPI, OpenAPI at /docs): the error answers, health and metrics, and the read, run,
write and page routes of the other rest_* modules on one app."""

from __future__ import annotations

import json
import math

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from populora.access import Access
from populora.http import answer_http_errors, error_response, guard, requirement
from populora.metrics import generate_latest
from populora.retry import db_unavailable
from populora.rpc import ServiceError
from services.league.engine import Conflict, InvalidRequest, UnknownEntity
from services.league.rest_cache import ReadCache
from services.league.rest_dashboard import add_page, add_run_routes
from services.league.rest_league import add_league_routes
from services.league.rest_schemas import Health, responses
from services.league.rest_validation import MAX_BODY_BYTES
from services.league.rest_writes import add_write_routes
from services.league.service import LeagueService


class _AsciiJSON(JSONResponse):
    """An error that echoes its input: lone surrogates as \\u escapes, NaN and infinities as strings, so the
    answer is always valid JSON."""

    def render(self, content: object) -> bytes:
        return json.dumps(_finite(content), ensure_ascii=True, separators=(",", ":")).encode()


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def create_app(service: LeagueService, read_only: bool = False, access: Access | None = None) -> FastAPI:
    """The REST app over a LeagueService (served beside the gRPC server by `serve`, or alone by uvicorn); with
    `read_only` it has no write endpoints (the dashboard beside a run). `access` (default: the service's token alone,
    plaintext) names each caller and holds it to the operation it calls before its body is read (populora.http's
    Guard): a write to the gRPC method it runs, a read to `Read` (open only on a plaintext server without scoped
    tokens)."""
    app = FastAPI(title="PopuLoRA league", version="1",
                  description="TrueSkill leaderboard, lineage, match log, payoff matrix and the phase journal of "
                              "PopuLoRA runs, and the web dashboard at `/`.", max_body_size=MAX_BODY_BYTES,
                  responses=responses(503))
    db = service.db
    cache = ReadCache(service.read_cache_s, lambda: db.generation, service.read_queries)

    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, e: ServiceError) -> JSONResponse:
        return error_response(e, e.message)

    @app.exception_handler(Conflict)
    def _conflict(_request: Request, e: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=409)

    @app.exception_handler(UnknownEntity)
    def _unknown(_request: Request, e: UnknownEntity) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(InvalidRequest)
    def _refused(_request: Request, e: InvalidRequest) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    def _invalid_request(_request: Request, e: RequestValidationError) -> JSONResponse:
        # The error echoes the input, which may hold a lone surrogate: written as a \u escape, never a 500.
        return _AsciiJSON({"detail": jsonable_encoder(e.errors())}, status_code=422)

    answer_http_errors(app)

    @app.exception_handler(sa.exc.DBAPIError)
    def _database_error(_request: Request, e: sa.exc.DBAPIError) -> JSONResponse:
        if db_unavailable(e) or isinstance(e, sa.exc.OperationalError):
            return JSONResponse({"detail": f"the league database does not answer ({type(e.orig).__name__}: "
                                           f"{' '.join(str(e.orig).split())}); try again once it is back (every write "
                                           "is idempotent: sending one again is safe)"},
                                status_code=503, headers={"Retry-After": "5"})
        return JSONResponse({"detail": f"database error: {type(e.orig).__name__}"}, status_code=500)

    @app.get("/healthz", tags=["ops"], response_model=Health)
    def healthz() -> dict:
        with db.read_engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return {"status": "ok"}

    @app.get("/metrics", tags=["ops"], response_class=Response, dependencies=[Depends(requirement("league", "Read"))],
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus metrics"},
                        **responses(401, 403)})
    def metrics() -> Response:
        return Response(generate_latest(), media_type="text/plain; version=0.0.4; charset=utf-8")

    add_league_routes(app, service, cache)
    add_run_routes(app, service, cache)
    if not read_only:
        add_write_routes(app, service)
    add_page(app)
    guard(app, access if access is not None else Access(service.token), "league")
    return app
