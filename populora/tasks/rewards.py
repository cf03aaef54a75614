"""Rewards (spec 4) as pure functions of outcomes and the reward config."""

from __future__ import annotations

from typing import Protocol

from populora.config import MATH_TASK_TYPES

OUTCOMES = ("correct", "wrong", "malformed", "verifier_error")


class RewardSettings(Protocol):
    teacher_reward: str
    student_correct: float
    student_wrong: float
    malformed: float


def student_reward(outcome: str, rewards: RewardSettings) -> float | None:
    """Per attempt (spec 4): +1 correct, -0.5 well-formatted but wrong, -1 malformed; None for `verifier_error`
    (an external verifier failed: the attempt is excluded from rewards and from rho)."""
    table = {"correct": rewards.student_correct, "wrong": rewards.student_wrong, "malformed": rewards.malformed,
             "verifier_error": None}
    if outcome not in table:
        raise ValueError(f"unknown outcome {outcome!r}; allowed: {list(OUTCOMES)}")
    return table[outcome]


def mean_rho(outcomes: list[str]) -> float | None:
    """rho = mean correctness over a task's attempts (spec 4), `verifier_error` excluded; None when no attempt
    is left."""
    counted = [o for o in outcomes if o != "verifier_error"]
    unknown = sorted(set(counted) - set(OUTCOMES))
    if unknown:
        raise ValueError(f"unknown outcome(s) {unknown}; allowed: {list(OUTCOMES)}")
    if not counted:
        return None
    return sum(o == "correct" for o in counted) / len(counted)


def teacher_reward(valid: bool, rho: float | None, rule: str, rewards: RewardSettings, task_type: str = "") -> float:
    """Per proposal (spec 4): invalid or malformed -> `rewards.malformed` (-1); a math_w one -> 0 (spec 18).

    Valid, `inverse_solve` (the brief): r = 1 - rho. Valid, `learnability` (AZR): r = 1 - rho if 0 < rho < 1
    else 0. A valid proposal with no counted attempt (rho None) earns 0.
    """
    if not valid:
        return 0.0 if task_type in MATH_TASK_TYPES else rewards.malformed
    if rho is None:
        return 0.0
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [0, 1], got {rho}")
    if rule == "inverse_solve":
        return 1.0 - rho
    if rule == "learnability":
        return 1.0 - rho if 0.0 < rho < 1.0 else 0.0
    raise ValueError(f"unknown teacher reward rule {rule!r}; allowed: inverse_solve, learnability")
