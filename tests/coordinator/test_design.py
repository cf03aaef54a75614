"""The pilot's step costs and the design's hours and power, on numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from coordinator.experiment.design import JOBS_SPEEDUP, answers_per_seed, design_table
from coordinator.experiment.pilot import step_costs
from populora.analysis.power import minimal_detectable_difference


def test_step_costs_are_the_means_of_the_training_steps():
    rows = [{"step": 0, "step_seconds": 60.0, "compute_cumulative": {"budget_flops": 1e11}},
            {"step": 1, "step_seconds": 100.0, "seconds": {"propose": 40.0, "update": 60.0},
             "compute_cumulative": {"budget_flops": 1.01e13}},
            {"step": 2, "step_seconds": 300.0, "seconds": {"propose": 100.0, "update": 200.0},
             "compute_cumulative": {"budget_flops": 3.01e13}}]
    c = step_costs(rows)
    assert c["steps"] == 2 and c["seconds_per_step"] == 200.0 and c["flops_per_step"] == pytest.approx(1.5e13)
    assert c["flops_per_second"] == pytest.approx(3e13 / 400) and c["phase_seconds"] == {"propose": 70.0, "update": 130.0}
    assert step_costs(rows[:1]) == {"steps": 0}


def test_answers_hours_and_power_of_a_design():
    # five versions (4 students + the baseline), four checkpoints, the curve on 100 of 800 problems:
    # 5 x 800 at the end + 5 x 3 x 100 before it
    assert answers_per_seed(5, 4, 800, 100) == 5500
    assert answers_per_seed(5, 4, 800, 0) == 16000 and answers_per_seed(5, 1, 80, 100) == 400
    pilot = {"training": {"arms": {"population": {"steps": 2, "flops_per_step": 1e13, "seconds_per_step": 200.0},
                                   "baseline": {"steps": 2, "flops_per_step": 2e12, "seconds_per_step": 50.0}}},
             "scoring": {"benchmarks": {"cruxeval-o": {"seconds_per_answer": 1.0}}}}
    [row] = design_table(pilot, {"cruxeval-o": 800}, [5], [1e14], students=4, checkpoints=4, curve=100, sd_seed=0.02,
                         sd_problem={"cruxeval-o": 0.3}, jobs=1)
    # 10 population steps of 200 s and 50 baseline steps of 50 s a seed; 5500 answers of 1 s a seed
    assert row["steps"] == {"population": 10, "baseline": 50}
    assert row["training_hours"] == pytest.approx(5 * (2000 + 2500) / 3600)
    assert row["scoring_hours"] == pytest.approx(5 * 5500 / 3600)
    assert row["stretches_of_2_5_hours"] == math.ceil(row["hours"] / 2.5)
    assert row["mdd"]["cruxeval-o"] == pytest.approx(minimal_detectable_difference(5, 640, 0.02, 0.3))
    [par] = design_table(pilot, {"cruxeval-o": 800}, [5], [1e14], students=4, checkpoints=4, curve=100, sd_seed=0.02,
                         sd_problem={"cruxeval-o": 0.3}, jobs=3)
    assert par["hours"] == pytest.approx(row["hours"] / JOBS_SPEEDUP)
