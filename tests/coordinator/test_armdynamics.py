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


def _dense(a, b):
    return b.to(torch.float64) @ a.to(torch.float64)


def _cos(x, y):
    return float((x * y).sum() / (torch.linalg.norm(x) * torch.linalg.norm(y)))


def test_changes_since_the_warm_start_and_since_birth_tell_mutation_from_training(tmp_path):
    """Every adapter rank 4 = the warm start's 2 components + 2 of its own. T0 is a founder (v1 = the warm start)
    whose training moved only the top half of the output rows; T1 is a child whose mutation moved the top half and
    whose training then moved only the bottom half. Since their birth they moved apart (cosine 0: top against
    bottom); since the warm start T1's change still holds its mutation, so they share the top half (cosine > 0)."""
    store = ArtifactStore(tmp_path)
    config = lora_config_dict(4, 4.0, ["q_proj"])
    gen = torch.Generator().manual_seed(0)
    a_w, b_w = torch.randn(2, 8, generator=gen), torch.randn(8, 2, generator=gen)
    top, bottom = torch.zeros(8, 2), torch.zeros(8, 2)
    top[:4], bottom[4:] = torch.randn(4, 2, generator=gen), torch.randn(4, 2, generator=gen)
    a_0 = a_1 = torch.randn(2, 8, generator=gen)  # one input side, so the top halves are the same direction

    def save(adapter, version, a_own, b_own):
        store.save(adapter, {KEY.format("A"): torch.cat([a_w, a_own]), KEY.format("B"): torch.cat([b_w, b_own], 1)},
                   config, version=version)

    save("r.warm", 1, a_0, torch.zeros(8, 2))
    save("r.T0", 1, a_0, torch.zeros(8, 2))
    save("r.T0", 2, a_0, top)
    save("r.T1", 1, a_1, top)  # born by a mutation along the top half
    save("r.T1", 2, a_1, top + bottom)  # trained along the bottom half
    rows = [{"step": 1, "compute_cumulative": {"budget_flops": 1},
             "population": {"r.T0": {"role": "teacher", "version": 2}, "r.T1": {"role": "teacher", "version": 2}}}]
    got = arm_dynamics(rows, tmp_path, weights=True, run_id="r")["weight_changes"]
    assert [g["step"] for g in got] == [1]
    # dense: the scaling alpha / r = 1 here
    warm_t0, warm_t1 = _dense(a_0, top), _dense(a_1, top + bottom)
    birth_t0, birth_t1 = _dense(a_0, top), _dense(a_1, bottom)
    assert got[0]["since_warm"]["cosine"] == pytest.approx(_cos(warm_t0, warm_t1), abs=1e-6)
    assert got[0]["since_warm"]["cosine"] > 0.3
    assert got[0]["since_birth"]["cosine"] == pytest.approx(_cos(birth_t0, birth_t1), abs=1e-9)
    assert got[0]["since_birth"]["cosine"] == pytest.approx(0.0, abs=1e-9)
    # the whole updates share the warm start's components and are nearly parallel
    assert arm_dynamics(rows, tmp_path, weights=True)["weight_diversity"][0]["cosine"] > 0.5
    # without a warm start in the store the part since the warm start is None, the part since birth is kept
    no_warm = arm_dynamics(rows, tmp_path, weights=True, run_id="other")["weight_changes"][0]
    assert no_warm["since_warm"] is None and no_warm["since_birth"]["cosine"] == pytest.approx(0.0, abs=1e-9)
