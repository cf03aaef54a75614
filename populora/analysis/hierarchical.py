"""Intervals that respect how the comparison's data was made (spec 14, revised): seeds are the independent units,
problems within a seed come in families (a template x task type of the generated set; one problem each for a
published benchmark), and a family's problems are not independent of each other.

- `hierarchical_bootstrap`: resample the seeds, then the families within each drawn seed, and take the percentiles
  of the resampled difference. It is the headline interval: with three seeds it is wide, as it should be.
- `seed_t_interval`: the t interval over the per-seed differences, beside it; with fewer than five seeds the
  per-seed values are shown too, and a min-max range is never called a 95% interval.
- `leave_one_out`: the difference again without each family, so one family carrying the result shows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from populora.analysis.tdist import t_quantile

# Below this many seeds the report shows each seed's value beside any interval over seeds (docs/experiment.md).
FEW_SEEDS = 5
# Resamples are drawn this many at a time, so 10,000 resamples of 800 one-problem families stay near 64 MB.
_CHUNK = 1_000

# {seed: {family: [per-problem differences (population mean - baseline)]}}
Differences = Mapping[Hashable, Mapping[Hashable, Sequence[float]]]


@dataclass(frozen=True)
class SeedInterval:
    """The mean of per-seed values with a t interval over seeds (mean ± t_{n-1} · sd / sqrt(n)); low and high are
    None with fewer than two seeds (no spread to measure)."""

    mean: float
    low: float | None
    high: float | None
    sd: float | None
    n_seeds: int
    per_seed: dict[Hashable, float]
    confidence: float


def seed_t_interval(per_seed: Mapping[Hashable, float], confidence: float = 0.95) -> SeedInterval:
    """A t interval over seeds: the seeds are the independent replicates of a run, so their values are the sample."""
    values = {s: float(v) for s, v in per_seed.items()}
    if not values:
        raise ValueError("a seed-level interval needs at least one seed's value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    x = np.asarray(list(values.values()), dtype=np.float64)
    n = x.size
    m = float(x.mean())
    if n < 2:
        return SeedInterval(m, None, None, None, n, values, confidence)
    sd = float(x.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return SeedInterval(m, m - half, m + half, sd, n, values, confidence)


@dataclass(frozen=True)
class HierarchicalDifference:
    """The difference (mean over seeds of each seed's mean over its problems) with its two-level bootstrap interval."""

    difference: float
    low: float
    high: float
    per_seed: dict[Hashable, float]  # each seed's mean difference over its problems
    n_seeds: int
    n_families: int  # distinct families over all seeds
    n_problems: int  # (seed, problem) pairs
    confidence: float
    n_resamples: int


def _seed_arrays(diffs: Differences) -> dict[Hashable, tuple[np.ndarray, np.ndarray]]:
    """Per seed its families' sums and problem counts, (F,) each."""
    out = {}
    for s, families in diffs.items():
        sums, counts = [], []
        for f, values in families.items():
            v = np.asarray([float(x) for x in values], dtype=np.float64)
            if v.size == 0:
                continue
            if np.isnan(v).any():
                raise ValueError(f"seed {s}, family {f}: a difference is NaN; drop the problem from both arms")
            sums.append(v.sum())
            counts.append(v.size)
        if not counts:
            raise ValueError(f"seed {s} has no problems")
        out[s] = (np.asarray(sums), np.asarray(counts, dtype=np.float64))
    return out


def hierarchical_bootstrap(diffs: Differences, *, n_resamples: int = 10_000, confidence: float = 0.95,
                           seed: int = 0) -> HierarchicalDifference:
    """The population-mean minus baseline difference with a two-level percentile bootstrap interval.

    `diffs[seed][family]` lists the per-problem differences of that family in that seed. The estimate is the mean
    over seeds of each seed's mean over its problems. A resample draws as many seeds as there are, with replacement;
    each drawn seed (each draw on its own, so a seed drawn twice gets two family resamples) draws as many of its
    families as it has, with replacement, and its mean is the drawn families' problems' mean; the resample's value is
    the mean over its drawn seeds. Resampling seeds carries the run-to-run spread into the interval; resampling
    families, not problems, carries the dependence of a family's problems (one learnt template moves all of them).
    A seeded numpy Generator makes the interval reproducible. Differences that are all equal give a zero-width
    interval at that value.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    if not diffs:
        raise ValueError("no seeds to compare")
    arrays = _seed_arrays(diffs)
    names = list(arrays)
    per_seed = {s: float(arrays[s][0].sum() / arrays[s][1].sum()) for s in names}
    estimate = float(np.mean(list(per_seed.values())))
    rng = np.random.default_rng(seed)
    n_seeds = len(names)
    stats = np.empty(n_resamples)
    for start in range(0, n_resamples, _CHUNK):
        rows = min(_CHUNK, n_resamples - start)
        drawn = rng.integers(0, n_seeds, size=(rows, n_seeds))  # (R, S) which seed each slot holds
        slot_means = np.empty((rows, n_seeds))
        for j in range(n_seeds):
            for i, s in enumerate(names):
                mask = drawn[:, j] == i
                k = int(mask.sum())
                if not k:
                    continue
                sums, counts = arrays[s]
                pick = rng.integers(0, sums.size, size=(k, sums.size))  # (k, F) families drawn for those slots
                slot_means[mask, j] = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
        stats[start:start + rows] = slot_means.mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    families = {f for fam in diffs.values() for f in fam}
    return HierarchicalDifference(difference=estimate, low=float(low), high=float(high), per_seed=per_seed,
                                  n_seeds=n_seeds, n_families=len(families),
                                  n_problems=int(sum(a[1].sum() for a in arrays.values())), confidence=confidence,
                                  n_resamples=n_resamples)


def pooled_difference(diffs: Differences, leave_out: Hashable | None = None) -> float:
    """The estimate of `hierarchical_bootstrap` (mean over seeds of each seed's mean), without family `leave_out`."""
    means = []
    for families in diffs.values():
        values = [float(v) for f, vs in families.items() if f != leave_out for v in vs]
        if values:
            means.append(sum(values) / len(values))
    if not means:
        raise ValueError("no problems are left")
    return sum(means) / len(means)


def leave_one_out(diffs: Differences) -> dict[Hashable, float]:
    """{family: the difference without that family in every seed}: one family carrying the result shows as the one
    whose removal moves the difference most."""
    families = sorted({f for fam in diffs.values() for f in fam}, key=str)
    return {f: pooled_difference(diffs, leave_out=f) for f in families if len(families) > 1}
