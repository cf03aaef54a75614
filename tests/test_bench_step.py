"""bench.step's figures from metrics rows, and `--before REV`: a commit's tree checked out beside this one, the same
seeded step run by both, the worktree removed afterwards."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from bench.step import fractions
from bench.step_before import ROOT, checkout, compare, remove, side_figures


def _row(step, update_s, loss, eff=None):
    row = {"step": step, "seconds": {"propose": 2.0, "update": update_s}, "step_seconds": 2.0 + update_s,
           "compute": {"flops": 100}, "tokens": {"propose": 5, "solve": 3}, "valid_rate": 0.5, "solve_rate": None,
           "outcomes": {"ok": 1}, "updates": {"a": {"loss": loss}}}
    if eff is not None:
        row["efficiency"] = eff
    return row


def _eff(mfu):
    phase = {"mfu": mfu, "roofline_fraction": mfu / 2}
    return {"dtype": "float32", "peaks": {"2": {"gflops": 100.0, "bandwidth_gb_s": 10.0}},
            "phases": {"update": phase}, "step": {"mfu": mfu, "flops": 100, "seconds": 4.0}}


def test_a_side_s_figures_are_means_over_its_measured_steps():
    got = side_figures([_row(1, 2.0, 0.25), _row(2, 4.0, 0.5)])
    assert got["step_s"] == 5.0 and got["phase_s"] == {"propose": 2.0, "update": 3.0} and got["flops"] == 100
    assert got["outputs"][1] == {"tokens": {"propose": 5, "solve": 3}, "valid_rate": 0.5, "solve_rate": None,
                                 "outcomes": {"ok": 1}, "losses": [0.5]}


def test_fractions_are_means_over_the_steps_that_measured_them():
    got = fractions([_row(1, 2.0, 0.1, _eff(0.2)), _row(2, 2.0, 0.1, _eff(0.4)), _row(3, 2.0, 0.1)])
    assert got["step_mfu"] == pytest.approx(0.3)
    assert got["phase_fractions"] == {"update": {"mfu": pytest.approx(0.3), "roofline_fraction": pytest.approx(0.15)}}
    assert fractions([_row(1, 2.0, 0.1)]) == {}


def test_a_commit_s_tree_is_checked_out_beside_this_one_and_removed():
    where = checkout("HEAD")
    try:
        assert where.is_dir() and not where.is_relative_to(ROOT)
        assert (where / "coordinator" / "train.py").exists() and list((where / "populora" / "pb").glob("*_pb2.py"))
    finally:
        remove(where)
    assert not where.exists()
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert str(where) not in listed


@pytest.mark.slow
def test_the_same_seeded_step_on_both_trees_gives_the_same_outputs():
    args = SimpleNamespace(before="HEAD", preset="cpu-tiny", rounds=1, steps=1, set=["generation.threads=1", "trainer.threads=1"])
    out = compare(args, [])
    assert out["before_step_s"] > 0 and out["after_step_s"] > 0
    assert out["step_speedup_vs_before"] == pytest.approx(out["before_step_s"] / out["after_step_s"])
    assert out["step_speedup_rounds"] and out["same_outputs"] is True  # the tiny model's step, either tree
    assert "after_step_mfu" in out


@pytest.mark.slow
def test_both_arms_of_the_tiny_preset_s_step_with_their_fractions():
    import json
    import sys

    proc = subprocess.run([sys.executable, "-m", "bench.step", "--json", "--preset", "cpu-tiny", "--model", "tiny",
                           "--steps", "1", "--proposals", "2", "--set", "generation.threads=1",
                           "--set", "trainer.threads=1"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["preset"] == "cpu-tiny" and out["population_step_s"] > 0 and out["baseline_step_s"] > 0
    assert out["wall_ratio"] == pytest.approx(out["population_step_s"] / out["baseline_step_s"], rel=1e-2)
    # the step against the peak measured in the run's process: its phases' useful executed FLOPs
    assert out["step_mfu"] > 0 and out["baseline_step_mfu"] > 0 and out["dtype"] == "float32"
    # the tiny model's proposals may all be invalid (nothing to solve), but every step proposes
    propose = out["population_phase_fractions"]["propose"]
    assert propose["mfu"] > 0 and propose["roofline_fraction"] > 0
    assert "bench.step: arm = population" in proc.stderr and "bench.step: baseline_step_s" in proc.stderr
