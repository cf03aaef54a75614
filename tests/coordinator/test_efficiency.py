"""Each step's phases against the machine's ceiling (coordinator/record/efficiency.py), on a step worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coordinator.record.efficiency import efficiency, phase_threads, run_ceilings
from coordinator.run.modelsize import ModelSize
from populora.config import load_config
from populora.records import Accounted, Attempt, Proposal, Usage

SIZE = ModelSize(base=10**8, adapter=0)  # N = 1e8, weights 4e8 bytes in float32
CEILINGS = {"threads": {"propose": 2, "solve": 2, "update": 1, "step": 2}, "dtype": "float32", "size": SIZE,
            "peaks": {1: {"gflops": 50.0, "bandwidth_gb_s": 10.0}, 2: {"gflops": 100.0, "bandwidth_gb_s": 10.0}}}


def _record():
    # two proposals of one teacher on one 500-token prompt (one prompt pass), answers of 1 and 3 tokens; one attempt
    proposals = [Proposal(f"p{i}", "code_o", "t", "m", 0, "", [7] * 500, [1] * n) for i, n in enumerate((1, 3))]
    attempts = [Attempt("a", "p0", "s", "m", "", [7] * 100, [1] * 2)]
    phases = {"propose": Usage(4, 0, 0, 1000, 2 * 10**8 * 1004), "solve": Usage(2, 0, 0, 100, 2 * 10**8 * 102),
              "update": Usage(0, 1000, 0, 0, 6 * 10**8 * 1000)}
    spent = Accounted({}, sum(phases.values(), Usage()), phases)
    return SimpleNamespace(proposed=SimpleNamespace(proposals=proposals), solved=SimpleNamespace(attempts=attempts),
                           spent=spent)


def test_each_phase_against_the_ceiling_of_its_threads():
    row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": 12.0, "check": 1.0}, "step_seconds": 16.0}
    e = efficiency(_record(), row, CEILINGS)["efficiency"]
    p, s, u = e["phases"]["propose"], e["phases"]["solve"], e["phases"]["update"]
    # propose: one pass of the shared 500-token prompt at 100 GFLOP/s (1 s), then 2 decode steps of one row, each
    # reading 4e8 bytes at 10 GB/s (0.04 s); charged 2N x 1004 tokens over 2 s
    assert p["least_seconds"] == pytest.approx(1.0 + 2 * 0.04)
    assert p["roofline_fraction"] == pytest.approx(1.08 / 2.0)
    assert p["mfu"] == pytest.approx(2e8 * 1004 / 2.0 / 100e9)
    assert s["least_seconds"] == pytest.approx(2e8 * 100 / 100e9 + 0.04)
    # the update runs on one thread: 6N x 1000 tokens at 50 GFLOP/s = 12 s, all of its 12 s
    assert u["threads"] == 1 and u["mfu"] == pytest.approx(1.0) and u["roofline_fraction"] == pytest.approx(1.0)
    step = e["step"]
    assert step["flops"] == sum(x.flops for x in _record().spent.phases.values())
    assert step["mfu"] == pytest.approx(step["flops"] / 16.0 / 100e9)
    assert step["least_seconds"] == pytest.approx(p["least_seconds"] + s["least_seconds"] + 12.0)


def test_an_overlapped_step_is_measured_over_its_window():
    row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": 12.0}, "step_seconds": 15.0, "window_s": 10.0}
    assert efficiency(_record(), row, CEILINGS)["efficiency"]["step"]["seconds"] == 10.0


def test_no_ceiling_no_efficiency():
    assert efficiency(_record(), {"seconds": {}, "step_seconds": 0.0}, None) == {}
    cfg = load_config(preset="cpu-tiny", env=False)
    cfg.run.deployment = "distributed"
    assert run_ceilings(cfg) is None  # the phases ran on machines this process cannot measure


def test_phase_threads_follow_the_settings():
    from populora.models import allowed_cpus

    cfg = load_config(preset="cpu-tiny", env=False)
    cfg.generation.threads, cfg.trainer.threads = -1, 1
    got = phase_threads(cfg)
    assert got["propose"] == got["solve"] == len(allowed_cpus()) and got["update"] == 1
    assert got["step"] == max(got["propose"], 1)


def test_the_report_table_gives_the_means_over_the_steps():
    from coordinator.record.efficiency import efficiency_table

    rows = [{"step": 0}]
    for update_s in (12.0, 24.0):
        row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": update_s}, "step_seconds": 3.0 + update_s}
        rows.append({**row, **efficiency(_record(), row, CEILINGS)})
    page = efficiency_table(rows)
    # the update: 12 of 12 s, then 12 of 24 s; its mean fraction 0.75 over the two steps, on one thread
    assert "<tr><td>update</td><td>1</td><td>18.0</td><td>12.0</td>" in page and "<td>0.75</td></tr>" in page
    assert "2 threads: 100 GFLOP/s, 10.0 GB/s" in page
    assert "Not measured" in efficiency_table([{"step": 0}, {"step": 1}])
