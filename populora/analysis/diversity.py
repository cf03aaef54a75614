"""Weight diversity between LoRA adapters (spec 11), computed from the factors without forming any ΔW.

Layout (PEFT): for each target module `lora_a` is A (r x d_in) and `lora_b` is B (d_out x r); the update is
ΔW = scaling · B·A with scaling = alpha / r. Spec §9 writes A for PEFT's lora_a transposed; here A is PEFT's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

Factors = Mapping[str, tuple[torch.Tensor, torch.Tensor]]  # module -> (A (r, d_in), B (d_out, r))


def inner(a_x: torch.Tensor, b_x: torch.Tensor, a_y: torch.Tensor, b_y: torch.Tensor) -> float:
    """Frobenius inner product <B_x A_x, B_y A_y> = trace((B_xᵀ B_y)(A_y A_xᵀ)) (spec 11).

    Two r x r products instead of two d_out x d_in updates: O((d_in + d_out)·r²) instead of O(d_in·d_out·r), and
    no d_out x d_in matrix in memory. Float64, since a relative distance of two nearby adapters is a small
    difference of large numbers. The ranks of x and y may differ.
    """
    bb = b_x.to(torch.float64).T @ b_y.to(torch.float64)  # (r_x, r_y)
    aa = a_y.to(torch.float64) @ a_x.to(torch.float64).T  # (r_y, r_x)
    return float((bb * aa.T).sum())  # trace(bb @ aa) without the product


@dataclass(frozen=True)
class ModuleDiversity:
    """Cosine and relative distance of two adapters' updates on one module."""

    cosine: float  # NaN when either update is zero (the angle to a zero matrix is undefined)
    distance: float  # NaN when both updates are zero (0 / 0); 2 when exactly one is
    norm_x: float
    norm_y: float


def module_diversity(x: tuple[torch.Tensor, torch.Tensor], y: tuple[torch.Tensor, torch.Tensor],
                     scaling_x: float = 1.0, scaling_y: float = 1.0) -> ModuleDiversity:
    """Cosine <dW_x, dW_y> / (|dW_x| |dW_y|) and relative distance |dW_x - dW_y| / ((|dW_x| + |dW_y|) / 2), both
    Frobenius, of one module's updates dW = scaling · B A (spec 11), from the factors.

    |dW_x - dW_y|² is expanded as |dW_x|² + |dW_y|² - 2<dW_x, dW_y> and clamped at 0, so identical adapters give
    distance 0 (up to rounding) and cosine 1. A zero update (a freshly initialised B = 0) has no direction: the
    cosine is NaN then, and the distance is NaN when both are zero and 2 when one is.
    """
    (a_x, b_x), (a_y, b_y) = x, y
    for name, (a, b) in (("x", x), ("y", y)):
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise ValueError(f"adapter {name}: A must be (r, d_in) and B (d_out, r), got A {tuple(a.shape)} and "
                             f"B {tuple(b.shape)}")
    if a_x.shape[1] != a_y.shape[1] or b_x.shape[0] != b_y.shape[0]:
        raise ValueError(f"the adapters target layers of different sizes: (d_out, d_in) {b_x.shape[0], a_x.shape[1]}"
                         f" against {b_y.shape[0], a_y.shape[1]}")
    sxx = scaling_x * scaling_x * inner(a_x, b_x, a_x, b_x)
    syy = scaling_y * scaling_y * inner(a_y, b_y, a_y, b_y)
    sxy = scaling_x * scaling_y * inner(a_x, b_x, a_y, b_y)
    nx, ny = math.sqrt(max(sxx, 0.0)), math.sqrt(max(syy, 0.0))
    cosine = sxy / (nx * ny) if nx > 0 and ny > 0 else math.nan
    if nx > 0 and ny > 0:
        cosine = max(-1.0, min(1.0, cosine))  # rounding can step just outside [-1, 1]
    diff = math.sqrt(max(sxx + syy - 2.0 * sxy, 0.0))
    distance = diff / ((nx + ny) / 2.0) if nx + ny > 0 else math.nan
    return ModuleDiversity(cosine=cosine, distance=distance, norm_x=nx, norm_y=ny)


@dataclass(frozen=True)
class PairDiversity:
    """Two adapters' cosine and relative distance, averaged over their modules."""

    cosine: float  # mean over modules where it is defined; NaN when it is nowhere
    distance: float  # likewise
    n_modules: int
    n_cosine: int  # modules whose cosine was defined (both updates non-zero)
    modules: dict[str, ModuleDiversity]


def _nanmean(xs: list[float]) -> tuple[float, int]:
    kept = [x for x in xs if not math.isnan(x)]
    return (sum(kept) / len(kept) if kept else math.nan), len(kept)


def pair_diversity(x: Factors, y: Factors, scaling_x: float = 1.0, scaling_y: float = 1.0) -> PairDiversity:
    """Weight diversity of two adapters (spec 11): per module cosine and relative distance, averaged over modules.

    Both adapters must target the same modules. A module where a measure is undefined (a zero update, see
    `module_diversity`) is left out of that measure's mean, so one untrained module does not make the whole pair
    NaN; `n_cosine` says how many modules the cosine averaged over, and the mean is NaN when none.
    """
    if set(x) != set(y):
        diff = sorted(set(x) ^ set(y))[:5]
        raise ValueError(f"the adapters target different modules (e.g. {diff}); compare adapters of one layout")
    if not x:
        raise ValueError("the adapters have no modules")
    modules = {m: module_diversity(x[m], y[m], scaling_x, scaling_y) for m in sorted(x)}
    cosine, n_cosine = _nanmean([d.cosine for d in modules.values()])
    distance, _ = _nanmean([d.distance for d in modules.values()])
    return PairDiversity(cosine=cosine, distance=distance, n_modules=len(modules), n_cosine=n_cosine,
                         modules=modules)


@dataclass(frozen=True)
class PopulationDiversity:
    """Pairwise weight diversity over a population: symmetric matrices in `names` order and their means."""

    names: list[str]
    cosine: np.ndarray  # (P, P); diagonal 1 (NaN for an all-zero adapter)
    distance: np.ndarray  # (P, P); diagonal 0 (NaN for an all-zero adapter)
    mean_cosine: float  # over pairs a < b whose value is defined; NaN when none
    mean_distance: float


def population_diversity(adapters: Mapping[str, Factors],
                         scaling: float | Mapping[str, float] = 1.0) -> PopulationDiversity:
    """Cosine and relative-distance matrices over every pair of adapters, and their means over distinct pairs
    (spec 11). `scaling` is one alpha / r for all, or one per adapter name (members of different ranks)."""
    names = sorted(adapters)
    if len(names) < 2:
        raise ValueError(f"weight diversity needs two or more adapters, got {len(names)}")
    scale = {n: float(scaling[n] if isinstance(scaling, Mapping) else scaling) for n in names}
    p = len(names)
    cosine = np.full((p, p), math.nan)
    distance = np.full((p, p), math.nan)
    for i, j in itertools.combinations(range(p), 2):
        d = pair_diversity(adapters[names[i]], adapters[names[j]], scale[names[i]], scale[names[j]])
        cosine[i, j] = cosine[j, i] = d.cosine
        distance[i, j] = distance[j, i] = d.distance
    for i, n in enumerate(names):
        # An adapter is at distance 0 and cosine 1 from itself when it has any non-zero module.
        nonzero = any(inner(a, b, a, b) > 0 for a, b in adapters[n].values())
        cosine[i, i], distance[i, i] = (1.0, 0.0) if nonzero else (math.nan, math.nan)
    upper = np.triu_indices(p, k=1)
    mean_cosine, _ = _nanmean([float(v) for v in cosine[upper]])
    mean_distance, _ = _nanmean([float(v) for v in distance[upper]])
    return PopulationDiversity(names=names, cosine=cosine, distance=distance, mean_cosine=mean_cosine,
                               mean_distance=mean_distance)


def change(x: Factors, base: Factors, scaling_x: float = 1.0, scaling_base: float = 1.0) -> Factors:
    """The factors of one adapter's change from another, dW_x - dW_base = s_x B_x A_x - s_base B_base A_base, at
    scaling 1: A' = [A_x; A_base] (r_x + r_base, d_in) and B' = [s_x B_x, -s_base B_base] (d_out, r_x + r_base).

    Exact, and still factored, so `pair_diversity` and `population_diversity` take it as any adapter. Members that
    all start from one warm start share most of their weights: the cosine of their whole updates is that shared part
    (near 1 however they train), while the cosine of their changes from the warm start (or from their birth) measures
    how they have moved apart.
    """
    if set(x) != set(base):
        diff = sorted(set(x) ^ set(base))[:5]
        raise ValueError(f"the adapters target different modules (e.g. {diff}); compare adapters of one layout")
    out = {}
    for m, (a_x, b_x) in x.items():
        a_b, b_b = base[m]
        a = torch.cat([a_x.to(torch.float64), a_b.to(torch.float64)], dim=0)  # (r_x + r_base, d_in)
        b = torch.cat([scaling_x * b_x.to(torch.float64), -scaling_base * b_b.to(torch.float64)], dim=1)  # (d_out, r)
        out[m] = (a, b)
    return out
