"""Each step's phases against the machine's ceiling (coordinator/record/efficiency.py): the work of a step's records
counted by populora/analysis/work.py (tested by hand in tests/analysis/test_work.py), each phase's at the ceiling of
its threads, the charged FLOPs beside it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coordinator.record.efficiency import UpdateSettings, efficiency, phase_threads, run_ceilings
from populora.analysis.roofline import Ceiling, compute_seconds, step_seconds
from populora.analysis.work import Precision, Shapes, decode_bytes, decode_step, prompt_pass, update
from populora.config import load_config
from populora.records import (
    Accounted,
    Attempt,
    Checked,
    Proposal,
    Updated,
    UpdateStats,
    Usage,
    Validated,
    Verdict,
)

SHAPES = Shapes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=1000, rank=4,
                targets=("q_proj", "v_proj"))
# every row trained (the entropy bonus), one epoch, no checkpointing
SETTINGS = UpdateSettings(load_config(env=False).rewards, entropy_coef=0.01)
UPDATE_ROWS = {"t": [(500, 1), (500, 3)], "s": [(100, 2)]}
UPDATE_FLOPS = sum(update(SHAPES, rows).useful for rows in UPDATE_ROWS.values())
# one thread: the update's useful FLOPs take exactly 12 s; two threads: 10 GFLOP/s, 1 GB/s
PEAKS = {1: {"gflops": {"float32": UPDATE_FLOPS / 12 / 1e9}, "bandwidth_gb_s": 1.0},
         2: {"gflops": {"float32": 10.0}, "bandwidth_gb_s": 1.0}}
CEILINGS = {"threads": {"propose": 2, "solve": 2, "update": 1, "step": 2}, "precision": Precision(), "peaks": PEAKS,
            "shapes": SHAPES, "update": SETTINGS}
TWO = Ceiling({"float32": 10e9}, 1e9)


def _record():
    # two proposals of one teacher on one 500-token prompt (one prompt pass), answers of 1 and 3 tokens; one attempt
    proposals = [Proposal(f"p{i}", "code_o", "t", "m", 0, "", [7] * 500, [1] * n) for i, n in enumerate((1, 3))]
    attempts = [Attempt("a", "p0", "s", "m", "", [7] * 100, [1] * 2)]
    phases = {"propose": Usage(4, 0, 0, 1000, 2 * 10**8 * 1004), "solve": Usage(2, 0, 0, 100, 2 * 10**8 * 102),
              "update": Usage(0, 1106, 0, 0, 6 * 10**8 * 1106)}
    spent = Accounted({}, sum(phases.values(), Usage()), phases)
    return SimpleNamespace(proposed=SimpleNamespace(proposals=proposals), solved=SimpleNamespace(attempts=attempts),
                           validated=Validated({p: Verdict(False, "no_answer") for p in ("p0", "p1")}, None),
                           checked=Checked({"a": "correct"}, {"p0": 1.0}),
                           updated=Updated({}, {"t": UpdateStats(), "s": UpdateStats()}), spent=spent)


def _propose_least(shapes=SHAPES, precision=Precision(), ceiling=TWO) -> float:
    # the shared prompt once, then two decode steps of the 3-token answer at contexts 501 and 502
    steps = [step_seconds(decode_step(shapes, [c]), decode_bytes(shapes, [c], [shapes.rank], precision), precision,
                          ceiling) for c in (501, 502)]
    return compute_seconds(prompt_pass(shapes, 500), precision, ceiling) + sum(steps)


def test_each_phase_s_useful_work_against_the_ceiling_of_its_threads():
    row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": 12.0, "check": 1.0}, "step_seconds": 16.0}
    e = efficiency(_record(), row, CEILINGS)["efficiency"]
    p, s, u = e["phases"]["propose"], e["phases"]["solve"], e["phases"]["update"]
    propose = prompt_pass(SHAPES, 500) + decode_step(SHAPES, [501]) + decode_step(SHAPES, [502])
    assert p["useful_flops"] == propose.useful and p["flops"] == 2 * 10**8 * 1004  # the charged FLOPs, as they were
    assert p["least_seconds"] == pytest.approx(_propose_least())
    assert p["roofline_fraction"] == pytest.approx(_propose_least() / 2.0)
    assert p["mfu"] == pytest.approx(propose.useful / 10e9 / 2.0)
    assert p["gflops_per_s"] == pytest.approx(propose.useful / 2.0 / 1e9)
    # the attempt's 2-token answer: the prompt pass and one decode step at context 101
    assert s["useful_flops"] == (prompt_pass(SHAPES, 100) + decode_step(SHAPES, [101])).useful
    # the update on one thread: every row's forward and backward, all of its 12 s; the chunked head's recomputation
    # beside it
    assert u["threads"] == 1 and u["useful_flops"] == UPDATE_FLOPS
    assert u["mfu"] == pytest.approx(1.0) and u["roofline_fraction"] == pytest.approx(1.0)
    assert u["recomputed_flops"] == sum(update(SHAPES, rows).recomputed for rows in UPDATE_ROWS.values()) > 0
    step = e["step"]
    assert step["flops"] == sum(x.flops for x in _record().spent.phases.values())
    assert step["useful_flops"] == p["useful_flops"] + s["useful_flops"] + u["useful_flops"]
    assert step["mfu"] == pytest.approx(step["useful_flops"] / 10e9 / 16.0)
    assert step["least_seconds"] == pytest.approx(p["least_seconds"] + s["least_seconds"] + 12.0)
    assert e["dtype"] == "float32" and e["peaks"]["2"] == {"gflops": 10.0, "bandwidth_gb_s": 1.0,
                                                          "gflops_by_dtype": {"float32": 10.0}}


def test_rows_the_update_skips_are_not_its_work():
    # without the entropy bonus each adapter's rows have equal rewards: zero advantage, no pass, no work
    ceilings = {**CEILINGS, "update": UpdateSettings(SETTINGS.rewards)}
    row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": 12.0}, "step_seconds": 15.0}
    assert efficiency(_record(), row, ceilings)["efficiency"]["phases"]["update"]["useful_flops"] == 0
    # epochs pass over the rows again; checkpointing recomputes, and the useful work stays
    twice = {**CEILINGS, "update": UpdateSettings(SETTINGS.rewards, 0.01, epochs=2, checkpointing=True)}
    u = efficiency(_record(), row, twice)["efficiency"]["phases"]["update"]
    assert u["useful_flops"] == 2 * UPDATE_FLOPS
    assert u["recomputed_flops"] == 2 * sum(update(SHAPES, r, checkpointing=True).recomputed
                                            for r in UPDATE_ROWS.values())


def test_bfloat16_products_are_measured_against_the_bfloat16_peak_and_their_two_byte_weights():
    peaks = {t: {"gflops": {"float32": p["gflops"]["float32"], "bfloat16": 2 * p["gflops"]["float32"]},
                 "bandwidth_gb_s": 1.0} for t, p in PEAKS.items()}
    low = Precision(base="bfloat16")
    ceilings = {**CEILINGS, "peaks": peaks, "precision": low}
    row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": 12.0}, "step_seconds": 15.0}
    e = efficiency(_record(), row, ceilings)["efficiency"]
    two = Ceiling({"float32": 10e9, "bfloat16": 20e9}, 1e9)
    assert e["dtype"] == "bfloat16" and e["peaks"]["2"]["gflops"] == 20.0
    assert e["phases"]["propose"]["least_seconds"] == pytest.approx(_propose_least(precision=low, ceiling=two))
    assert e["phases"]["propose"]["least_seconds"] < efficiency(_record(), row, CEILINGS)["efficiency"]["phases"][
        "propose"]["least_seconds"]


def test_each_adapter_s_work_at_its_own_rank():
    row = {"seconds": {"propose": 2.0, "solve": 1.0, "update": 12.0}, "step_seconds": 15.0}
    e = efficiency(_record(), row, CEILINGS, ranks={"t": 8, "s": 4})["efficiency"]
    assert e["phases"]["update"]["useful_flops"] == (update(SHAPES, UPDATE_ROWS["t"], rank=8).useful
                                                     + update(SHAPES, UPDATE_ROWS["s"]).useful)
    assert e["phases"]["solve"]["useful_flops"] == (prompt_pass(SHAPES, 100) + decode_step(SHAPES, [101])).useful


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
    assert "2 threads: 10 GFLOP/s, 1.0 GB/s" in page
    assert "Not measured" in efficiency_table([{"step": 0}, {"step": 1}])


def test_a_run_s_ceilings_hold_its_shapes_precision_and_update_settings():
    from populora.lora.prepack import bfloat16_native

    cfg = load_config(preset="cpu-tiny", env=False)
    cfg.generation.threads, cfg.trainer.threads = 1, 1
    cfg.model.base_matmul = "bfloat16"
    got = run_ceilings(cfg)  # a short measurement in this process, merged into the machine's best known
    assert got["shapes"] == Shapes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16,
                                   vocab=151936, rank=cfg.lora.rank, targets=tuple(cfg.lora.target_modules))
    # bfloat16 products where the cores have them, measured against their own peak; float32 for the rest
    assert got["precision"] == Precision(base="bfloat16" if bfloat16_native() else "float32", model="float32")
    assert set(got["peaks"]) == {1} and got["peaks"][1]["gflops"]["float32"] > 0
    assert got["update"].checkpointing == cfg.trainer.activation_checkpointing
