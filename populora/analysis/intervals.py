"""Intervals for the population-vs-baseline comparison: the paired bootstrap of spec 14 and the trend of spec 11."""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from populora.analysis.tdist import t_quantile

# One chunk of resamples holds at most this many drawn indices, so 10,000 resamples of 4,000 pairs (800 problems
# x 5 seeds) stay near 16 MB instead of 320 MB at once.
_CHUNK_CELLS = 2_000_000
# A member's pass value at or above this counts as solved in the paired counts: greedy pass@1 is 0 or 1, and a
# value from n samples is solved when at least half of them pass.
SOLVED_AT = 0.5

PassValues = float | Sequence[float]


@dataclass(frozen=True)
class PairedCounts:
    """How often a member and the baseline solve the same problem of the same seed (McNemar's table).

    Counted over (seed, problem, member): each population member is paired with the baseline of its seed on the
    same problem, so the four counts add up to pairs x members. Counting members, not the population mean, keeps
    a problem that half the members solve from vanishing into one rounded mean.
    """

    both: int
    only_population: int
    only_baseline: int
    neither: int

    @property
    def total(self) -> int:
        return self.both + self.only_population + self.only_baseline + self.neither


@dataclass(frozen=True)
class PairedDifference:
    """Population mean minus baseline over (seed, problem) pairs, with its percentile bootstrap interval."""

    difference: float  # mean over pairs of (population mean pass - baseline pass)
    low: float
    high: float
    n_pairs: int
    counts: PairedCounts
    confidence: float
    n_resamples: int


@dataclass(frozen=True)
class Trend:
    """The least-squares slope of a metric's per-step mean against compute, with its bootstrap interval."""

    slope: float  # metric units per unit of compute
    intercept: float
    low: float
    high: float
    n_steps: int  # (compute, mean) points fitted, over every seed
    n_seeds: int
    resampled: str  # "programs" (one seed), "t over seeds" (2-4 seeds) or "seeds" (a bootstrap over 5 or more)
    confidence: float
    n_resamples: int
    per_seed: dict = field(default_factory=dict)  # {seed: its own least-squares slope} (seeds with two compute values)
    seed_mean: float | None = None  # the mean of per_seed, where the interval over seeds is centred


def _as_members(value: PassValues, where: str) -> list[float]:
    members = [float(value)] if isinstance(value, numbers.Real) else [float(v) for v in value]
    if not members:
        raise ValueError(f"{where}: the population has no member values; give each member's pass value")
    if any(math.isnan(v) for v in members):
        raise ValueError(f"{where}: a pass value is NaN; drop the problem from both arms instead")
    return members


def _percentiles(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def _check_resampling(n_resamples: int, confidence: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def paired_bootstrap(population: Mapping[Hashable, Mapping[Hashable, PassValues]],
                     baseline: Mapping[Hashable, Mapping[Hashable, float]], *, n_resamples: int = 10_000,
                     confidence: float = 0.95, seed: int = 0) -> PairedDifference:
    """The population-mean minus baseline difference with a paired bootstrap interval (spec 14).

    `population[seed][problem]` is the members' pass values on that problem (a sequence, one per member; a single
    number is read as the members' mean already taken), `baseline[seed][problem]` the baseline's pass value. Both
    must hold the same seeds and the same problems per seed: the design is paired, and a problem that one arm lacks
    cannot be compared. The difference of a pair is mean(members) - baseline; the estimate is its mean over the n
    pairs. The interval resamples the n pairs with replacement `n_resamples` times (a seeded numpy Generator, so a
    report is reproducible) and takes the percentiles of the resampled means (95%: the 2.5th and 97.5th).
    Resampling pairs, not the arms separately, keeps the per-problem correlation between the arms, which is what
    makes a small difference on a shared set of problems detectable. The paired counts are over members (see
    `PairedCounts`), solved meaning a pass value >= 0.5.
    """
    _check_resampling(n_resamples, confidence)
    if set(population) != set(baseline):
        raise ValueError(f"the arms hold different seeds: population {sorted(map(str, population))}, "
                         f"baseline {sorted(map(str, baseline))}; compare the seeds both arms ran")
    diffs: list[float] = []
    both = only_pop = only_base = neither = 0
    for s in population:
        pop_s, base_s = population[s], baseline[s]
        if set(pop_s) != set(base_s):
            missing = sorted(map(str, set(pop_s) ^ set(base_s)))[:5]
            raise ValueError(f"seed {s}: the arms hold different problems (e.g. {missing}); evaluate both arms on "
                             "the same problems")
        for p in pop_s:
            members = _as_members(pop_s[p], f"seed {s}, problem {p}")
            base = float(base_s[p])
            if math.isnan(base):
                raise ValueError(f"seed {s}, problem {p}: the baseline's pass value is NaN")
            diffs.append(sum(members) / len(members) - base)
            base_solved = base >= SOLVED_AT
            for m in members:
                if m >= SOLVED_AT:
                    both, only_pop = (both + 1, only_pop) if base_solved else (both, only_pop + 1)
                else:
                    only_base, neither = (only_base + 1, neither) if base_solved else (only_base, neither + 1)
    if not diffs:
        raise ValueError("no (seed, problem) pairs to compare")
    d = np.asarray(diffs, dtype=np.float64)  # (n,)
    n = d.size
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    chunk = max(1, _CHUNK_CELLS // n)
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))  # (chunk, n) pair indices drawn with replacement
        means[start:stop] = d[idx].mean(axis=1)
    low, high = _percentiles(means, confidence)
    return PairedDifference(difference=float(d.mean()), low=low, high=high, n_pairs=n,
                            counts=PairedCounts(both, only_pop, only_base, neither), confidence=confidence,
                            n_resamples=n_resamples)


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and intercept of each row of y (R, T) against x (R, T) or (T,)."""
    xm = x.mean(axis=-1, keepdims=True)
    ym = y.mean(axis=-1, keepdims=True)
    sxx = ((x - xm) ** 2).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = ((x - xm) * (y - ym)).sum(axis=-1) / sxx
    return slope, ym[..., 0] - slope * xm[..., 0]


def _seed_slopes(runs: Mapping[Hashable, list[tuple[float, np.ndarray]]], x_all: np.ndarray, y_all: np.ndarray,
                 n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Slopes refitted on resamples of whole seeds, from each seed's sums (a resample is a count per seed).

    The pooled least-squares fit only needs the sums n, Σx, Σy, Σxx, Σxy of the points, and a resample's sums are
    the seeds' sums weighted by how often it drew each seed: one matrix product for all resamples instead of a
    refit per resample. The points are centred on the overall means first so Σxx is not a difference of two numbers
    near 1e30 when compute is in FLOPs. A resample whose points share one compute value has no slope (NaN).
    """
    xc, yc = x_all.mean(), y_all.mean()
    stats = []  # (S, 5): per seed n, Σx, Σy, Σxx, Σxy of the centred points
    for pts in runs.values():
        x = np.asarray([c for c, _ in pts]) - xc
        y = np.asarray([v.mean() for _, v in pts]) - yc
        stats.append([x.size, x.sum(), y.sum(), (x * x).sum(), (x * y).sum()])
    per_seed = np.asarray(stats)
    n_seeds = per_seed.shape[0]
    counts = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=n_resamples)  # (R, S)
    n, sx, sy, sxx, sxy = (counts @ per_seed).T  # each (R,)
    var = sxx - sx * sx / n
    floor = 1e-12 * ((x_all - xc) ** 2).sum()  # below this, rounding, not spread: no slope
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > floor, (sxy - sx * sy / n) / var, np.nan)


StepValues = Sequence[tuple[float, Sequence[float]]]
# From this many seeds on, a trend's interval is a bootstrap over seeds; below it, the t interval over their slopes.
SEED_BOOTSTRAP_MIN = 5


def _points(steps: StepValues, where: str) -> list[tuple[float, np.ndarray]]:
    points = []
    for compute, values in steps:
        v = np.asarray([float(x) for x in values if x is not None], dtype=np.float64)
        v = v[~np.isnan(v)]
        if not math.isfinite(float(compute)):
            raise ValueError(f"{where}: compute {compute} is not a finite number")
        if v.size:  # a step without a valid program has no mean and gives no point
            points.append((float(compute), v))
    return points


def trend(series: Mapping[Hashable, StepValues], *, n_resamples: int = 10_000, confidence: float = 0.95,
          seed: int = 0) -> Trend:
    """The slope of a metric's per-step mean against compute with a 95% interval at the level of its replicates
    (spec 11, Trend).

    `series[seed]` lists one run's steps as (cumulative compute, the metric's values over the step's valid
    programs); a step with no values is left out. The slope is ordinary least squares over every (compute,
    per-step mean) point of every seed; `per_seed` holds each seed's own slope. The interval:
    - one seed: a percentile bootstrap of each step's programs (the steps' compute stays fixed), so it reflects how
      much the per-step means depend on which programs the teachers happened to propose; it says nothing of another
      run, since the only replicate is the run itself;
    - two to four seeds: the t interval over the per-seed slopes (their mean ± t_{n-1} · sd / sqrt(n)): runs, not
      programs, are then the independent units, and a bootstrap over so few seeds gives the range of their slopes,
      not a 95% interval (three seeds: the lowest and the highest slope, for any spread);
    - five or more seeds: a percentile bootstrap of whole seeds, the pooled slope refitted on each resample.
    Exactly linear per-step means, with all of a step's values equal, give the exact slope and a zero-width
    interval. Fewer than two distinct compute values leave the slope undefined: that is an error.
    """
    _check_resampling(n_resamples, confidence)
    runs = {s: _points(steps, f"seed {s}") for s, steps in series.items()}
    runs = {s: pts for s, pts in runs.items() if pts}
    x_all = np.asarray([c for pts in runs.values() for c, _ in pts])
    if np.unique(x_all).size < 2:
        raise ValueError(f"a slope needs steps at two or more compute values, got {np.unique(x_all).size}")
    y_all = np.asarray([v.mean() for pts in runs.values() for _, v in pts])
    slope, intercept = _fit(x_all, y_all)
    per_seed = {}
    for s, pts in runs.items():
        x = np.asarray([c for c, _ in pts])
        if np.unique(x).size >= 2:
            per_seed[s] = float(_fit(x, np.asarray([v.mean() for _, v in pts]))[0])
    rng = np.random.default_rng(seed)
    seed_mean = float(np.mean(list(per_seed.values()))) if per_seed else None
    if len(runs) == 1:
        resampled = "programs"
        pts = next(iter(runs.values()))
        x = np.asarray([c for c, _ in pts])  # (T,)
        y = np.empty((n_resamples, len(pts)))  # (R, T) resampled per-step means
        for t, (_, v) in enumerate(pts):
            chunk = max(1, _CHUNK_CELLS // v.size)
            for start in range(0, n_resamples, chunk):
                stop = min(n_resamples, start + chunk)
                y[start:stop, t] = v[rng.integers(0, v.size, size=(stop - start, v.size))].mean(axis=1)
        slopes, _ = _fit(x, y)
        low, high = _percentiles(slopes, confidence)
    elif len(runs) < SEED_BOOTSTRAP_MIN:
        resampled = "t over seeds"
        values = np.asarray(list(per_seed.values()))
        if values.size < 2:
            raise ValueError("an interval over seeds needs two or more seeds with steps at two compute values")
        half = t_quantile(0.5 + confidence / 2.0, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size)
        low, high = float(values.mean() - half), float(values.mean() + half)
    else:
        resampled = "seeds"
        slopes = _seed_slopes(runs, x_all, y_all, n_resamples, rng)
        # A resample that drew one seed whose steps share one compute value has no slope; it says nothing.
        slopes = slopes[np.isfinite(slopes)]
        if not slopes.size:
            raise ValueError("no resample of the seeds spans two compute values; give each seed two or more steps")
        low, high = _percentiles(slopes, confidence)
    return Trend(slope=float(slope), intercept=float(intercept), low=low, high=high, n_steps=int(x_all.size),
                 n_seeds=len(runs), resampled=resampled, confidence=confidence, n_resamples=n_resamples,
                 per_seed=per_seed, seed_mean=seed_mean)
