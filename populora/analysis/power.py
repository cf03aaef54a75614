"""Power before numbers: the smallest difference an experiment's design can detect, from its seeds and problems and
the spread a pilot or an earlier run measured.

The model is the one the headline's intervals assume (populora.analysis.hierarchical): each seed's difference is
d_s = delta + u_s + e_s, u_s the run-to-run spread of training (sd_seed) and e_s the scoring noise of its N problems
(variance sd_problem² / N, sd_problem the spread of one problem's difference within a seed). sd_seed is the spread
net of scoring noise (VarianceComponents.sd_seed, not the observed per-seed spread, which holds the scoring noise
once already). The test is a two-sided t test over the S seeds: with sigma² = sd_seed² + sd_problem² / N, its
statistic follows a noncentral t with S - 1 degrees of freedom and noncentrality delta·sqrt(S)/sigma, so its power at
a difference delta is

    power(delta) = P(|T_{S-1, ncp}| > t_{1 - alpha/2, S-1}),   ncp = delta · sqrt(S) / sigma,

and the minimal detectable difference (MDD) is the delta at which that reaches `power` (spec 14). The familiar
shortcut (t_{1 - alpha/2, S-1} + t_{power, S-1}) · sigma / sqrt(S) treats the statistic as a shifted central t and
overstates the power with few seeds (at three seeds its MDD has power 0.77, not 0.80).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from populora.analysis.tdist import t_quantile

_GRID = 4001  # points of the chi-square integral in t_test_power (its error is below 1e-6 at 2-100 seeds)


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


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def t_test_power(delta: float, n_seeds: int, sigma: float, *, alpha: float = 0.05) -> float:
    """The power of the two-sided one-sample t test over `n_seeds` values of sd `sigma` at a true mean `delta`: the
    noncentral t's tail mass, P(|Z + ncp| > t_c · sqrt(V / df)) with Z normal and V chi-square(df), integrated over V."""
    df = n_seeds - 1
    if sigma <= 0:
        return 1.0 if delta != 0 else alpha
    ncp = abs(delta) * math.sqrt(n_seeds) / sigma
    crit = t_quantile(1.0 - alpha / 2.0, df)
    # V = df · W² with W² ~ chi-square(df) / df; integrate over x = sqrt(V) (its density is smooth at 0 for df >= 1)
    top = math.sqrt(df + 12.0 * math.sqrt(2.0 * df) + 40.0)
    x = np.linspace(0.0, top, _GRID)
    log_density = ((df - 1) * np.log(np.maximum(x, 1e-300)) - x * x / 2.0 - (df / 2.0 - 1.0) * math.log(2.0)
                   - math.lgamma(df / 2.0))
    density = np.exp(log_density)
    bound = crit * x / math.sqrt(df)
    reject = _normal_cdf(-bound - ncp) + 1.0 - _normal_cdf(bound - ncp)
    return float(np.trapezoid(density * reject, x) / np.trapezoid(density, x))


def minimal_detectable_difference(n_seeds: int, n_problems: int, sd_seed: float, sd_problem: float, *,
                                  alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest difference the t test over `n_seeds` seeds detects with probability `power` (module docstring:
    the noncentral t), `sd_seed` net of scoring noise."""
    if n_seeds < 2:
        raise ValueError(f"a t test over seeds needs two or more seeds, got {n_seeds}")
    if n_problems < 1:
        raise ValueError(f"need at least one problem, got {n_problems}")
    if sd_seed < 0 or sd_problem < 0:
        raise ValueError("standard deviations cannot be negative")
    if not 0.0 < alpha < 1.0 or not alpha < power < 1.0:
        raise ValueError(f"alpha and power must lie strictly between 0 and 1 (power above alpha), got {alpha} and "
                         f"{power}")
    sigma = math.sqrt(sd_seed ** 2 + sd_problem ** 2 / n_problems)
    if sigma == 0:
        return 0.0
    se = sigma / math.sqrt(n_seeds)
    low, high = 0.0, (t_quantile(1.0 - alpha / 2.0, n_seeds - 1) + t_quantile(power, n_seeds - 1)) * se
    while t_test_power(high, n_seeds, sigma, alpha=alpha) < power:  # the shortcut is a lower bound: widen from it
        low, high = high, 2.0 * high
    for _ in range(60):  # bisection on the power curve, increasing in the difference
        mid = (low + high) / 2.0
        low, high = (mid, high) if t_test_power(mid, n_seeds, sigma, alpha=alpha) < power else (low, mid)
    return high


def seeds_needed(target: float, n_problems: int, sd_seed: float, sd_problem: float, *, alpha: float = 0.05,
                 power: float = 0.8, most: int = 1000) -> int | None:
    """The fewest seeds whose MDD is at most `target`; None when even `most` seeds do not reach it. The MDD falls
    as seeds are added (a smaller t quantile, a larger sqrt(S)), so the answer is found by bisection."""
    if target <= 0:
        raise ValueError(f"the difference to detect must be positive, got {target}")

    def reaches(s: int) -> bool:
        return minimal_detectable_difference(s, n_problems, sd_seed, sd_problem, alpha=alpha, power=power) <= target

    if most < 2:
        return None
    low, high = 1, 2  # one seed cannot be tested; double until `high` reaches it, then bisect between them
    while not reaches(high):
        if high >= most:
            return None
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return high
