"""The JSON the league's REST reads answer, as pydantic models: leaderboard, ratings, lineage, matches, payoff,
compute and evaluations. Reads are serialised once and served as bytes, so these models document the shape (OpenAPI)
rather than build it; the run's views are rest_run_schemas."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from services.league.rest_validation import Model, Role


class ErrorOut(Model):
    detail: str = Field(description="what was wrong, which input, what to do")


def responses(*codes: int) -> dict:
    """OpenAPI documentation of the error statuses an endpoint answers (422 is documented by FastAPI)."""
    what = {400: "invalid input (the message names the field); nothing was written",
            401: "no credential this server takes (a client certificate over HTTPS, or a bearer token); checked "
                 "before the body is read",
            403: "the caller's identity may not call this operation (the message names what it may call on the "
                 "league), or the server takes no credential",
            404: "unknown run or adapter",
            409: "the write contradicts what the league holds (a run in another mode, an adapter id of "
                 "another run or role, a child id with other parents or operator, a match id of another match); "
                 "nothing was written, and sending it again fails again",
            413: "request body over 16 MiB",
            503: "the league's database does not answer (any endpoint)"}
    return {c: {"model": ErrorOut, "description": what[c]} for c in codes}



class LeaderboardRow(Model):
    rank: int = Field(description="place on the leaderboard, 1 = best conservative skill")
    adapter_id: str
    role: Role
    lora_rank: int = Field(description="the adapter's LoRA rank r (members may differ: spec 9, \"Mixed ranks\")")
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
    lora_rank: int = Field(description="the adapter's LoRA rank r")
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
    lora_rank: int = Field(description="the adapter's LoRA rank r (R1 children and crossovers may change it)")
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
    relative_change: float | None = Field(None, description="|dW_child - dW_parent| / |dW_parent| (first parent) "
                                                              "when the evolver made it; None for a founder")


class RunEdge(EdgeOut):
    epsilon: float | None
    relative_change: float | None = Field(None, description="the child's relative change from its first parent")


class RunLineage(Model):
    run_id: str
    k: float
    nodes: list[LineageNode]
    edges: list[RunEdge]


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
