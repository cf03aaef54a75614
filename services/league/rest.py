"""The league's REST API (FastAPI, OpenAPI at /docs): leaderboard, lineage, match log, payoff, a web page, and
bearer-token writes. Reads are open; every write needs `Authorization: Bearer <token>`."""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import time
from collections.abc import Callable
from typing import Annotated, Literal

import grpc
import sqlalchemy as sa
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from populora.metrics import generate_latest
from populora.pb import league_pb2
from populora.rpc import ServiceError
from services.league.engine import InvalidRequest, UnknownEntity
from services.league.service import LeagueService

HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
               grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403}
Role = Literal["teacher", "student", "both"]
TaskType = Literal["code_i", "code_o", "code_f"]
Rho = Annotated[float, Field(ge=0.0, le=1.0)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- response models (documentation of the JSON; responses are serialised once and cached) ------------------------
class LeaderboardRow(Model):
    rank: int
    adapter_id: str
    role: Role
    status: Literal["active", "retired"]
    mu: float
    sigma: float
    conservative_skill: float = Field(description="mu - k*sigma (spec 6)")
    matches: int
    wins: int
    losses: int
    draws: int
    parents: list[str]
    operator: str
    created_step: int
    retired_step: int | None


class Leaderboard(Model):
    run_id: str
    role: str
    k: float
    rows: list[LeaderboardRow]


class RunInfo(Model):
    run_id: str
    mode: str
    created_at: str | None
    adapters: int
    active: int


class EdgeOut(Model):
    parent_id: str
    child_id: str
    operator: str
    step: int


class Lineage(Model):
    adapter_id: str
    run_id: str
    role: str
    status: str
    operator: str
    parents: list[str]
    created_step: int
    ancestors: list[EdgeOut]
    descendants: list[EdgeOut]


class MatchOut(Model):
    seq: int = Field(description="order in which the league applied the match; pass the last one as `after`")
    match_id: str
    teacher_id: str
    student_id: str
    task_type: str
    step: int
    rho: float
    rhos: list[float]
    outcome: str


class MatchPage(Model):
    matches: list[MatchOut]
    next_after: int | None = Field(description="`after` for the next page; null on the last page")


class Payoff(Model):
    run_id: str
    decay: float
    teachers: list[str]
    students: list[str]
    solve_rate: list[list[float | None]]
    matches: list[list[int]]


# ---- write requests -------------------------------------------------------------------------------------------------
class RunIn(Model):
    run_id: str = Field(min_length=1, max_length=200)
    mode: str = ""
    config_yaml: str = ""


class AdapterIn(Model):
    adapter_id: str = Field(min_length=1, max_length=128)
    role: Role
    rank: int = Field(0, ge=0)
    created_step: int = Field(0, ge=0)


class AdaptersIn(Model):
    adapters: list[AdapterIn] = Field(min_length=1)


class MatchIn(Model):
    match_id: str = Field(min_length=1, max_length=400)
    teacher_id: str
    student_id: str
    task_type: TaskType
    step: int = Field(ge=0)
    rhos: list[Rho] = Field(min_length=1, description="per task: the student's mean correctness, each in [0, 1]")


class MatchesIn(Model):
    matches: list[MatchIn] = Field(min_length=1)


class ChildIn(Model):
    child_id: str = Field(min_length=1, max_length=128)
    role: Role
    parent_ids: list[str] = Field(min_length=1)
    operator: str = Field(min_length=1)
    params_json: str = "{}"
    seed: int = 0
    step: int = Field(0, ge=0)
    retire_id: str = ""
    rank: int = Field(0, ge=0)


class _ReadCache:
    """Serialised read responses. An entry is valid while no write went through this service (its generation);
    past `ttl` seconds it is still served while one background query refreshes it, so the TTL only bounds how stale
    writes made by another league process can look (ttl + one query). One query per key at a time: concurrent
    misses wait for the same one instead of all querying the database."""

    def __init__(self, ttl: float, generation: Callable[[], int]):
        self.ttl = ttl
        self.generation = generation
        self._entries: dict[tuple, tuple[int, float, bytes]] = {}
        self._inflight: dict[tuple, tuple[int, asyncio.Future]] = {}

    async def get(self, key: tuple, build: Callable[[], object]) -> bytes:
        if self.ttl <= 0:
            return await run_in_threadpool(self._build, key, build, self.generation())
        entry = self._entries.get(key)
        if entry is not None and entry[0] == self.generation():
            if time.monotonic() - entry[1] >= self.ttl:
                self._refresh(key, build)  # stale while revalidating
            return entry[2]
        return await asyncio.shield(self._refresh(key, build))

    def _refresh(self, key: tuple, build: Callable[[], object]) -> asyncio.Future:
        """The query for `key` at the current generation: the one in flight, or a new one."""
        gen = self.generation()
        running = self._inflight.get(key)
        if running is not None and running[0] == gen:
            return running[1]
        task = asyncio.ensure_future(run_in_threadpool(self._build, key, build, gen))
        self._inflight[key] = (gen, task)
        task.add_done_callback(lambda done: self._done(key, done))
        return task

    def _done(self, key: tuple, task: asyncio.Future) -> None:
        running = self._inflight.get(key)
        if running is not None and running[1] is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here so a failed background refresh is not reported as unhandled

    def _build(self, key: tuple, build: Callable[[], object], gen: int) -> bytes:
        """Query and serialise; `gen` was read before the query, so a write during it leaves the entry stale."""
        now = time.monotonic()
        body = json.dumps(build(), separators=(",", ":")).encode()
        if self.ttl > 0:
            if len(self._entries) > 1024:
                self._entries.clear()
            current = self._entries.get(key)
            if current is None or current[0] <= gen:
                self._entries[key] = (gen, now, body)
        return body


def _json(body: bytes) -> Response:
    return Response(content=body, media_type="application/json")


class UsageOut(BaseModel):
    generated_tokens: int
    trained_tokens: int
    sandbox_jobs: int


class StepUsageOut(UsageOut):
    step: int
    cumulative_tokens: int


class ComputeSummary(BaseModel):
    run_id: str
    total: UsageOut
    total_tokens: int
    adapters: dict[str, UsageOut]
    steps: list[StepUsageOut]


def create_app(service: LeagueService) -> FastAPI:
    """The REST app over a LeagueService (served beside the gRPC server by `serve`, or alone by uvicorn)."""
    app = FastAPI(title="PopuLoRA league", version="1",
                  description="TrueSkill leaderboard, lineage, match log and payoff matrix of PopuLoRA runs.")
    cache = _ReadCache(service.read_cache_s, lambda: service.db.generation)

    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, e: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": e.message}, status_code=HTTP_STATUS.get(e.code, 500))

    @app.exception_handler(UnknownEntity)
    def _unknown(_request: Request, e: UnknownEntity) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(InvalidRequest)
    def _refused(_request: Request, e: InvalidRequest) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=422)

    def require_token(authorization: str = Header("", description="Bearer <token>")) -> None:
        if not service.token:
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               "writes are disabled: set services.token or $POPULORA_TOKEN on the server")
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), service.token.encode()):
            raise ServiceError(grpc.StatusCode.UNAUTHENTICATED,
                               "a write needs the header 'Authorization: Bearer <league token>'")

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict:
        with service.db.read_engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return {"status": "ok"}

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        return Response(generate_latest(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/runs", response_model=list[RunInfo], tags=["read"])
    async def runs() -> Response:
        return _json(await cache.get(("runs",), service.db.list_runs))

    @app.get("/v1/runs/{run_id}/leaderboard", response_model=Leaderboard, tags=["read"])
    async def leaderboard(run_id: str, role: Role | None = None, include_retired: bool = True) -> Response:
        """Best conservative skill (mu - k*sigma) first; `role=teacher` also lists a `both` adapter."""
        def build():
            return {"run_id": run_id, "role": role or "", "k": service.rules.params.k,
                    "rows": service.leaderboard(run_id, role or "", include_retired)}

        return _json(await cache.get(("leaderboard", run_id, role, include_retired), build))

    @app.get("/v1/adapters/{adapter_id}/lineage", response_model=Lineage, tags=["read"])
    def lineage(adapter_id: str) -> dict:
        return service.lineage_tree(adapter_id)

    @app.get("/v1/adapters/{adapter_id}/history", tags=["read"])
    def history(adapter_id: str) -> dict:
        """mu and sigma of one adapter after each step it played."""
        service.db.adapter(adapter_id)
        return {"adapter_id": adapter_id, "history": service.db.rating_history(adapter_id)}

    @app.get("/v1/runs/{run_id}/matches", response_model=MatchPage, tags=["read"])
    def matches(run_id: str, adapter_id: str = "", teacher_id: str = "", student_id: str = "",
                task_type: TaskType | None = None, step_min: int | None = Query(None, ge=0),
                step_max: int | None = Query(None, ge=0), after: int = Query(0, ge=0),
                limit: int = Query(100, ge=1, le=1000)) -> dict:
        """The match log in applied order, filtered, one page at a time (pass `next_after` as `after`)."""
        page = service.db.list_matches(run_id, adapter_id=adapter_id, teacher_id=teacher_id, student_id=student_id,
                                       task_type=task_type or "", step_min=step_min, step_max=step_max,
                                       after=after, limit=limit)
        return {"matches": page, "next_after": page[-1]["seq"] if len(page) == limit else None}

    @app.get("/v1/runs/{run_id}/compute", response_model=ComputeSummary, tags=["read"],
             responses={404: {"description": "no such run"}})
    async def compute(run_id: str) -> Response:
        """Compute the run has spent (spec 14): generated and trained tokens and sandbox jobs, in total, per
        adapter ("base" is the bare base model) and per step with the running token total."""
        return _json(await cache.get(("compute", run_id), lambda: service.compute_summary(run_id)))

    @app.get("/v1/runs/{run_id}/payoff", response_model=Payoff, tags=["read"])
    async def payoff(run_id: str) -> Response:
        return _json(await cache.get(("payoff", run_id), lambda: service.payoff_matrix(run_id)))

    # ---- writes ---------------------------------------------------------------------------------------------------
    @app.post("/v1/runs", tags=["write"], dependencies=[Depends(require_token)])
    def create_run(body: RunIn) -> dict:
        resp = service.CreateRun(league_pb2.CreateRunRequest(**body.model_dump()))
        return {"run_id": resp.run_id, "created": resp.created}

    @app.post("/v1/runs/{run_id}/adapters", tags=["write"], dependencies=[Depends(require_token)])
    def register(run_id: str, body: AdaptersIn) -> dict:
        resp = service.RegisterAdapters(league_pb2.RegisterAdaptersRequest(
            run_id=run_id, adapters=[league_pb2.AdapterSpec(**a.model_dump()) for a in body.adapters]))
        return {"registered": [r.adapter_id for r in resp.ratings]}

    @app.post("/v1/runs/{run_id}/matches", tags=["write"], dependencies=[Depends(require_token)])
    def report(run_id: str, body: MatchesIn) -> dict:
        """Apply played matches (idempotent by match id); answers the new ratings of the adapters involved."""
        resp = service.ReportMatches(league_pb2.ReportMatchesRequest(
            run_id=run_id, matches=[league_pb2.MatchResult(**m.model_dump()) for m in body.matches]))
        return {"applied": resp.applied, "duplicates": resp.duplicates,
                "ratings": [{"adapter_id": r.adapter_id, "mu": r.mu, "sigma": r.sigma,
                             "conservative_skill": r.conservative_skill} for r in resp.ratings]}

    @app.post("/v1/runs/{run_id}/children", tags=["write"], dependencies=[Depends(require_token)])
    def record_child(run_id: str, body: ChildIn) -> dict:
        resp = service.RecordChild(league_pb2.RecordChildRequest(run_id=run_id, **body.model_dump()))
        return {"adapter_id": resp.child.adapter_id, "mu": resp.child.mu, "sigma": resp.child.sigma}

    # ---- the web page ---------------------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(run: str = "", role: Role | None = None) -> str:
        return _page(service, run, role)

    return app


def _page(service: LeagueService, run_id: str, role: str | None) -> str:
    runs = service.db.list_runs()
    e = html.escape
    links = " ".join(f'<a href="/?run={e(r["run_id"])}">{e(r["run_id"])}</a>' for r in runs) or "no runs yet"
    body = [f"<p>Runs: {links}</p>"]
    if not run_id and runs:
        run_id = runs[-1]["run_id"]
    if run_id:
        rows = service.leaderboard(run_id, role or "")
        roles = " ".join(f'<a href="/?run={e(run_id)}&role={r}">{r}s</a>' for r in ("teacher", "student"))
        body.append(f"<h2>{e(run_id)}</h2><p>{roles} <a href=\"/?run={e(run_id)}\">all</a> · "
                    f'<a href="/v1/runs/{e(run_id)}/payoff">payoff</a> · '
                    f'<a href="/v1/runs/{e(run_id)}/matches">matches</a></p>')
        head = "".join(f"<th>{h}</th>" for h in ("#", "adapter", "role", "status", "μ", "σ", "μ−kσ", "matches",
                                                  "W", "L", "D", "operator", "parents", "lineage"))
        trs = "".join(
            f"<tr><td>{r['rank']}</td><td>{e(r['adapter_id'])}</td><td>{r['role']}</td><td>{r['status']}</td>"
            f"<td>{r['mu']:.2f}</td><td>{r['sigma']:.2f}</td><td>{r['conservative_skill']:.2f}</td>"
            f"<td>{r['matches']}</td><td>{r['wins']}</td><td>{r['losses']}</td><td>{r['draws']}</td>"
            f"<td>{e(r['operator'])}</td><td>{e(', '.join(r['parents']))}</td>"
            f'<td><a href="/v1/adapters/{e(r["adapter_id"])}/lineage">lineage</a></td></tr>' for r in rows)
        body.append(f"<table><tr>{head}</tr>{trs}</table>")
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>PopuLoRA league</title><style>{style}</style>"
            f"</head><body><h1>PopuLoRA league</h1>{''.join(body)}<p><a href=\"/docs\">API</a></p></body></html>")

