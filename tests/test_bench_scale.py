"""bench.scale's pure parts: the population it places, the rescale fraction, efficiency, the weights comparison."""

from __future__ import annotations

import math

import torch

from bench.scale import efficiency, moved_fraction, population, same_weights


def test_population_names_teachers_and_students():
    ids = population(8)
    assert len(set(ids)) == 8 and sum(".T" in a for a in ids) == sum(".S" in a for a in ids) == 4


def test_moved_fraction_is_what_a_third_replica_wins():
    ids = [f"run.S{i}" for i in range(2000)]
    assert moved_fraction(ids, 2, 2) == 0.0
    assert 0.28 < moved_fraction(ids, 2, 3) < 0.39
    assert moved_fraction(ids, 1, 2) > 0.4  # from one replica, a second takes about half


def test_efficiency():
    assert efficiency(10.0, 20.0) == 1.0 and efficiency(10.0, 16.0) == 0.8
    assert math.isnan(efficiency(0.0, 1.0))


def test_same_weights_within_tolerance():
    a = {"x": {"w": torch.zeros(3)}}
    assert same_weights(a, {"x": {"w": torch.full((3,), 5e-6)}})
    assert not same_weights(a, {"x": {"w": torch.full((3,), 2e-5)}})
    assert not same_weights(a, {"y": {"w": torch.zeros(3)}})


def test_the_tls_comparison_takes_turns_each_side_first_as_often():
    from bench.scale_tls import SIDES, _turns

    firsts = [_turns(k)[0] for k in range(4)]
    assert sorted(firsts) == sorted(SIDES * 2) and all(sorted(_turns(k)) == sorted(SIDES) for k in range(4))
