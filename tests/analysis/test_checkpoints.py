"""Equal-compute checkpoints on hand-made compute curves."""

from __future__ import annotations

import pytest

from populora.analysis.checkpoints import ArmAtCheckpoint, equal_compute_checkpoints

# The population's steps cost 30 each, the baseline's 10 each; budget 120.
POPULATION = [(1, 30.0), (2, 60.0), (3, 90.0), (4, 120.0)]
BASELINE = [(s, 10.0 * s) for s in range(1, 13)]


def test_each_arm_is_taken_at_its_last_step_not_past_the_checkpoint():
    cps = equal_compute_checkpoints({"population": POPULATION, "baseline": BASELINE}, budget=100.0)
    assert [c.flops for c in cps] == [25.0, 50.0, 75.0, 100.0]
    first = cps[0]
    # 25: the population's first step (30) is already past it, the baseline stands at step 2 (20).
    assert first.arms["population"] == ArmAtCheckpoint(step=None, flops=None, gap=None)
    assert first.arms["baseline"] == ArmAtCheckpoint(step=2, flops=20.0, gap=5.0)
    assert first.difference("population", "baseline") is None and first.spread is None
    half = cps[1]  # 50: population step 1 (30, gap 20), baseline step 5 (50, gap 0: equal is not past)
    assert half.arms["population"] == ArmAtCheckpoint(1, 30.0, 20.0)
    assert half.arms["baseline"] == ArmAtCheckpoint(5, 50.0, 0.0)
    assert half.difference("population", "baseline") == -20.0
    assert half.difference("baseline", "population") == 20.0
    assert half.spread == 20.0
    last = cps[3]  # 100: population step 3 (90), baseline step 10 (100)
    assert (last.arms["population"].step, last.arms["baseline"].step) == (3, 10)
    assert last.arms["population"].gap == 10.0


def test_an_arm_that_starts_at_zero_compute_always_has_a_state():
    cps = equal_compute_checkpoints({"population": [(0, 0.0), *POPULATION]}, budget=120.0, fractions=(0.2,))
    assert cps[0].arms["population"] == ArmAtCheckpoint(0, 0.0, 24.0)


def test_a_step_a_rounding_error_above_the_budget_still_counts():
    arm = [(1, 0.1 + 0.2)]  # 0.30000000000000004
    cps = equal_compute_checkpoints({"a": arm}, budget=0.3, fractions=(1.0,))
    assert cps[0].arms["a"].step == 1


def test_bad_curves_and_budgets_are_refused():
    with pytest.raises(ValueError, match="never decrease"):
        equal_compute_checkpoints({"a": [(1, 5.0), (2, 4.0)]}, budget=10.0)
    with pytest.raises(ValueError, match="steps must increase"):
        equal_compute_checkpoints({"a": [(2, 1.0), (2, 4.0)]}, budget=10.0)
    with pytest.raises(ValueError, match="positive"):
        equal_compute_checkpoints({"a": POPULATION}, budget=0.0)
    with pytest.raises(ValueError, match="fraction"):
        equal_compute_checkpoints({"a": POPULATION}, budget=1.0, fractions=(1.5,))
