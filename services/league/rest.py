"""The league's REST API (FastAPI, OpenAPI at /docs) and its web dashboard: leaderboard, rating curves, lineage,
match log, payoff, the run's progress and problems from the phase journal, and bearer-token writes.

Reads are open; every write needs `Authorization: Bearer <token>`. Every field is bounded and checked here, at the
edge, so a hostile request gets a 4xx naming the field and never reaches the database: text has no NUL and is
valid UTF-8, ids hold no control character, lengths fit the columns, integers fit the proto fields (int32 ranks; steps and seeds within
+-(2^53 - 1), what a JSON number holds exactly, inside int64).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Annotated, Literal

import grpc
import sqlalchemy as sa
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from populora.http import Number, answer_http_errors, http_status, require_token
from populora.metrics import generate_latest
from populora.pb import league_pb2
from populora.retry import db_unavailable
from populora.rpc import ServiceError
from services.league import reads
from services.league.engine import InvalidRequest, UnknownEntity
from services.league.runview import Journal, config_of, store_root, version_path
from services.league.service import LeagueService

if TYPE_CHECKING:
    from populora.config import Config

STATIC_DIR = FilePath(__file__).resolve().parent / "static"
MAX_BODY_BYTES = 16 * 1024 * 1024
INT32_MAX = 2**31 - 1
# Steps, seeds and sequence numbers: the integers a JSON number holds exactly (2^53 - 1, any client, a browser
# included); inside the proto's int64 and the columns' BIGINT.
JSON_INT_MAX = 2**53 - 1
MAX_BATCH = 10_000
# The dashboard page: its own scripts, styles and JSON only, nothing inline, nothing from another address.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def _clean_text(value: str) -> str:
    """Text that Postgres and SQLite store as given: valid UTF-8 (no lone surrogate); NUL is excluded by the
    schema's pattern."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid UTF-8 text (it holds a lone surrogate)") from None
    return value


NO_NUL = r"^[^\x00]*$"  # Postgres text cannot hold NUL
# ids: printable, no control character (NUL, tab, newline, U+0013, DEL, ...), as the engine checks (check_id)
ID = r"^[^\x00-\x1f\x7f]*$"
CleanText = AfterValidator(_clean_text)
Role = Literal["teacher", "student", "both"]
TaskType = Literal["code_i", "code_o", "code_f"]
Rho = Annotated[float, Field(ge=0.0, le=1.0), Number]
RunId = Annotated[str, Field(min_length=1, max_length=200, pattern=ID), CleanText]
AdapterId = Annotated[str, Field(min_length=1, max_length=128, pattern=ID), CleanText]
OptionalId = Annotated[str, Field(max_length=128, pattern=ID), CleanText]
Step = Annotated[int, Field(ge=0, le=JSON_INT_MAX), Number]
Seed = Annotated[int, Field(ge=-JSON_INT_MAX, le=JSON_INT_MAX), Number]
Rank = Annotated[int, Field(ge=0, le=INT32_MAX), Number]
RunPath = Annotated[str, Path(min_length=1, max_length=200, pattern=ID, description="a run id"), CleanText]
AdapterPath = Annotated[str, Path(min_length=1, max_length=128, pattern=ID, description="an adapter id"),
                        CleanText]
AdapterQuery = Annotated[str, Query(max_length=128, pattern=ID, description="an adapter id (empty: any)"),
                         CleanText]
StepQuery = Annotated[int | None, Query(ge=0, le=JSON_INT_MAX)]
BenchmarkQuery = Annotated[str, Query(max_length=64, pattern=ID, description="a benchmark (empty: every one)"),
                           CleanText]
SeqQuery = Annotated[int | None, Query(ge=0, le=JSON_INT_MAX)]
ParamName = Annotated[str, Field(min_length=1, max_length=64, pattern=ID), CleanText]
ParamValue = Annotated[float, Field(allow_inf_nan=False), Number]


def _names_schema(schema: dict) -> None:
    """A dict whose keys are constrained: pydantic writes the key pattern as `patternProperties`, which lets a key that
    breaks it through with a value of any type; say it as `propertyNames` and type every value instead."""
    pattern, value = schema.pop("patternProperties").popitem()
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
    schema["additionalProperties"] = value


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(Model):
    detail: str = Field(description="what was wrong, which input, what to do")


def _responses(*codes: int) -> dict:
    """OpenAPI documentation of the error statuses an endpoint answers (422 is documented by FastAPI)."""
    what = {400: "invalid input (the message names the field); nothing was written",
            401: "missing or wrong bearer token", 403: "writes are disabled (no token configured)",
            404: "unknown run or adapter", 413: "request body over 16 MiB",
            503: "the league's database does not answer (any endpoint)"}
    return {c: {"model": ErrorOut, "description": what[c]} for c in codes}


# ---- response models (documentation of the JSON; reads are serialised once and served as bytes) -------------------
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
    next_after: int | None = Field(description="`after` for the next page (order=asc); null on the last page")
    next_before: int | None = Field(None, description="`before` for the next page (order=desc); null on the last")


class Payoff(Model):
    run_id: str
    decay: float
    teachers: list[str]
    students: list[str]
    solve_rate: list[list[float | None]]
    matches: list[list[int]]


class History(Model):
    adapter_id: str
    history: list[dict[str, float]] = Field(description="step, mu, sigma, matches after each step it played")


class Health(Model):
    status: str


class RatingCurve(Model):
    adapter_id: str
    role: Role
    status: str
    created_step: int
    retired_step: int | None
    steps: list[int]
    mu: list[float]
    sigma: list[float]
    conservative_skill: list[float]


class LeagueEvent(Model):
    step: int
    child_id: str
    role: str
    operator: str
    parents: list[str]
    epsilon: float | None = Field(description="the ε the operator applied (null where it uses none)")
    retired_ids: list[str] = Field(description="members of the child's role retired at that step")


class RatingCurves(Model):
    run_id: str
    k: float
    adapters: list[RatingCurve]
    events: list[LeagueEvent]


class LineageNode(Model):
    adapter_id: str
    role: Role
    status: str
    created_step: int
    retired_step: int | None
    operator: str
    parents: list[str]
    params: dict[str, float | int | str | bool | None]
    mu: float
    sigma: float
    conservative_skill: float
    matches: int


class RunEdge(EdgeOut):
    epsilon: float | None


class RunLineage(Model):
    run_id: str
    k: float
    nodes: list[LineageNode]
    edges: list[RunEdge]


class TaskTypeStats(Model):
    proposals: int
    valid: int
    valid_rate: float | None
    rejections: dict[str, int]
    solve_rate: float | None
    ast_depth: float | None
    cyclomatic: float | None
    lines_of_code: float | None


class JournalEvent(Model):
    step: int | None = None
    role: str
    retired: str
    child: str
    parents: list[str]
    operator: str
    relative_change: float | None
    epsilon: float | None = None


class SeedInfo(Model):
    sizes: dict[str, int]
    reasons: dict[str, int]
    rounds: int | None
    proposals: int | None


class StepSummary(Model):
    step: int
    phases: list[str]
    seconds: dict[str, float]
    step_seconds: float
    finished_at: float | None
    seed: SeedInfo | None = None
    proposals: int | None = None
    valid: int | None = None
    valid_rate: float | None = None
    rejections: dict[str, int] | None = None
    task_types: dict[str, TaskTypeStats] | None = None
    solve_rate: float | None = None
    outcomes: dict[str, int] | None = None
    matches: int | None = None
    compute: dict[str, float] | None = None
    evolution: list[JournalEvent] | None = None


class PhaseAt(Model):
    step: int
    phase: str
    finished_at: float | None = None


class Progress(Model):
    done: PhaseAt | None = Field(description="the last phase persisted")
    in_progress: PhaseAt | None = Field(description="the phase running now (null unless the run is running)")


class PhaseError(Model):
    step: int
    phase: str
    error: str


class LeagueCounts(Model):
    adapters: int
    active: int
    last_match_seq: int
    evals: int = Field(description="held-out scores recorded for the run")
    evals_recorded_at: float = Field(description="when the latest of them was recorded (unix seconds; 0: none)")


class Overview(Model):
    run_id: str
    revision: str = Field(description="changes whenever anything on the dashboard would")
    server_time: float
    journal: bool = Field(description="whether the database holds this run's phase journal")
    status: str
    mode: str
    steps_planned: int | None
    created_at: float | None
    updated_at: float | None
    progress: Progress
    error: PhaseError | None
    latest_step: StepSummary | None
    last_measured_step: StepSummary | None = Field(description="the latest step with proposals")
    compute: dict[str, float] = Field(description="generated and trained tokens and sandbox jobs so far (spec 14)")
    evolution: list[JournalEvent]
    journal_rows: int
    league: LeagueCounts


class Steps(Model):
    run_id: str
    steps: list[StepSummary]


class TaskOut(Model):
    id: str
    step: int
    task_type: str
    teacher_id: str
    student_id: str
    validated: bool
    valid: bool
    reason: str
    detail: str
    program: str
    inputs: list[str]
    outputs: list[str]
    message: str
    complexity: dict[str, float | None]
    rho: float | None
    text: str = Field(description="the teacher's whole answer, as the model wrote it")
    version: int | None


class StepCount(Model):
    step: int
    proposals: int
    valid: int


class Tasks(Model):
    run_id: str
    step: int
    steps: list[StepCount]
    tasks: list[TaskOut]


class AdapterRecord(Model):
    adapter_id: str
    run_id: str
    role: Role
    status: str
    rank: int
    created_step: int
    retired_step: int | None
    mu: float
    sigma: float
    conservative_skill: float
    matches: int
    wins: int
    losses: int
    draws: int
    operator: str
    params: dict[str, float | int | str | bool | None]
    seed: int
    parents: list[str]


class VersionAt(Model):
    version: int
    step: int = Field(description="the step after which this version was current")


class AdapterPage(Model):
    adapter: AdapterRecord
    k: float = Field(description="the k of mu - k*sigma")
    versions: list[VersionAt]
    store_root: str = Field(description="the run's artifact store, as its config names it")
    store_path: str = Field(description="the directory of the adapter's latest stored version")
    journal: bool


class ProposalSample(Model):
    step: int
    id: str
    task_type: str
    text: str
    validated: bool
    valid: bool
    reason: str
    detail: str
    program: str
    rho: float | None
    version: int | None


class AnswerSample(Model):
    step: int
    id: str
    task_id: str
    task_type: str
    text: str
    outcome: str
    program: str
    inputs: list[str]
    outputs: list[str]


class Samples(Model):
    adapter_id: str
    proposals: list[ProposalSample]
    answers: list[AnswerSample]


# ---- write requests -------------------------------------------------------------------------------------------------
class RunIn(Model):
    run_id: RunId
    mode: Annotated[str, Field(max_length=32, pattern=NO_NUL), CleanText] = ""
    config_yaml: Annotated[str, Field(max_length=1_000_000, pattern=NO_NUL), CleanText] = ""


class AdapterIn(Model):
    adapter_id: AdapterId
    role: Role
    rank: Rank = 0
    created_step: Step = 0


class AdaptersIn(Model):
    adapters: list[AdapterIn] = Field(min_length=1, max_length=MAX_BATCH)


class MatchIn(Model):
    match_id: Annotated[str, Field(min_length=1, max_length=400, pattern=ID), CleanText]
    teacher_id: AdapterId
    student_id: AdapterId
    task_type: TaskType
    step: Step
    rhos: list[Rho] = Field(min_length=1, max_length=MAX_BATCH,
                            description="per task: the student's mean correctness, each in [0, 1]")


class MatchesIn(Model):
    matches: list[MatchIn] = Field(min_length=1, max_length=MAX_BATCH)


class ChildIn(Model):
    child_id: AdapterId
    role: Role
    parent_ids: list[AdapterId] = Field(min_length=1, max_length=8)
    operator: Annotated[str, Field(min_length=1, max_length=16, pattern=ID), CleanText]
    params: dict[ParamName, ParamValue] = Field(default_factory=dict, max_length=64,
                                                description="the operator's parameters (stored as JSON)",
                                                json_schema_extra=_names_schema)
    seed: Seed = 0
    step: Step = 0
    retire_id: OptionalId = ""
    rank: Rank = 0


class _ReadCache:
    """Serialised read responses. An entry is valid while no write went through this service (its generation);
    past `ttl` seconds it is still served while one background query refreshes it, so the TTL only bounds how stale
    writes made by another league process can look (ttl + one query). One query per key at a time: concurrent
    misses wait for the same one instead of all querying the database; and at most `queries` builds at a time
    (`league.read_queries`), the others queued in arrival order."""

    def __init__(self, ttl: float, generation: Callable[[], int], queries: int = 8):
        self.ttl = ttl
        self.generation = generation
        self._entries: dict[tuple, tuple[int, float, bytes]] = {}
        self._inflight: dict[tuple, tuple[int, asyncio.Future]] = {}
        self.queries = queries
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    async def _query(self, key: tuple, build: Callable[[], object], gen: int) -> bytes:
        """Run one build in the thread pool once one of the `queries` slots is free (waiters in arrival order)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:  # one semaphore per event loop serving the app
            self._slots = (loop, asyncio.Semaphore(self.queries))
        async with self._slots[1]:
            return await run_in_threadpool(self._build, key, build, gen)

    async def get(self, key: tuple, build: Callable[[], object]) -> bytes:
        if self.ttl <= 0:
            return await self._query(key, build, self.generation())
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
        task = asyncio.ensure_future(self._query(key, build, gen))
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
        """Query and serialise; `gen` was read before the query, so a write during it leaves the entry stale.
        A build may return bytes it serialised itself (the leaderboard does, in the database)."""
        now = time.monotonic()
        value = build()
        body = value if isinstance(value, bytes) else _dumps(value)
        if self.ttl > 0:
            if len(self._entries) > 1024:
                self._entries.clear()
            current = self._entries.get(key)
            if current is None or current[0] <= gen:
                self._entries[key] = (gen, now, body)
        return body


def _dumps(value: object) -> bytes:
    """Compact JSON; NaN or infinity would make it unreadable to a browser, so they are a bug here, not data."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


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


class EvalProblemOut(Model):
    id: str
    passed: int = Field(description="samples that passed")
    n: int = Field(description="samples")
    error: str = Field(description="the first failing sample's error line (empty when all passed)")


class EvalOut(Model):
    adapter_id: str | None = Field(description="null: the bare base model")
    version: int
    benchmark: str
    step: int = Field(description="the training step after which this version was current")
    label: str
    n_problems: int
    samples: int
    pass_at_1: float
    pass_at_k: dict[str, float] = Field(description="k -> the unbiased pass@k estimate (k as text)")
    recorded_at: float
    problems: list[EvalProblemOut] | None = Field(description="per problem, with include_problems (else null)")


class Evals(Model):
    run_id: str
    adapter_id: str | None
    evals: list[EvalOut]


class _Static(StaticFiles):
    """The dashboard's files with the page's security headers."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_HEADERS)
        return response


def create_app(service: LeagueService, read_only: bool = False) -> FastAPI:
    """The REST app over a LeagueService (served beside the gRPC server by `serve`, or alone by uvicorn); with
    `read_only` it has no write endpoints (the dashboard beside a run)."""
    app = FastAPI(title="PopuLoRA league", version="1",
                  description="TrueSkill leaderboard, lineage, match log, payoff matrix and the phase journal of "
                              "PopuLoRA runs, and the web dashboard at `/`.", max_body_size=MAX_BODY_BYTES,
                  responses=_responses(503))
    db = service.db
    cache = _ReadCache(service.read_cache_s, lambda: db.generation, service.read_queries)
    journal = Journal(db.read_engine)
    not_found = _responses(404)

    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, e: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": e.message}, status_code=http_status(e))

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

    token_check = require_token(lambda: service.token)

    @app.get("/healthz", tags=["ops"], response_model=Health)
    def healthz() -> dict:
        with db.read_engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return {"status": "ok"}

    @app.get("/metrics", tags=["ops"], response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus metrics"}})
    def metrics() -> Response:
        return Response(generate_latest(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # ---- league reads ---------------------------------------------------------------------------------------------
    @app.get("/v1/runs", response_model=list[RunInfo], tags=["read"])
    async def runs() -> Response:
        return _json(await cache.get(("runs",), db.list_runs))

    @app.get("/v1/runs/{run_id}/leaderboard", response_model=Leaderboard, tags=["read"], responses=not_found)
    async def leaderboard(run_id: RunPath, role: Role | None = None, include_retired: bool = True) -> Response:
        """Best conservative skill (mu - k*sigma) first; `role=teacher` also lists a `both` adapter. On Postgres
        the rows are ranked and serialised by the database in one statement."""
        return _json(await cache.get(("leaderboard", run_id, role, include_retired),
                                     lambda: reads.leaderboard_body(db, run_id, role or "", include_retired)))

    @app.get("/v1/runs/{run_id}/ratings", response_model=RatingCurves, tags=["read"], responses=not_found)
    async def ratings(run_id: RunPath) -> Response:
        """Rating curves: every adapter's mu, sigma and mu - k*sigma after each step it played, and the run's
        evolution events (children, their operator and ε, the members retired)."""
        return _json(await cache.get(("ratings", run_id), lambda: reads.run_ratings(db, run_id)))

    @app.get("/v1/runs/{run_id}/lineage", response_model=RunLineage, tags=["read"], responses=not_found)
    async def run_lineage(run_id: RunPath) -> Response:
        """The whole family tree of a run: every adapter it ever had as a node, every parent -> child link as an
        edge with operator, step and ε."""
        return _json(await cache.get(("lineage", run_id), lambda: reads.run_lineage(db, run_id)))

    @app.get("/v1/adapters/{adapter_id}/lineage", response_model=Lineage, tags=["read"], responses=not_found)
    async def lineage(adapter_id: AdapterPath) -> Response:
        """One adapter's ancestors and descendants."""
        return _json(await cache.get(("adapter-lineage", adapter_id), lambda: reads.adapter_lineage(db, adapter_id)))

    @app.get("/v1/adapters/{adapter_id}/history", response_model=History, tags=["read"], responses=not_found)
    def history(adapter_id: AdapterPath) -> Response:
        """mu and sigma of one adapter after each step it played."""
        db.adapter(adapter_id)
        return _json(_dumps({"adapter_id": adapter_id, "history": db.rating_history(adapter_id)}))

    @app.get("/v1/runs/{run_id}/matches", response_model=MatchPage, tags=["read"], responses=not_found)
    def matches(run_id: RunPath, adapter_id: AdapterQuery = "", teacher_id: AdapterQuery = "",
                student_id: AdapterQuery = "", task_type: TaskType | None = None, step_min: StepQuery = None,
                step_max: StepQuery = None, after: Annotated[int, Query(ge=0, le=JSON_INT_MAX)] = 0,
                before: SeqQuery = None, order: Literal["asc", "desc"] = "asc",
                limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
        """The match log, filtered, one page at a time: in applied order (pass `next_after` as `after`), or newest
        first with `order=desc` (pass `next_before` as `before`)."""
        desc = order == "desc"
        page = db.list_matches(run_id, adapter_id=adapter_id, teacher_id=teacher_id, student_id=student_id,
                               task_type=task_type or "", step_min=step_min, step_max=step_max, after=after,
                               limit=limit, before=before, descending=desc)
        last = page[-1]["seq"] if len(page) == limit else None
        return _json(_dumps({"matches": page, "next_after": None if desc else last,
                             "next_before": last if desc else None}))

    @app.get("/v1/runs/{run_id}/compute", response_model=ComputeSummary, tags=["read"], responses=not_found)
    async def compute(run_id: RunPath) -> Response:
        """Compute the run has spent (spec 14): generated and trained tokens and sandbox jobs, in total, per
        adapter ("base" is the bare base model) and per step with the running token total, as the coordinator
        records them after each step."""
        return _json(await cache.get(("compute", run_id), lambda: service.compute_summary(run_id)))

    @app.get("/v1/runs/{run_id}/evals", response_model=Evals, tags=["read"], responses=not_found)
    async def evals(run_id: RunPath, benchmark: BenchmarkQuery = "", include_problems: bool = False) -> Response:
        """Held-out benchmark scores of the run's adapter versions and the bare base model (adapter_id null), by
        step: pass@1, pass@k, and with `include_problems` each problem's result (docs/eval.md)."""
        return _json(await cache.get(("evals", run_id, benchmark, include_problems),
                                     lambda: service.eval_scores(run_id, "", benchmark, include_problems)))

    @app.get("/v1/runs/{run_id}/adapters/{adapter_id}/evals", response_model=Evals, tags=["read"],
             responses=not_found)
    async def adapter_evals(run_id: RunPath, adapter_id: AdapterPath, benchmark: BenchmarkQuery = "",
                            include_problems: bool = True) -> Response:
        """One adapter's benchmark scores, every version it was evaluated at, with each problem's result unless
        `include_problems=false`."""
        return _json(await cache.get(("adapter-evals", run_id, adapter_id, benchmark, include_problems),
                                     lambda: service.eval_scores(run_id, adapter_id, benchmark, include_problems)))

    @app.get("/v1/runs/{run_id}/payoff", response_model=Payoff, tags=["read"], responses=not_found)
    async def payoff(run_id: RunPath) -> Response:
        """Teacher x student solve rates (decayed mean rho per cell; null where the pair never met)."""
        return _json(await cache.get(("payoff", run_id), lambda: service.payoff_matrix(run_id)))

    # ---- the run's phase journal ------------------------------------------------------------------------------------
    def require_run(run_id: str) -> None:
        if not db.run_exists(run_id) and journal.run(run_id) is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"run '{run_id}' does not exist")

    def build_overview(run_id: str) -> dict:
        view = journal.overview(run_id)
        exists = db.run_exists(run_id)
        if view is None and not exists:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"run '{run_id}' does not exist")
        counts = {"adapters": 0, "active": 0, "last_match_seq": 0, "evals": 0, "evals_recorded_at": 0.0}
        epsilon: dict[str, float | None] = {}
        if exists:
            counts = reads.league_counts(db, run_id)
            epsilon = {e["child_id"]: e["epsilon"] for e in reads.evolution_events(db, run_id)}
        view = view or {"status": "unknown", "mode": "", "steps_planned": None, "created_at": None,
                        "updated_at": None, "progress": {"done": None, "in_progress": None}, "error": None,
                        "latest_step": None, "last_measured_step": None, "compute": {}, "evolution": [],
                        "journal_rows": 0}
        for event in view["evolution"]:
            event["epsilon"] = epsilon.get(event["child"])
        return {"run_id": run_id, "server_time": time.time(), "journal": view["journal_rows"] > 0,
                "revision": f"{view['journal_rows']}.{counts['last_match_seq']}.{counts['adapters']}."
                            f"{counts['evals']}.{counts['evals_recorded_at']:.3f}",
                "league": counts, **view}

    @app.get("/v1/runs/{run_id}/overview", response_model=Overview, tags=["run"], responses=not_found)
    async def overview(run_id: RunPath) -> Response:
        """Where the run stands, for a page that polls it: status, the step and phase in progress, the latest
        step's seconds per phase, valid-proposal rate, rejection reasons and solve rate per task type, compute so
        far, the last evolution events, and a `revision` that changes whenever any of the other views would."""
        return _json(await cache.get(("overview", run_id), lambda: build_overview(run_id)))

    @app.get("/v1/runs/{run_id}/steps", response_model=Steps, tags=["run"], responses=not_found)
    async def steps(run_id: RunPath) -> Response:
        """Per-step metrics from the phase journal (seconds per phase, valid and solve rates per task type,
        rejections, outcomes, compute, evolution); empty when the database has no journal of this run."""
        def build() -> dict:
            require_run(run_id)
            return {"run_id": run_id, "steps": journal.steps(run_id)}

        return _json(await cache.get(("steps", run_id), build))

    @app.get("/v1/runs/{run_id}/tasks", response_model=Tasks, tags=["run"], responses=not_found)
    def tasks(run_id: RunPath, step: StepQuery = None, include_invalid: bool = False) -> Response:
        """The problem explorer: tasks proposed at one step (default: the latest with proposals) with program,
        inputs, gold outputs, complexity, proposer, matched student and solve rate; `include_invalid` adds the
        rejected proposals with their reason."""
        require_run(run_id)
        return _json(_dumps(journal.tasks(run_id, step, include_invalid)))

    @app.get("/v1/adapters/{adapter_id}", response_model=AdapterPage, tags=["run"], responses=not_found)
    def adapter(adapter_id: AdapterPath) -> Response:
        """One adapter: its league record, the versions the run used (from the journal) and where its latest
        version is stored."""
        record = reads.adapter_record(db, adapter_id)
        run = journal.run(record["run_id"])
        versions = journal.versions(record["run_id"], adapter_id) if run is not None else []
        config = run.config if run is not None else config_of(reads.run_config_yaml(db, record["run_id"]))
        root = store_root(config)
        path = version_path(root, adapter_id, versions[-1]["version"]) if versions else ""
        return _json(_dumps({"adapter": record, "k": db.rules.params.k, "versions": versions, "store_root": root,
                             "store_path": path, "journal": run is not None}))

    @app.get("/v1/adapters/{adapter_id}/samples", response_model=Samples, tags=["run"], responses=not_found)
    def samples(adapter_id: AdapterPath, limit: Annotated[int, Query(ge=1, le=200)] = 20) -> Response:
        """The adapter's latest proposals (teacher) with their verdicts, and answers (student) with their outcomes,
        from the persisted phase results, newest first."""
        record = reads.adapter_record(db, adapter_id)
        return _json(_dumps(journal.samples(record["run_id"], adapter_id, limit, record["created_step"],
                                            record["retired_step"])))

    # ---- writes ---------------------------------------------------------------------------------------------------
    if not read_only:
        _writes(app, service, token_check)

    # ---- the dashboard ----------------------------------------------------------------------------------------------
    page = (STATIC_DIR / "index.html").read_bytes()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    app.mount("/static", _Static(directory=STATIC_DIR), name="static")
    return app


def _writes(app: FastAPI, service: LeagueService, token_check: Callable) -> None:
    auth = [Depends(token_check)]
    errors = _responses(400, 401, 403, 404, 413)

    @app.post("/v1/runs", tags=["write"], dependencies=auth, responses=_responses(400, 401, 403, 413))
    def create_run(body: RunIn) -> dict:
        resp = service.CreateRun(league_pb2.CreateRunRequest(**body.model_dump()))
        return {"run_id": resp.run_id, "created": resp.created}

    @app.post("/v1/runs/{run_id}/adapters", tags=["write"], dependencies=auth, responses=errors)
    def register(run_id: RunPath, body: AdaptersIn) -> dict:
        resp = service.RegisterAdapters(league_pb2.RegisterAdaptersRequest(
            run_id=run_id, adapters=[league_pb2.AdapterSpec(**a.model_dump()) for a in body.adapters]))
        return {"registered": [r.adapter_id for r in resp.ratings]}

    @app.post("/v1/runs/{run_id}/matches", tags=["write"], dependencies=auth, responses=errors)
    def report(run_id: RunPath, body: MatchesIn) -> dict:
        """Apply played matches (idempotent by match id); answers the new ratings of the adapters involved."""
        resp = service.ReportMatches(league_pb2.ReportMatchesRequest(
            run_id=run_id, matches=[league_pb2.MatchResult(**m.model_dump()) for m in body.matches]))
        return {"applied": resp.applied, "duplicates": resp.duplicates,
                "ratings": [{"adapter_id": r.adapter_id, "mu": r.mu, "sigma": r.sigma,
                             "conservative_skill": r.conservative_skill} for r in resp.ratings]}

    @app.post("/v1/runs/{run_id}/children", tags=["write"], dependencies=auth, responses=errors)
    def record_child(run_id: RunPath, body: ChildIn) -> dict:
        fields = body.model_dump(exclude={"params"})
        resp = service.RecordChild(league_pb2.RecordChildRequest(
            run_id=run_id, params_json=json.dumps(body.params, sort_keys=True), **fields))
        return {"adapter_id": resp.child.adapter_id, "mu": resp.child.mu, "sigma": resp.child.sigma}


# ---- serving the dashboard beside a run, or over a finished run's database; the tests' real server --------------
class LeagueRestServer:
    """The league's REST app on uvicorn, read-only by default: in the foreground (`populora dashboard`) or in a
    thread beside an embedded run (`populora train --dashboard`)."""

    def __init__(self, service: LeagueService, host: str = "127.0.0.1", port: int = 8080, read_only: bool = True):
        import uvicorn

        self.service = service
        config = uvicorn.Config(create_app(service, read_only=read_only), host=host, port=port, log_level="warning",
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.url = f"http://{host}:{port}/"
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        self.server.run()

    def start(self) -> LeagueRestServer:
        """Serve in a daemon thread; returns once the socket listens (or raises if it could not bind)."""
        self._thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive():
                raise OSError(f"the dashboard could not listen on {self.url}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the dashboard did not start on {self.url} within 30 s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.service.close()


def dashboard_server(cfg: Config, host: str = "127.0.0.1", port: int = 8080,
                     existing: bool = True) -> LeagueRestServer:
    """The read-only dashboard over the run database `cfg` names (`league.db_url`: the embedded SQLite file under
    `run.output_dir`, or the distributed Postgres). With `existing`, a SQLite file that is not there is an error
    rather than a new empty database."""
    from populora.config import ConfigError

    url = cfg.resolve(cfg.league.db_url) if existing else cfg.league_db_url
    if existing and url.startswith("sqlite:///") and not FilePath(url[len("sqlite:///"):]).exists():
        raise ConfigError(f"no run database at {url[len('sqlite:///'):]}: point --set run.output_dir=DIR at the "
                          "directory `populora train` wrote to, or --set league.db_url=URL at its database")
    return LeagueRestServer(LeagueService.from_config(cfg, url), host, port)
