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


def pfsp_probabilities(x: np.ndarray, params: PfspParams, allowed: np.ndarray | None = None) -> np.ndarray:
    """P(pick c) = w_c / sum_d w_d with w_c = max(f(x_c), floor), x_c = P(learner beats c) (spec 7).

    `x` may be a vector (one learner) or a matrix (one learner per row); rows sum to 1. `allowed` (same shape,
    bool) removes candidates (a learner is never its own opponent); every row needs one allowed candidate.
    """
    weights = np.maximum(WEIGHTINGS[params.weighting](x, params.p), params.floor)
    if allowed is not None:
        weights = np.where(allowed, weights, 0.0)
    if params.floor <= 0:
        # All-zero rows (every x exactly 0 or 1) fall back to uniform rather than dividing by zero.
        fallback = 1.0 if allowed is None else allowed.astype(float)
        weights = np.where(weights.sum(axis=-1, keepdims=True) > 0, weights, fallback)
    return weights / weights.sum(axis=-1, keepdims=True)


def draw(probabilities: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws: for row i and uniform u_i in [0, 1), the index j with cdf_{j-1} <= u_i < cdf_j.

    probabilities: (L, C) rows summing to 1; uniforms: (L,) -> (L,) indices in [0, C).
    """
    cdf = np.cumsum(probabilities, axis=1)  # (L, C)
    idx = (cdf <= uniforms[:, None] * cdf[:, -1:]).sum(axis=1)  # (L,)
    return np.minimum(idx, probabilities.shape[1] - 1)
