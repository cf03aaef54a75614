"""Power before numbers: the smallest difference an experiment's design can detect, from its seeds and problems and
the spread a pilot or an earlier run measured.

The model is the one the headline's intervals assume (populora.analysis.hierarchical): each seed's difference is
d_s = delta + u_s + e_s, u_s the run-to-run spread of training (sd_seed) and e_s the scoring noise of its N problems
(variance sd_problem² / N, sd_problem the spread of one problem's difference within a seed). The test is a t test
over the S seeds, so the smallest difference detected with probability `power` at two-sided level `alpha` is

    MDD = (t_{1 - alpha/2, S-1} + t_{power, S-1}) · sqrt((sd_seed² + sd_problem² / N) / S).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from populora.analysis.tdist import t_quantile


@dataclass(frozen=True)
class VarianceComponents:
    """The spread of a comparison split in two: between seeds (training) and between problems within a seed."""

    sd_seed: float  # sd of u_s, the run-to-run spread with the scoring noise taken out (0 when it is all noise)
    sd_problem: float  # sd of one problem's difference within a seed, pooled over seeds
    sd_seed_means: float  # sd of the observed per-seed differences (both parts)
    n_seeds: int
    n_problems: int  # per seed (the mean when seeds differ)


def variance_components(per_problem: Mapping[Hashable, Sequence[float]]) -> VarianceComponents:
    """From per-seed lists of per-problem differences (population mean - baseline): the pooled within-seed variance,
    and the between-seed variance less what the scoring noise explains, var(d_s) - sd_problem² / N, at least 0."""
    seeds = {s: np.asarray([float(v) for v in vs], dtype=np.float64) for s, vs in per_problem.items()}
    if len(seeds) < 2 or any(v.size < 2 for v in seeds.values()):
        raise ValueError("variance components need two or more seeds with two or more problems each")
    within = float(np.mean([v.var(ddof=1) for v in seeds.values()]))
    n = float(np.mean([v.size for v in seeds.values()]))
    means = np.asarray([v.mean() for v in seeds.values()])
    between = float(means.var(ddof=1))
    return VarianceComponents(sd_seed=math.sqrt(max(0.0, between - within / n)), sd_problem=math.sqrt(within),
                              sd_seed_means=math.sqrt(between), n_seeds=len(seeds), n_problems=round(n))


def minimal_detectable_difference(n_seeds: int, n_problems: int, sd_seed: float, sd_problem: float, *,
                                  alpha: float = 0.05, power: float = 0.8) -> float:
    """The module's MDD formula: the difference a t test over `n_seeds` seeds detects with probability `power`."""
    if n_seeds < 2:
        raise ValueError(f"a t test over seeds needs two or more seeds, got {n_seeds}")
    if n_problems < 1:
        raise ValueError(f"need at least one problem, got {n_problems}")
    if sd_seed < 0 or sd_problem < 0:
        raise ValueError("standard deviations cannot be negative")
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie strictly between 0 and 1, got {alpha} and {power}")
    df = n_seeds - 1
    se = math.sqrt((sd_seed ** 2 + sd_problem ** 2 / n_problems) / n_seeds)
    return (t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)) * se


def seeds_needed(target: float, n_problems: int, sd_seed: float, sd_problem: float, *, alpha: float = 0.05,
                 power: float = 0.8, most: int = 1000) -> int | None:
    """The fewest seeds whose MDD is at most `target`; None when even `most` seeds do not reach it."""
    if target <= 0:
        raise ValueError(f"the difference to detect must be positive, got {target}")
    for s in range(2, most + 1):
        if minimal_detectable_difference(s, n_problems, sd_seed, sd_problem, alpha=alpha, power=power) <= target:
            return s
    return None
