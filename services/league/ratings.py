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


def _erfc_inplace(x: np.ndarray) -> np.ndarray:
    """erfc(x), overwriting x, vectorised because numpy has no erf of its own; in place because matchmaking calls
    it on (T, S) matrices. Abramowitz & Stegun 7.1.26: erfc(z) = t(a1 + t(a2 + t(a3 + t(a4 + t a5)))) exp(-z^2),
    t = 1 / (1 + p z) for z >= 0, |abs err| <= 1.5e-7 (the scalar path, `win_probability`, uses math.erfc).
    Negative arguments use erfc(x) = 2 - erfc(|x|), applied arithmetically: a masked numpy operation (`where=`,
    `np.where`) on a (500, 500) matrix costs ten times as much as the few multiplications."""
    negative = np.less(x, 0).astype(x.dtype)  # 1.0 where x < 0
    z = np.abs(x, out=x)
    t = z * 0.3275911
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * 1.061405429
    for coef in (-1.453152027, 1.421413741, -0.284496736):
        poly += coef
        poly *= t
    poly += 0.254829592
    poly *= t
    z *= z
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # erfc(|x|)
    # erfc(x) = e + [x < 0] * 2 * (1 - e)
    np.subtract(1.0, poly, out=t)
    t *= negative
    t *= 2.0
    poly += t
    return poly


def win_probability_matrix(mu_a: np.ndarray, sigma_a: np.ndarray, mu_b: np.ndarray, sigma_b: np.ndarray,
                           beta: float) -> np.ndarray:
    """P(a_i beats b_j) for every pair, shape (len(a), len(b)); the formula of `win_probability`."""
    denom = np.add.outer(2 * beta * beta + sigma_a ** 2, sigma_b ** 2)  # (A, B)
    np.sqrt(denom, out=denom)
    denom *= -math.sqrt(2)
    arg = np.subtract.outer(mu_a, mu_b)  # (A, B)
    arg /= denom  # -(mu_a - mu_b) / (sqrt(2) * c)
    prob = _erfc_inplace(arg)
    prob *= 0.5
    return prob


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
    """One TrueSkill 1-vs-1 update, returning (teacher', student') (spec 6).

    The two-player case of trueskill's factor graph in closed form, with the package's own v/w functions, Gaussian
    approximations and draw margin (so results agree with `trueskill.rate_1vs1` to rounding; the tests check it),
    at a fraction of the cost of building a factor graph per game:
        s_i^2 <- s_i^2 + tau^2                      (dynamics)
        c^2 = 2 beta^2 + s_w^2 + s_l^2,  t = (mu_w - mu_l) / c,  eps = draw_margin / c
        mu_w += s_w^2 / c * v(t, eps),   mu_l -= s_l^2 / c * v(t, eps)
        s_i^2 *= 1 - s_i^2 / c^2 * w(t, eps)
    with (v, w) = (v_win, w_win) for a decided game (w = winner) and (v_draw, w_draw) for a draw.

    Where the package's float backend cannot evaluate v/w (a result some 10 standard deviations from the expected
    one; trueskill raises FloatingPointError there, too), the game leaves both ratings unchanged rather than
    failing the whole report.
    """
    try:
        if result is Result.STUDENT_WINS:
            student, teacher = _rate_pair(env, student, teacher, drawn=False)
        else:
            teacher, student = _rate_pair(env, teacher, student, drawn=result is Result.DRAW)
    except (FloatingPointError, ZeroDivisionError, ValueError):
        pass
    return teacher, student


def _rate_pair(env: trueskill.TrueSkill, first: Skill, second: Skill, drawn: bool) -> tuple[Skill, Skill]:
    """`first` beat `second` (or drew with it): the closed-form update of `rate_game`."""
    var1 = first.sigma ** 2 + env.tau ** 2
    var2 = second.sigma ** 2 + env.tau ** 2
    c2 = 2 * env.beta ** 2 + var1 + var2
    c = math.sqrt(c2)
    margin = trueskill.calc_draw_margin(env.draw_probability, 2, env=env)
    t, eps = (first.mu - second.mu) / c, margin / c
    v, w = (env.v_draw(t, eps), env.w_draw(t, eps)) if drawn else (env.v_win(t, eps), env.w_win(t, eps))
    mu1 = first.mu + var1 / c * v
    mu2 = second.mu - var2 / c * v
    sigma1 = math.sqrt(var1 * (1 - var1 / c2 * w))
    sigma2 = math.sqrt(var2 * (1 - var2 / c2 * w))
    return Skill(mu1, sigma1), Skill(mu2, sigma2)


def rate_match(env: trueskill.TrueSkill, teacher: Skill, student: Skill,
               results: Sequence[Result]) -> tuple[Skill, Skill]:
    """Apply a match's games in order."""
    for result in results:
        teacher, student = rate_game(env, teacher, student, result)
    return teacher, student
