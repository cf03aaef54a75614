"""TrueSkill ratings of teachers and students, win probability, conservative skill and match outcomes (spec 6)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import trueskill


@dataclass(frozen=True)
class RatingParams:
    """The TrueSkill environment (spec 6): mu0=25, sigma0=25/3, beta=sigma0/2, tau=sigma0/100, draw 0.10, k=3."""

    mu: float = 25.0
    sigma: float = 25.0 / 3
    beta: float = 25.0 / 6
    tau: float = 25.0 / 300
    draw_probability: float = 0.10
    k: float = 3.0

    def environment(self) -> trueskill.TrueSkill:
        """A private TrueSkill environment (never the package's global one, which other code may change)."""
        return trueskill.TrueSkill(mu=self.mu, sigma=self.sigma, beta=self.beta, tau=self.tau,
                                   draw_probability=self.draw_probability)


@dataclass(frozen=True)
class Skill:
    """One adapter's belief: skill ~ N(mu, sigma^2)."""

    mu: float
    sigma: float

    def conservative(self, k: float = 3.0) -> float:
        """mu - k*sigma (spec 6; TrueSkill's `expose` with k = 3)."""
        return conservative_skill(self.mu, self.sigma, k)


class Result(Enum):
    """The result of one game between a teacher and a student."""

    STUDENT_WINS = "student"
    TEACHER_WINS = "teacher"
    DRAW = "draw"


def conservative_skill(mu: float, sigma: float, k: float = 3.0) -> float:
    """Conservative skill mu - k*sigma (spec 6)."""
    return mu - k * sigma


def win_probability(a: Skill, b: Skill, beta: float) -> float:
    """P(a beats b) = Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)) (spec 6)."""
    denom = math.sqrt(2 * beta * beta + a.sigma ** 2 + b.sigma ** 2)
    return 0.5 * math.erfc(-(a.mu - b.mu) / (denom * math.sqrt(2)))


def _erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function, the Numerical Recipes approximation trueskill 0.4.5 uses (|rel err| < 1.2e-7),
    vectorised because numpy has no erf of its own."""
    z = np.abs(x)
    t = 1.0 / (1.0 + z / 2.0)
    poly = (-1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (
        0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    r = t * np.exp(-z * z + poly)
    return np.where(x < 0, 2.0 - r, r)


def win_probability_matrix(mu_a: np.ndarray, sigma_a: np.ndarray, mu_b: np.ndarray, sigma_b: np.ndarray,
                           beta: float) -> np.ndarray:
    """P(a_i beats b_j) for every pair, shape (len(a), len(b)); the formula of `win_probability`."""
    diff = mu_a[:, None] - mu_b[None, :]  # (A, B)
    denom = np.sqrt(2 * beta * beta + sigma_a[:, None] ** 2 + sigma_b[None, :] ** 2)  # (A, B)
    return 0.5 * _erfc(-diff / (denom * math.sqrt(2)))


def _threshold_result(rho: float, margin: float) -> Result:
    """Student wins if rho > 0.5 + margin, teacher wins if rho < 0.5 - margin, else a draw (spec 6)."""
    if rho > 0.5 + margin:
        return Result.STUDENT_WINS
    if rho < 0.5 - margin:
        return Result.TEACHER_WINS
    return Result.DRAW


def aggregate_outcome(rhos: Sequence[float], margin: float) -> list[Result]:
    """One game per match, decided by the mean rho over the match's tasks (spec 6, default)."""
    return [_threshold_result(sum(rhos) / len(rhos), margin)]


def per_task_outcome(rhos: Sequence[float], margin: float) -> list[Result]:
    """One game per task, each decided by that task's rho (spec 6, `outcome: per_task`)."""
    return [_threshold_result(rho, margin) for rho in rhos]


OUTCOMES: dict[str, Callable[[Sequence[float], float], list[Result]]] = {
    "aggregate": aggregate_outcome,
    "per_task": per_task_outcome,
}


def match_outcome(rhos: Sequence[float], rule: str, margin: float) -> list[Result]:
    """The games a match's per-task rhos amount to under the configured rule."""
    if not rhos:
        raise ValueError("a match needs at least one rho")
    try:
        return OUTCOMES[rule](rhos, margin)
    except KeyError:
        raise ValueError(f"unknown outcome rule '{rule}'; allowed: {sorted(OUTCOMES)}") from None


def rate_game(env: trueskill.TrueSkill, teacher: Skill, student: Skill, result: Result) -> tuple[Skill, Skill]:
    """One TrueSkill 1-vs-1 update (tau dynamics, then the game), returning (teacher', student')."""
    t = env.create_rating(teacher.mu, teacher.sigma)
    s = env.create_rating(student.mu, student.sigma)
    if result is Result.STUDENT_WINS:
        s2, t2 = trueskill.rate_1vs1(s, t, env=env)
    elif result is Result.TEACHER_WINS:
        t2, s2 = trueskill.rate_1vs1(t, s, env=env)
    else:
        t2, s2 = trueskill.rate_1vs1(t, s, drawn=True, env=env)
    return Skill(t2.mu, t2.sigma), Skill(s2.mu, s2.sigma)


def rate_match(env: trueskill.TrueSkill, teacher: Skill, student: Skill,
               results: Sequence[Result]) -> tuple[Skill, Skill]:
    """Apply a match's games in order."""
    for result in results:
        teacher, student = rate_game(env, teacher, student, result)
    return teacher, student
