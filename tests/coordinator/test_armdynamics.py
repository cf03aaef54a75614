"""An arm run's dynamics from its metrics rows and stored adapters (spec 11), on tiny inputs."""

from __future__ import annotations

import pytest
import torch

from coordinator.experiment.armdynamics import arm_dynamics, complexity_values, step_dynamics
from populora.store import ArtifactStore, lora_config_dict

KEY = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"


def _row(step, flops, programs, rates):
    return {"step": step, "compute_cumulative": {"budget_flops": flops},
            "complexity": {"ast_depth": {"mean": float(step)}},
            "valid_programs": [{"teacher": t, "program": p, "ast_depth": step} for t, p in programs],
            "student_solve_rate": rates,
            "population": {"T0": {"role": "teacher", "version": step}, "T1": {"role": "teacher", "version": step}}}


ROWS = [{"step": 0, "compute_cumulative": {"budget_flops": 5}},
        _row(1, 10, [("T0", "def f(x):\n    return x + 1"), ("T1", "def f(z):\n    return z + 7")], {"S0": 0.2}),
        _row(2, 20, [("T0", "def f(y):\n    return y - 3"), ("T1", "def f(x):\n    return [x]")], {"S0": 0.8}),
        _row(3, 30, [("T0", "def f(x):\n    return x + 1")], {"S0": 0.1})]


def test_step_dynamics_coverage_behaviour_and_oscillation():
    d = step_dynamics(ROWS)
    assert d["steps"] == [1, 2, 3] and d["flops"] == [10, 20, 30]
    assert [c["distinct_shapes"] for c in d["coverage"]] == [1, 3, 3]  # x + 1 and z + 7 share one shape
    assert d["coverage"][1]["new_shapes"] == 2 and d["coverage"][2]["new_shapes"] == 0
    assert d["oscillation"] == {"S0": 1.0}  # up then down: the one possible change
    assert d["behavioural_diversity"][0] == 0.0  # both teachers' programs have the same shape at step 1
    assert d["behavioural_diversity"][1] == pytest.approx(2 / 3)  # {+, -} against {+, [x]}
    assert complexity_values(ROWS, "ast_depth") == [(10.0, [1, 1]), (20.0, [2, 2]), (30.0, [3])]


def test_weight_diversity_from_the_stored_factors(tmp_path):
    store = ArtifactStore(tmp_path)
    config = lora_config_dict(2, 4.0, ["q_proj"])
    a = torch.randn(2, 8)
    for step in (1, 2, 3):
        b0 = torch.randn(8, 2)
        store.save("T0", {KEY.format("A"): a, KEY.format("B"): b0}, config, version=step)
        store.save("T1", {KEY.format("A"): a, KEY.format("B"): b0 if step == 1 else -b0}, config, version=step)
    d = arm_dynamics(ROWS, tmp_path, weights=True)
    w = {x["step"]: x for x in d["weight_diversity"]}
    assert w[1]["cosine"] == pytest.approx(1.0) and w[1]["distance"] == pytest.approx(0.0, abs=1e-6)
    assert w[2]["cosine"] == pytest.approx(-1.0) and w[2]["distance"] == pytest.approx(2.0)
    assert arm_dynamics(ROWS, tmp_path, weights=False)["weight_diversity"] == []
