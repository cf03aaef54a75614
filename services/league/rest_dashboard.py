"""The dashboard's REST routes: the run's overview, steps, problems and an adapter's page and samples, read from
what the coordinator records in the league (the run, its phases, each step's summary and problems), and the page
itself with its static files."""

from __future__ import annotations

import time
from pathlib import Path as FilePath
from typing import Annotated

import grpc
from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from populora.http import guarded_get
from populora.rpc import ServiceError
from services.league import reads
from services.league.rest_cache import ReadCache, dumps, json_response
from services.league.rest_run_schemas import AdapterPage, Dynamics, Overview, Samples, Steps, Tasks
from services.league.rest_schemas import responses
from services.league.rest_validation import AdapterPath, RunPath, StepQuery
from services.league.runview import (
    RunView,
    adapter_versions,
    config_of,
    public_steps,
    store_root,
    version_path,
)
from services.league.service import LeagueService

STATIC_DIR = FilePath(__file__).resolve().parent / "static"
# The dashboard page: its own scripts, styles and JSON only, nothing inline, nothing from another address.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


class _Static(StaticFiles):
    """The dashboard's files with the page's security headers."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_HEADERS)
        return response


def add_run_routes(app: FastAPI, service: LeagueService, cache: ReadCache) -> None:
    """The run's views on `app`, from what the coordinator recorded in the league: the run and its phases for where
    it stands, its step summaries, and each step's problems and answers. Each is the league's `Read`, as every read
    of services.league.rest_league."""
    db = service.db
    runs = RunView(db)
    not_found = responses(404)
    get = guarded_get(app, "league", "Read", responses(401, 403))

    def require_run(run_id: str) -> None:
        if not db.run_exists(run_id):
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"run '{run_id}' does not exist")

    def build_overview(run_id: str) -> dict:
        require_run(run_id)
        summaries = db.step_summaries(run_id)
        view = runs.overview(run_id, summaries)
        counts = reads.league_counts(db, run_id)
        epsilon = {e["child_id"]: e["epsilon"] for e in reads.evolution_events(db, run_id)}
        for event in view["evolution"]:
            event["epsilon"] = epsilon.get(event["child"])
        return {"run_id": run_id, "server_time": time.time(), "journal": view["journal_rows"] > 0,
                "revision": f"{view['journal_rows']}.{len(summaries)}.{counts['last_match_seq']}."
                            f"{counts['adapters']}.{counts['evals']}.{counts['evals_recorded_at']:.3f}",
                "league": counts, **view}

    @get("/v1/runs/{run_id}/overview", response_model=Overview, tags=["run"], responses=not_found)
    async def overview(run_id: RunPath) -> Response:
        """Where the run stands, for a page that polls it: status, the step and phase in progress, the latest
        step's seconds per phase, valid-proposal rate, rejection reasons and solve rate per task type, compute so
        far, the last evolution events, and a `revision` that changes whenever any of the other views would."""
        return json_response(await cache.get(("overview", run_id), lambda: build_overview(run_id)))

    @get("/v1/runs/{run_id}/steps", response_model=Steps, tags=["run"], responses=not_found)
    async def steps(run_id: RunPath) -> Response:
        """Per-step metrics as the coordinator summarised each step (seconds per phase, valid and solve rates per
        task type, rejections, outcomes, compute, evolution); empty until the run records a step."""
        def build() -> dict:
            require_run(run_id)
            return {"run_id": run_id, "steps": public_steps(db.step_summaries(run_id))}

        return json_response(await cache.get(("steps", run_id), build))

    @get("/v1/runs/{run_id}/dynamics", response_model=Dynamics, tags=["run"], responses=not_found)
    async def dynamics(run_id: RunPath) -> Response:
        """The run's training dynamics per step against the compute charged to its budget (spec 11, 14): mean
        complexity of valid proposals, coverage (distinct program shapes and AST node types so far, shapes new at
        the step), the teachers' behavioural diversity, each student's solve rate and oscillation, and the members'
        weight diversity (cosine and relative distance of their updates); empty lists until a step is recorded."""
        def build() -> dict:
            require_run(run_id)
            return runs.dynamics(run_id, db.step_summaries(run_id))

        return json_response(await cache.get(("dynamics", run_id), build))

    @get("/v1/runs/{run_id}/tasks", response_model=Tasks, tags=["run"], responses=not_found)
    def tasks(run_id: RunPath, step: StepQuery = None, include_invalid: bool = False) -> Response:
        """The problem explorer: tasks proposed at one step (default: the latest with proposals) with program,
        inputs, gold outputs, complexity, proposer, matched student and solve rate; `include_invalid` adds the
        rejected proposals with their reason."""
        require_run(run_id)
        return json_response(dumps(runs.tasks(run_id, db.step_summaries(run_id), step, include_invalid)))

    @get("/v1/adapters/{adapter_id}", response_model=AdapterPage, tags=["run"], responses=not_found)
    def adapter(adapter_id: AdapterPath) -> Response:
        """One adapter: its league record, the versions the run used (from the step summaries) and where its
        latest version is stored."""
        record = reads.adapter_record(db, adapter_id)
        run = runs.run(record["run_id"])
        versions = adapter_versions(db.step_summaries(record["run_id"]), adapter_id)
        config = run.config if run is not None else config_of(reads.run_config_yaml(db, record["run_id"]))
        root = store_root(config)
        path = version_path(root, adapter_id, versions[-1]["version"]) if versions else ""
        return json_response(dumps({"adapter": record, "k": db.rules.params.k, "versions": versions, "store_root": root,
                                     "store_path": path, "journal": run is not None}))

    @get("/v1/adapters/{adapter_id}/samples", response_model=Samples, tags=["run"], responses=not_found)
    def samples(adapter_id: AdapterPath, limit: Annotated[int, Query(ge=1, le=200)] = 20) -> Response:
        """The adapter's latest proposals (teacher) with their verdicts, and answers (student) with their outcomes,
        from the problems each step recorded, newest first."""
        record = reads.adapter_record(db, adapter_id)
        return json_response(dumps(runs.samples(record["run_id"], adapter_id, limit, record["created_step"],
                                                    record["retired_step"])))


def add_page(app: FastAPI) -> None:
    """The dashboard page at `/` and its files under `/static`."""
    page = (STATIC_DIR / "index.html").read_bytes()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    app.mount("/static", _Static(directory=STATIC_DIR), name="static")
