"""The league's REST reads: runs, leaderboard, rating curves, lineage, rating history, the match log, compute,
held-out evaluations and the payoff matrix. Each is the league's `Read` (populora.scopes.REST_OPERATIONS): open on a
plaintext server without scoped tokens (one machine), else for an identity whose scope holds it (the dashboard, the
coordinator). Each is served from the read cache where it may be."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import FastAPI, Query
from fastapi.responses import Response

from populora.http import guarded_get
from services.league import reads
from services.league.rest_cache import ReadCache, dumps, json_response
from services.league.rest_schemas import (
    ComputeSummary,
    Evals,
    History,
    Leaderboard,
    Lineage,
    MatchPage,
    Payoff,
    RatingCurves,
    RunInfo,
    RunLineage,
    responses,
)
from services.league.rest_validation import (
    JSON_INT_MAX,
    AdapterPath,
    AdapterQuery,
    BenchmarkQuery,
    Role,
    RunPath,
    SeqQuery,
    StepQuery,
    TaskType,
)
from services.league.service import LeagueService


def add_league_routes(app: FastAPI, service: LeagueService, cache: ReadCache) -> None:
    """The league's read endpoints on `app`."""
    db = service.db
    not_found = responses(404)
    get = guarded_get(app, "league", "Read", responses(401, 403))

    @get("/v1/runs", response_model=list[RunInfo], tags=["read"])
    async def runs() -> Response:
        return json_response(await cache.get(("runs",), db.list_runs))

    @get("/v1/runs/{run_id}/leaderboard", response_model=Leaderboard, tags=["read"], responses=not_found)
    async def leaderboard(run_id: RunPath, role: Role | None = None, include_retired: bool = True) -> Response:
        """Best conservative skill (mu - k*sigma) first; `role=teacher` also lists a `both` adapter. On Postgres
        the rows are ranked and serialised by the database in one statement."""
        return json_response(await cache.get(("leaderboard", run_id, role, include_retired),
                                             lambda: reads.leaderboard_body(db, run_id, role or "", include_retired)))

    @get("/v1/runs/{run_id}/ratings", response_model=RatingCurves, tags=["read"], responses=not_found)
    async def ratings(run_id: RunPath) -> Response:
        """Rating curves: every adapter's mu, sigma and mu - k*sigma after each step it played, and the run's
        evolution events (children, their operator and ε, the members retired)."""
        return json_response(await cache.get(("ratings", run_id), lambda: reads.run_ratings(db, run_id)))

    @get("/v1/runs/{run_id}/lineage", response_model=RunLineage, tags=["read"], responses=not_found)
    async def run_lineage(run_id: RunPath) -> Response:
        """The whole family tree of a run: every adapter it ever had as a node, every parent -> child link as an
        edge with operator, step and ε."""
        return json_response(await cache.get(("lineage", run_id), lambda: reads.run_lineage(db, run_id)))

    @get("/v1/adapters/{adapter_id}/lineage", response_model=Lineage, tags=["read"], responses=not_found)
    async def lineage(adapter_id: AdapterPath) -> Response:
        """One adapter's ancestors and descendants."""
        return json_response(await cache.get(("adapter-lineage", adapter_id),
                                             lambda: reads.adapter_lineage(db, adapter_id)))

    @get("/v1/adapters/{adapter_id}/history", response_model=History, tags=["read"], responses=not_found)
    def history(adapter_id: AdapterPath) -> Response:
        """mu and sigma of one adapter after each step it played."""
        db.adapter(adapter_id)
        return json_response(dumps({"adapter_id": adapter_id, "history": db.rating_history(adapter_id)}))

    @get("/v1/runs/{run_id}/matches", response_model=MatchPage, tags=["read"], responses=not_found)
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
        return json_response(dumps({"matches": page, "next_after": None if desc else last,
                                     "next_before": last if desc else None}))

    @get("/v1/runs/{run_id}/compute", response_model=ComputeSummary, tags=["read"], responses=not_found)
    async def compute(run_id: RunPath) -> Response:
        """Compute the run has spent (spec 14): generated and trained tokens and sandbox jobs, in total, per
        adapter ("base" is the bare base model) and per step with the running token total, as the coordinator
        records them after each step."""
        return json_response(await cache.get(("compute", run_id), lambda: service.compute_summary(run_id)))

    @get("/v1/runs/{run_id}/evals", response_model=Evals, tags=["read"], responses=not_found)
    async def evals(run_id: RunPath, benchmark: BenchmarkQuery = "", include_problems: bool = False) -> Response:
        """Held-out benchmark scores of the run's adapter versions and the bare base model (adapter_id null), by
        step: pass@1, pass@k, and with `include_problems` each problem's result (docs/eval.md)."""
        return json_response(await cache.get(("evals", run_id, benchmark, include_problems),
                                             lambda: service.eval_scores(run_id, "", benchmark, include_problems)))

    @get("/v1/runs/{run_id}/adapters/{adapter_id}/evals", response_model=Evals, tags=["read"],
             responses=not_found)
    async def adapter_evals(run_id: RunPath, adapter_id: AdapterPath, benchmark: BenchmarkQuery = "",
                            include_problems: bool = True) -> Response:
        """One adapter's benchmark scores, every version it was evaluated at, with each problem's result unless
        `include_problems=false`."""
        key = ("adapter-evals", run_id, adapter_id, benchmark, include_problems)
        return json_response(await cache.get(key, lambda: service.eval_scores(run_id, adapter_id, benchmark,
                                                                              include_problems)))

    @get("/v1/runs/{run_id}/payoff", response_model=Payoff, tags=["read"], responses=not_found)
    async def payoff(run_id: RunPath) -> Response:
        """Teacher x student solve rates (decayed mean rho per cell; null where the pair never met)."""
        return json_response(await cache.get(("payoff", run_id), lambda: service.payoff_matrix(run_id)))
