"""Prioritised fictitious self-play: the probability of drawing each student for a teacher (spec 7)."""

from __future__ import annotations

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
        weights = np.where(allowed, weights, 0.0)
    if params.floor <= 0:
        fallback = 1.0 if allowed is None else allowed.astype(float)
        weights = np.where(weights.sum(axis=-1, keepdims=True) > 0, weights, fallback)
    return weights


def pfsp_probabilities(x: np.ndarray, params: PfspParams, allowed: np.ndarray | None = None) -> np.ndarray:
    """P(pick c) = w_c / sum_d w_d (spec 7); rows sum to 1. See `pfsp_weights`."""
    weights = pfsp_weights(x, params, allowed)
    return weights / weights.sum(axis=-1, keepdims=True)


def row_cdf(weights: np.ndarray) -> np.ndarray:
    """Each row's normalised cumulative weights, offset by the row index so the flattened matrix is non-decreasing
    (row i spans [i, i+1]): one `searchsorted` then draws for every row at once. (L, C) -> (L, C) float64."""
    cdf = np.cumsum(weights, axis=1, dtype=np.float64)  # (L, C)
    cdf /= cdf[:, -1:]
    cdf += np.arange(weights.shape[0], dtype=np.float64)[:, None]
    return cdf


def draw(weights: np.ndarray, uniforms: np.ndarray, cdf: np.ndarray | None = None) -> np.ndarray:
    """Inverse-CDF draws with P(j) = w_ij / sum_k w_ik: for row i and u_i in [0, 1), the first j whose cumulative
    share exceeds u_i. weights: (L, C), rows need not be normalised; uniforms: (L,) -> (L,) column indices.
    Pass `cdf = row_cdf(weights)` to reuse it across several draws.
    """
    if cdf is None:
        cdf = row_cdf(weights)
    n_rows, n_cols = weights.shape
    offsets = np.arange(n_rows, dtype=np.float64)
    flat = np.searchsorted(cdf.ravel(), uniforms + offsets, side="right")  # (L,)
    return np.minimum(flat - offsets.astype(np.int64) * n_cols, n_cols - 1)
