"""The league's rules over plain data: the rows a request carries, how played matches change ratings, records and the
payoff matrix (spec 6), and a child's starting rating (spec 8). No database here: db.py reads rows, checks them
(checks.py), calls these functions, and writes what they return, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import trueskill

from populora.records import EvalScore
from services.league.payoff import PayoffCell, update_cell
from services.league.ratings import RatingParams, Result, Skill, match_outcome, rate_match

TEACHER_ROLES = ("teacher", "both")
STUDENT_ROLES = ("student", "both")


class InvalidRequest(ValueError):
    """A request the league refuses, naming the field: nothing was written."""


class Conflict(InvalidRequest):
    """A write that contradicts what the league holds (an id taken by another run or role, a child recorded with other
    parents): sending it again fails again. Nothing was written."""


class UnknownEntity(LookupError):
    """A run or adapter that does not exist."""


@dataclass
class AdapterRow:
    """One adapter as the league knows it: rating, record, status and origin."""

    adapter_id: str
    run_id: str
    role: str
    status: str
    rank: int
    created_step: int
    mu: float
    sigma: float
    matches: int = 0
    wins: int = 0
    losses: int = 0
    draws: int = 0
    operator: str = ""
    parents: list[str] = field(default_factory=list)
    retired_step: int | None = None

    @property
    def skill(self) -> Skill:
        return Skill(self.mu, self.sigma)


@dataclass(frozen=True)
class AdapterSpecIn:
    """An adapter to register."""

    adapter_id: str
    role: str
    rank: int = 0
    created_step: int = 0


@dataclass(frozen=True)
class MatchReport:
    """A played match: the matched student's rho per task of the teacher's batch (spec 4, 6)."""

    match_id: str
    teacher_id: str
    student_id: str
    task_type: str
    step: int
    rhos: tuple[float, ...]


@dataclass(frozen=True)
class RatingRules:
    """How a match turns into rating updates: the TrueSkill environment, the outcome rule and the payoff decay."""

    params: RatingParams = RatingParams()
    outcome: str = "aggregate"
    margin: float = 0.05
    payoff_decay: float = 0.9


@dataclass
class ReportOutcome:
    """What a ReportMatches call did."""

    applied: int
    duplicates: int
    ratings: list[AdapterRow]


@dataclass(frozen=True)
class ChildSpec:
    """A child made by an operator, and the member it replaces (spec 8)."""

    child_id: str
    role: str
    parent_ids: tuple[str, ...]
    operator: str
    params_json: str = "{}"
    seed: int = 0
    step: int = 0
    retire_id: str = ""
    rank: int = 0


@dataclass(frozen=True)
class EvalRow:
    """One adapter version's score on one held-out benchmark as the league stores it (docs/eval.md): the score the
    evaluation made (its adapter_id "" is the bare base model), the benchmark, the step after which that version was
    current, and when the league recorded it."""

    score: EvalScore
    benchmark: str
    step: int
    recorded_at: float = 0.0


@dataclass(frozen=True)
class RunRow:
    """A run as the coordinator recorded it (RecordRun): status is running, finished, failed or stopped; times are
    Unix seconds of the league's clock (first recorded, last recorded)."""

    run_id: str
    mode: str
    config_yaml: str
    status: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class PhaseRow:
    """One persisted phase of a run as the coordinator recorded it (RecordPhases), without its result; `error` is
    None for a stored phase and what failed for a phase that failed on every delivery."""

    step: int
    phase: str
    seconds: float
    attempts: int
    finished_at: float
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass
class Played:
    """What a batch of new matches changed: the adapters touched, each one's rating after its last match of each
    step (rating history), and the payoff cells of the pairs that played."""

    touched: set[str]
    history: dict[tuple[str, int], tuple[float, float, int]]
    cells: dict[tuple[str, str], PayoffCell]


# ---------------------------------------------------------------------------------------------- the rules
def games(reports: Sequence[MatchReport], rules: RatingRules) -> list[tuple[MatchReport, list[Result]]]:
    """Each distinct match id once, with the games it stands for (spec 6: one game from the mean rho with a margin,
    or one per task)."""
    seen: set[str] = set()
    out = []
    for m in reports:
        if m.match_id not in seen:
            seen.add(m.match_id)
            out.append((m, match_outcome(m.rhos, rules.outcome, rules.margin)))
    return out


def play(env: trueskill.TrueSkill, rules: RatingRules, adapters: dict[str, AdapterRow],
         fresh: Sequence[tuple[MatchReport, list[Result]]], cells: dict[tuple[str, str], PayoffCell]) -> Played:
    """Apply new matches in order to the adapters' ratings and records (updated in place) and to the payoff cells.

    A self-match (the baseline's single `both` adapter against itself) counts as a match and enters the payoff
    matrix, but leaves mu and sigma alone: TrueSkill has no meaning for a player against itself.
    """
    cells = dict(cells)
    history: dict[tuple[str, int], tuple[float, float, int]] = {}
    for m, results in fresh:
        teacher, student = adapters[m.teacher_id], adapters[m.student_id]
        if teacher is not student:
            t_skill, s_skill = rate_match(env, teacher.skill, student.skill, results)
            teacher.mu, teacher.sigma = t_skill.mu, t_skill.sigma
            student.mu, student.sigma = s_skill.mu, s_skill.sigma
            teacher.wins += sum(r is Result.TEACHER_WINS for r in results)
            teacher.losses += sum(r is Result.STUDENT_WINS for r in results)
            student.wins += sum(r is Result.STUDENT_WINS for r in results)
            student.losses += sum(r is Result.TEACHER_WINS for r in results)
            for a in (teacher, student):
                a.draws += sum(r is Result.DRAW for r in results)
        teacher.matches += 1
        if student is not teacher:
            student.matches += 1
        key = (m.teacher_id, m.student_id)
        cells[key] = update_cell(cells.get(key, PayoffCell()), sum(m.rhos) / len(m.rhos), rules.payoff_decay)
        for a in (teacher, student):  # the rating after this step's last match of the adapter
            history[(a.adapter_id, m.step)] = (a.mu, a.sigma, a.matches)
    touched = {m.teacher_id for m, _ in fresh} | {m.student_id for m, _ in fresh}
    return Played(touched, history, {k: cells[k] for k in {(m.teacher_id, m.student_id) for m, _ in fresh}})


def child_rating(parents: Sequence[AdapterRow], params: RatingParams) -> tuple[float, float]:
    """A child starts at the mean of its parents' mu, with sigma0 (spec 8)."""
    return sum(p.mu for p in parents) / len(parents), params.sigma
