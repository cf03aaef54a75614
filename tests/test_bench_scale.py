"""bench.scale's pure parts (the population it places, the rescale fraction, efficiency, the weights comparison), and the
bench end to end at its smallest setting on the tiny model."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
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


@pytest.mark.slow
def test_the_bench_at_its_smallest_on_the_tiny_model():
    proc = subprocess.run([sys.executable, "-m", "bench.scale", "--json", "--model", "tiny", "--adapters", "2",
                           "--rollouts", "2", "--tokens", "16", "--rank", "4", "--repeats", "1", "--tls-rounds", "1",
                           "--new-tokens", "8"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("updates_per_s_1", "updates_per_s_2", "tokens_per_s_1", "tokens_per_s_2", "trainer_scale_efficiency",
                "inference_scale_efficiency", "tls_step_ratio"):
        assert out[key] > 0, key
    assert isinstance(out["same_result"], bool) and out["adapters"] == 2  # a finding, not a condition
    assert '{"trainer_scale_efficiency":' in proc.stderr  # each figure on stderr as it is taken
