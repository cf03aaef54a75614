"""bench.eval at its smallest setting on the tiny model, end to end: two adapters on one HumanEval problem, batched
and one at a time, a few canonical solutions through the sandbox, every figure from the run and its stages on
stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import zygote_or_skip

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_eval_bench_on_one_problem_and_two_adapters():
    zygote_or_skip().close()  # the preset's sandbox backend runs here, or the test is skipped (failed under CI)
    proc = subprocess.run([sys.executable, "-m", "bench.eval", "--json", "--preset", "cpu-tiny", "--limit", "1",
                           "--adapters", "2", "--max-new-tokens", "4", "--canonical", "4", "--threads", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["model"] == "tiny" and out["adapters"] == 2 and out["problems"] == 1 and out["threads"] == 1
    assert out["problems_per_s_batched"] > 0 and out["problems_per_s_one_by_one"] > 0
    assert out["batch_gain"] == pytest.approx(out["problems_per_s_batched"] / out["problems_per_s_one_by_one"], rel=0.1)
    assert out["canonical_pass_rate"] == 1.0 and out["sandbox_jobs_per_s"] > 0  # 4 canonical solutions pass
    assert out["identical_scores"] is True and 0 < out["tokens_batched"] <= 2 * 4
    assert "bench.eval: stage = 1/4 4 canonical solutions" in proc.stderr
    assert "bench.eval: stage = 4/4 one adapter at a time" in proc.stderr
