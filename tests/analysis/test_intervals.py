"""The paired bootstrap and the trend slope against answers known in advance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from populora.analysis.intervals import PairedCounts, paired_bootstrap, trend


def test_constant_difference_gives_a_zero_width_interval_at_that_difference():
    # Every pair differs by 0.25: every resample's mean is 0.25, so the interval is [0.25, 0.25].
    population = {s: {p: [0.5, 0.75] for p in range(20)} for s in range(3)}  # member mean 0.625
    baseline = {s: {p: 0.375 for p in range(20)} for s in range(3)}
    r = paired_bootstrap(population, baseline, n_resamples=2000)
    assert r.difference == pytest.approx(0.25, abs=1e-12)
    assert r.low == pytest.approx(0.25, abs=1e-12)
    assert r.high == pytest.approx(0.25, abs=1e-12)
    assert r.n_pairs == 60


def test_interval_matches_the_normal_approximation_for_plus_minus_one_differences():
    # n pairs, exactly half with difference +1 and half -1: the sample mean is 0 and the sample variance (ddof 0)
    # is 1, so the bootstrap distribution of the mean has standard deviation 1/sqrt(n) and the 95% interval is
    # about +-1.96/sqrt(n).
    n = 400
    population = {0: {p: [1.0 if p % 2 == 0 else 0.0] for p in range(n)}}
    baseline = {0: {p: 0.0 if p % 2 == 0 else 1.0 for p in range(n)}}
    r = paired_bootstrap(population, baseline, seed=7)
    half = 1.959964 / math.sqrt(n)
    assert r.difference == 0.0
    assert r.low == pytest.approx(-half, rel=0.06)
    assert r.high == pytest.approx(half, rel=0.06)
    assert r.counts == PairedCounts(both=0, only_population=200, only_baseline=200, neither=0)


def test_pairing_removes_the_shared_problem_difficulty():
    # Problems range from easy to hard for both arms alike; the population is 0.1 better on each. The paired
    # interval is then narrow around 0.1, whatever the spread of difficulty.
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0.0, 0.8, size=300)
    population = {0: {p: [float(difficulty[p]) + 0.1] for p in range(300)}}
    baseline = {0: {p: float(difficulty[p]) for p in range(300)}}
    r = paired_bootstrap(population, baseline, n_resamples=1000)
    assert r.low == pytest.approx(0.1, abs=1e-9) and r.high == pytest.approx(0.1, abs=1e-9)


def test_paired_counts_are_over_members():
    population = {0: {"a": [1, 1], "b": [1, 0], "c": [0, 0]}}
    baseline = {0: {"a": 1, "b": 0, "c": 1}}
    r = paired_bootstrap(population, baseline, n_resamples=100)
    # a: two members solve with the baseline; b: one alone, one with neither; c: the baseline alone, twice.
    assert r.counts == PairedCounts(both=2, only_population=1, only_baseline=2, neither=1)
    assert r.counts.total == 6
    assert r.difference == pytest.approx(((1 - 1) + (0.5 - 0) + (0 - 1)) / 3)


def test_a_single_number_is_read_as_the_members_mean():
    r = paired_bootstrap({0: {"a": 0.75}}, {0: {"a": 0.25}}, n_resamples=10)
    assert r.difference == 0.5 and r.counts == PairedCounts(0, 1, 0, 0)


def test_the_same_seed_gives_the_same_interval_and_another_seed_another():
    rng = np.random.default_rng(1)
    population = {0: {p: [float(x)] for p, x in enumerate(rng.integers(0, 2, 50))}}
    baseline = {0: {p: float(x) for p, x in enumerate(rng.integers(0, 2, 50))}}
    a = paired_bootstrap(population, baseline, n_resamples=500, seed=3)
    b = paired_bootstrap(population, baseline, n_resamples=500, seed=3)
    c = paired_bootstrap(population, baseline, n_resamples=500, seed=4)
    assert (a.low, a.high) == (b.low, b.high)
    assert (a.low, a.high) != (c.low, c.high)
    assert a.low <= a.difference <= a.high


def test_unpaired_inputs_are_refused_with_the_problem_named():
    with pytest.raises(ValueError, match="different problems"):
        paired_bootstrap({0: {"a": [1.0], "b": [0.0]}}, {0: {"a": 1.0}})
    with pytest.raises(ValueError, match="different seeds"):
        paired_bootstrap({0: {"a": [1.0]}}, {1: {"a": 1.0}})
    with pytest.raises(ValueError, match="no member values"):
        paired_bootstrap({0: {"a": []}}, {0: {"a": 1.0}})


def test_slope_of_exact_linear_data_is_exact_with_a_zero_width_interval():
    # Metric = 3 - 2e-12 * compute, every program of a step at the line: resampling programs changes nothing.
    steps = [(c, [3.0 - 2e-12 * c] * 5) for c in (0.0, 1e11, 2.5e11, 4e11, 7e11)]
    t = trend({0: steps}, n_resamples=500)
    assert t.slope == pytest.approx(-2e-12, rel=1e-9)
    assert t.intercept == pytest.approx(3.0, rel=1e-9)
    assert t.high - t.low == 0.0
    assert t.low == pytest.approx(t.slope, rel=1e-9)
    assert t.resampled == "programs" and t.n_steps == 5 and t.n_seeds == 1


def test_slope_over_seeds_of_one_line_is_exact_and_seeds_are_the_unit():
    line = {s: [(c, [1.0 + 0.5 * c, 1.0 + 0.5 * c]) for c in (0.0, 1.0, 2.0 + s)] for s in range(4)}
    t = trend(line, n_resamples=300)
    assert t.slope == pytest.approx(0.5) and t.low == pytest.approx(0.5) and t.high == pytest.approx(0.5)
    assert t.resampled == "t over seeds" and t.n_seeds == 4 and t.n_steps == 12
    assert t.per_seed == {s: pytest.approx(0.5) for s in range(4)}


def test_three_seeds_give_the_t_interval_over_their_slopes_not_their_range():
    # Three seeds on one compute grid with slopes 1, 2 and 3 (per 1e12): a bootstrap over the seeds gave exactly
    # [1, 3], the range of the three, whatever their spread. The t interval: mean 2, sd 1, t_{0.975, 2} = 4.3027, so
    # 2 ± 4.3027 / sqrt(3) = [-0.4841, 4.4841].
    grid = [0.0, 1e12, 2e12, 3e12]
    series = {s: [(c, [0.5 + (s + 1) * c / 1e12]) for c in grid] for s in range(3)}
    t = trend(series, seed=5)
    assert t.slope == pytest.approx(2e-12) and t.seed_mean == pytest.approx(2e-12)
    assert t.per_seed == {0: pytest.approx(1e-12), 1: pytest.approx(2e-12), 2: pytest.approx(3e-12)}
    assert t.low == pytest.approx(-0.48414e-12, rel=1e-4) and t.high == pytest.approx(4.48414e-12, rel=1e-4)
    assert t.resampled == "t over seeds"


def test_five_seeds_or_more_are_bootstrapped_as_whole_seeds():
    # Five seeds with slopes 1..5 on one grid: a resample's pooled slope is the mean of the five slopes it drew, so
    # it lies in [1, 5] and the interval sits inside the range, around 3.
    grid = [0.0, 1.0, 2.0]
    series = {s: [(c, [(s + 1) * c]) for c in grid] for s in range(5)}
    t = trend(series, n_resamples=4000, seed=1)
    assert t.resampled == "seeds" and t.slope == pytest.approx(3.0)
    assert 1.0 < t.low < 3.0 < t.high < 5.0


def test_slope_interval_widens_with_the_spread_of_programs_and_covers_the_truth():
    rng = np.random.default_rng(2)
    steps = [(float(c), list(1.0 + 0.1 * c + rng.normal(0.0, 1.0, 40))) for c in range(30)]
    t = trend({0: steps}, n_resamples=2000)
    # The per-step mean has standard deviation 1/sqrt(40); the slope's is that / sqrt(sum (c - mean)^2).
    c = np.arange(30.0)
    se = (1.0 / math.sqrt(40)) / math.sqrt(((c - c.mean()) ** 2).sum())
    assert (t.high - t.low) == pytest.approx(2 * 1.96 * se, rel=0.25)
    assert t.low < 0.1 < t.high


def test_steps_without_values_are_left_out_and_one_compute_value_is_an_error():
    t = trend({0: [(0.0, [1.0]), (1.0, []), (2.0, [3.0])]}, n_resamples=10)
    assert t.slope == pytest.approx(1.0) and t.n_steps == 2
    with pytest.raises(ValueError, match="two or more compute values"):
        trend({0: [(5.0, [1.0, 2.0]), (5.0, [3.0])]})
