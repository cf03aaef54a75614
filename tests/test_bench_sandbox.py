"""bench.sandbox at its smallest setting: a few jobs past the warm-up through the zygote backend, two through the
subprocess one, gVisor left out; the corpora each once; every figure from the run and its stages on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.sandbox import WARMUP_JOBS
from tests.conftest import zygote_or_skip

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_sandbox_bench_on_a_few_jobs_without_gvisor():
    zygote_or_skip().close()  # the zygote backend runs here, or the test is skipped (failed under CI)
    jobs = WARMUP_JOBS + 16
    proc = subprocess.run([sys.executable, "-m", "bench.sandbox", "--json", "--jobs", str(jobs), "--subprocess-jobs",
                           "2", "--gvisor-jobs", "0", "--workers", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["jobs"] == jobs and out["workers"] == 1 and out["subprocess_jobs"] == 2
    assert out["humaneval_ok"] == out["humaneval_jobs"] == jobs // 2  # the canonical solutions pass their tests
    assert out["execs_per_s"] > 0 and out["p99_ms"] >= out["p50_ms"] > 0 and out["pool_execs_per_s"] > 0
    assert out["hostile_contained"] == out["hostile_total"] > 0
    assert out["reward_hacks_blocked"] == out["reward_hacks_total"] > 0
    assert out["cross_job_contained"] == out["cross_job_total"] > 0
    assert out["gvisor_execs_per_s"] is None and "--gvisor-jobs 0" in out["gvisor_error"]
    assert "bench.sandbox: stage = 6/6 an unisolated warm pool" in proc.stderr


def test_a_run_smaller_than_its_warm_up_is_refused(capsys):
    from bench import sandbox

    with pytest.raises(SystemExit):
        sandbox.main(["--jobs", str(WARMUP_JOBS)])
    assert "--jobs must be over" in capsys.readouterr().err
