"""Seed-level intervals, the hierarchical bootstrap, leave-one-family-out, t quantiles and power, on answers known
in advance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from populora.analysis.hierarchical import (
    hierarchical_bootstrap,
    leave_one_out,
    pooled_difference,
    seed_t_interval,
)
from populora.analysis.intervals import paired_bootstrap
from populora.analysis.power import (
    minimal_detectable_difference,
    seeds_needed,
    t_test_power,
    variance_components,
)
from populora.analysis.tdist import t_cdf, t_quantile


def test_t_quantiles_are_the_tabled_ones():
    # the values every t table gives (two-sided 95% and one-sided 80%)
    for p, df, want in ((0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 4, 2.7764), (0.975, 30, 2.0423),
                        (0.8, 2, 1.0607), (0.8, 4, 0.9410), (0.975, 10**7, 1.9600)):
        assert t_quantile(p, df) == pytest.approx(want, abs=1e-4)
    assert t_quantile(0.025, 2) == pytest.approx(-4.3027, abs=1e-4) and t_quantile(0.5, 3) == 0.0
    assert t_cdf(0.0, 5) == 0.5 and t_cdf(t_quantile(0.9, 7), 7) == pytest.approx(0.9, abs=1e-10)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_the_seed_t_interval_of_the_committed_per_seed_differences():
    # the numbers: per-seed differences 0.030, 0.069, 0.071 give the t interval [-0.001, 0.114]
    t = seed_t_interval({1: 0.030, 2: 0.069, 3: 0.071})
    assert t.mean == pytest.approx(0.05667, abs=1e-5)
    assert t.low == pytest.approx(-0.0010, abs=5e-4) and t.high == pytest.approx(0.1143, abs=5e-4)
    one = seed_t_interval({1: 0.2})
    assert one.mean == 0.2 and one.low is None and one.high is None


def test_equal_differences_give_a_zero_width_interval():
    diffs = {s: {f: [0.25] * 3 for f in ("a", "b")} for s in (1, 2, 3)}
    h = hierarchical_bootstrap(diffs, n_resamples=200)
    assert h.difference == h.low == h.high == pytest.approx(0.25)
    assert h.n_seeds == 3 and h.n_families == 2 and h.n_problems == 18


def test_one_family_carrying_the_difference_widens_the_interval_and_shows_when_left_out():
    """Six families of 20 problems, three seeds. Family `r` gains 0.9 in every seed, the others nothing: the pairs
    bootstrap treats the 360 pairs as independent and gives a narrow interval; resampling families lets a resample
    draw `r` zero or several times, so the interval reaches 0; leaving `r` out takes the whole difference away."""
    diffs = {s: {f: [0.9 if f == "r" else 0.0] * 20 for f in "abcder"} for s in (1, 2, 3)}
    h = hierarchical_bootstrap(diffs, n_resamples=4000, seed=2)
    assert h.difference == pytest.approx(0.15)
    pop = {s: {f"{f}{i}": [0.9 if f == "r" else 0.0] for f in "abcder" for i in range(20)} for s in (1, 2, 3)}
    base = {s: dict.fromkeys(pop[s], 0.0) for s in pop}
    flat = paired_bootstrap(pop, base, n_resamples=4000)
    assert flat.low > 0.1 and h.low == pytest.approx(0.0)
    assert (h.high - h.low) > 3 * (flat.high - flat.low)
    loo = leave_one_out(diffs)
    assert loo["r"] == pytest.approx(0.0) and loo["a"] == pytest.approx(0.18)
    assert pooled_difference(diffs) == pytest.approx(0.15)


def test_seeds_are_resampled_too():
    # each seed constant within (every family the same), the seeds 0.0, 0.1, 0.2: only the seed draw moves the
    # resample, whose value is the mean of three draws from {0, 0.1, 0.2}; its extremes have probability 1/27 = 3.7%
    # each, over the 2.5% tails, so with three seeds the percentile interval is the seeds' range (what the t
    # interval beside it, and the per-seed values, are for)
    diffs = {s: {f: [0.1 * s] * 4 for f in "ab"} for s in (0, 1, 2)}
    h = hierarchical_bootstrap(diffs, n_resamples=6000, seed=0)
    assert h.difference == pytest.approx(0.1)
    assert h.per_seed == {0: 0.0, 1: pytest.approx(0.1), 2: pytest.approx(0.2)}
    assert h.low == pytest.approx(0.0, abs=1e-12) and h.high == pytest.approx(0.2)
    five = hierarchical_bootstrap({s: {f: [0.05 * s] * 4 for f in "ab"} for s in range(5)}, n_resamples=6000)
    assert 0.0 < five.low < five.difference < five.high < 0.2  # five seeds: inside the range
    # the same resamples from the same seed
    assert hierarchical_bootstrap(diffs, n_resamples=6000, seed=0) == h


def test_variance_components_and_the_minimal_detectable_difference():
    # per-seed differences with a known within-seed spread: seeds at 0, 0.1, 0.2, each problem ±0.3 around its mean
    per_problem = {s: [0.1 * s + (0.3 if i % 2 else -0.3) for i in range(100)] for s in range(3)}
    v = variance_components(per_problem)
    within = np.var([0.3 if i % 2 else -0.3 for i in range(100)], ddof=1)
    assert v.sd_problem == pytest.approx(math.sqrt(within))
    assert v.sd_seed_means == pytest.approx(0.1)
    assert v.sd_seed == pytest.approx(math.sqrt(0.01 - within / 100))
    # the shortcut (t_{.975,S-1} + t_{.8,S-1}) sigma / sqrt(S) understates the MDD with few seeds (its power at 3
    # seeds is about 0.77): the noncentral t's MDD lies above it, and close to it with many seeds
    shortcut3 = (4.3027 + 1.0607) * 0.02 / math.sqrt(3)
    assert shortcut3 < minimal_detectable_difference(3, 300, 0.02, 0.0) < 1.15 * shortcut3
    assert t_test_power(shortcut3, 3, 0.02) == pytest.approx(0.77, abs=0.01)
    shortcut10 = (2.2622 + 0.8834) * 0.5 / math.sqrt(1000)
    assert minimal_detectable_difference(10, 100, 0.0, 0.5) == pytest.approx(shortcut10, rel=0.03)
    s = seeds_needed(0.03, 300, 0.02, 0.3)
    assert minimal_detectable_difference(s, 300, 0.02, 0.3) <= 0.03 < minimal_detectable_difference(s - 1, 300, 0.02, 0.3)
    assert seeds_needed(1e-6, 300, 0.02, 0.3, most=20) is None
    with pytest.raises(ValueError, match="two or more seeds"):
        minimal_detectable_difference(1, 300, 0.02, 0.3)


@pytest.mark.parametrize("seeds", [3, 5, 8])
def test_the_minimal_detectable_difference_has_its_power_in_simulation(seeds):
    """Draw per-seed differences at the MDD (sd_seed net of scoring noise plus the scoring noise of N problems) and
    run the t test over seeds: it rejects 80% of the time (50,000 seeded experiments: +-0.6% at 3 sd), and at a true
    difference of 0 it rejects 5% of the time."""
    from populora.analysis.tdist import t_quantile

    n, sd_seed, sd_problem = 300, 0.0177, 0.21
    mdd = minimal_detectable_difference(seeds, n, sd_seed, sd_problem)
    sigma = math.sqrt(sd_seed ** 2 + sd_problem ** 2 / n)
    rng = np.random.default_rng(seeds)
    crit = t_quantile(0.975, seeds - 1)
    for delta, expected in ((mdd, 0.80), (0.0, 0.05)):
        d = delta + rng.normal(0.0, sd_seed, (50_000, seeds)) + rng.normal(0.0, sd_problem / math.sqrt(n),
                                                                           (50_000, seeds))
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(seeds))
        assert float(np.mean(np.abs(t) > crit)) == pytest.approx(expected, abs=0.006)
    assert t_test_power(mdd, seeds, sigma) == pytest.approx(0.80, abs=1e-6)
