"""Prioritised fictitious self-play: the probability of drawing each student for a teacher (spec 7)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def f_var(x: np.ndarray, p: float = 2.0) -> np.ndarray:
    """f_var(x) = x(1-x): near-balanced opponents weigh most (spec 7, default)."""
    return x * (1.0 - x)


def f_hard(x: np.ndarray, p: float = 2.0) -> np.ndarray:
    """f_hard(x) = (1-x)^p: the opponents the learner loses to weigh most (spec 7)."""
    return (1.0 - x) ** p


WEIGHTINGS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {"var": f_var, "hard": f_hard}


@dataclass(frozen=True)
class PfspParams:
    """Which weighting, its exponent p (f_hard only) and the floor on every weight (spec 7)."""

    weighting: str = "var"
    p: float = 2.0
    floor: float = 0.01

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"unknown PFSP weighting '{self.weighting}'; allowed: {sorted(WEIGHTINGS)}")


def pfsp_weights(x: np.ndarray, params: PfspParams, allowed: np.ndarray | None = None) -> np.ndarray:
    """Unnormalised PFSP weights w_c = max(f(x_c), floor), x_c = P(learner beats c) (spec 7); 0 where not allowed.

    `x` may be a vector (one learner) or a matrix (one learner per row). `allowed` (same shape, bool) removes
    candidates (a learner is never its own opponent); every row needs one allowed candidate. A row whose weights are
    all zero (floor 0 and every x exactly 0 or 1) falls back to uniform over the allowed candidates.
    """
    weights = np.maximum(WEIGHTINGS[params.weighting](x, params.p), params.floor)
    if allowed is not None:
        weights = weights * allowed  # 0 where not allowed (a multiplication: masked selects are far slower)
    if params.floor <= 0:
        fallback = 1.0 if allowed is None else allowed.astype(float)
        weights = np.where(weights.sum(axis=-1, keepdims=True) > 0, weights, fallback)
    return weights


def pfsp_probabilities(x: np.ndarray, params: PfspParams, allowed: np.ndarray | None = None) -> np.ndarray:
    """P(pick c) = w_c / sum_d w_d (spec 7); rows sum to 1. See `pfsp_weights`."""
    weights = pfsp_weights(x, params, allowed)
    return weights / weights.sum(axis=-1, keepdims=True)


def draw(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws with P(j) = w_ij / sum_k w_ik: for row i and u in [0, 1), the first j whose cumulative
    weight exceeds u * sum_k w_ik. weights: (L, C), rows need not be normalised; uniforms: (L,) or (L, K), one
    draw per entry -> column indices of the same shape.

    Two levels, because a running sum along a row is a chain of dependent additions (numpy's cumsum over a
    (500, 500) matrix costs more than all the other PFSP arithmetic): the columns are cut into about sqrt(C)
    groups; the group totals (plain sums, which vectorise) locate the group that holds the draw, and only that
    group's few weights are accumulated. Where rounding lands a draw on a zero-weight column (a masked self-pair),
    it moves to the nearest allowed column before it.
    """
    single = uniforms.ndim == 1
    u = uniforms[:, None] if single else uniforms  # (L, K)
    n_rows, n_cols = weights.shape
    width = max(1, math.isqrt(n_cols))
    n_groups = -(-n_cols // width)
    padded = np.zeros((n_rows, n_groups * width), dtype=np.float64)  # zero weights past the last column
    padded[:, :n_cols] = weights
    groups = padded.reshape(n_rows, n_groups, width)
    group_cum = np.cumsum(groups.sum(axis=2), axis=1)  # (L, G)
    target = u * group_cum[:, -1:]  # (L, K)
    group = (group_cum[:, None, :] <= target[:, :, None]).sum(axis=2)  # (L, K): first group past the target
    np.minimum(group, n_groups - 1, out=group)
    rows = np.arange(n_rows)[:, None]
    before = group_cum[rows, group - 1] * (group > 0)  # (L, K): total weight of the groups before
    inside = np.cumsum(groups[rows, group], axis=2)  # (L, K, width)
    offset = (inside <= (target - before)[:, :, None]).sum(axis=2)
    np.minimum(offset, width - 1, out=offset)
    picks = group * width + offset
    np.minimum(picks, n_cols - 1, out=picks)
    for i, k in zip(*np.nonzero(weights[rows, picks] <= 0)):  # rounding at a group edge; almost never
        allowed = np.flatnonzero(weights[i] > 0)
        if len(allowed):
            before_pick = allowed[allowed <= picks[i, k]]
            picks[i, k] = before_pick[-1] if len(before_pick) else allowed[0]
    return picks[:, 0] if single else picks
