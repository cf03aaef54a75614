"""The pilot's step costs and the design's hours and power, on numbers worked out by hand."""

from __future__ import annotations

import json
import math
import shlex
import statistics
from pathlib import Path

import pytest

from coordinator.experiment.design import (
    ASSUMED_SD_PROBLEM_LOGPROB,
    ASSUMED_SD_SEED_LOGPROB,
    JOBS_SPEEDUP,
    TABLE_SECONDS,
    answers_per_seed,
    design_table,
    main,
    metric_table,
    parser,
    scoring_count,
)
from coordinator.experiment.pilot import problem_differences, step_costs
from populora.analysis.power import minimal_detectable_difference

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "docs/results/cpu-smol-experiment-4t4s-exp-3b67b335"


def test_step_costs_are_the_means_of_the_training_steps():
    rows = [{"step": 0, "step_seconds": 60.0, "compute_cumulative": {"budget_flops": 1e11}},
            {"step": 1, "step_seconds": 100.0, "seconds": {"propose": 40.0, "update": 60.0},
             "compute_cumulative": {"budget_flops": 1.01e13}},
            {"step": 2, "step_seconds": 300.0, "seconds": {"propose": 100.0, "update": 200.0},
             "compute_cumulative": {"budget_flops": 3.01e13}}]
    c = step_costs(rows)
    assert c["steps"] == 2 and c["seconds_per_step"] == 200.0 and c["flops_per_step"] == pytest.approx(1.5e13)
    assert c["flops_per_second"] == pytest.approx(3e13 / 400)
    assert c["phase_seconds"] == {"propose": 70.0, "update": 130.0}
    assert step_costs(rows[:1]) == {"steps": 0}


def test_answers_hours_and_power_of_a_design():
    # five versions (4 students + the baseline), four checkpoints, the curve on 100 of 800 problems:
    # 5 x 800 at the end + 5 x 3 x 100 before it; the warm start once on every problem adds 800
    assert answers_per_seed(5, 4, 800, 100) == 5500 and answers_per_seed(5, 4, 800, 100, start=1) == 6300
    assert answers_per_seed(5, 4, 800, 0) == 16000 and answers_per_seed(5, 1, 80, 100) == 400
    # a shard's: 11 versions on 30 problems, the curve (50) at 50% covering all 30: 5 x 30 + 30 + 5 x 30
    assert answers_per_seed(5, 2, 30, 50, start=1) == 330 and answers_per_seed(5, 2, 100, 50, start=1) == 850
    pilot = {"training": {"arms": {"population": {"steps": 2, "flops_per_step": 1e13, "seconds_per_step": 200.0},
                                   "baseline": {"steps": 2, "flops_per_step": 2e12, "seconds_per_step": 50.0}}}}
    metrics = {"cruxeval-o": {"problems": 800, "scoring": 640, "seconds": 1.0, "sd_seed": 0.02, "sd_problem": 0.3},
               "cruxeval-o-logprob": {"problems": 100, "scoring": 80, "seconds": 0.5, "sd_seed": 0.05,
                                      "sd_problem": 0.2}}
    [row] = design_table(pilot, metrics, [5], [1e14], students=4, checkpoints=4, curve=100, jobs=1)
    # 10 population steps of 200 s and 50 baseline steps of 50 s a seed; 5500 answers of 1 s and
    # 5 x 100 + 5 x 3 x 100 = 2000 likelihood rows of 0.5 s a seed
    assert row["steps"] == {"population": 10, "baseline": 50}
    assert row["shard"]["training_seconds"] == {"population": 2000.0, "baseline": 2500.0}
    assert row["shard"]["scoring_seconds"] == {"pass@1": 5500.0, "likelihood": 1000.0, "other": 0.0}
    assert row["training_hours"] == pytest.approx(5 * (2000 + 2500) / 3600)
    assert row["scoring_hours"] == pytest.approx(5 * 6500 / 3600) and row["hours"] == pytest.approx(5 * 11000 / 3600)
    assert row["mdd"]["cruxeval-o"] == pytest.approx(minimal_detectable_difference(5, 640, 0.02, 0.3))
    assert row["mdd"]["cruxeval-o-logprob"] == pytest.approx(minimal_detectable_difference(5, 80, 0.05, 0.2))
    [par] = design_table(pilot, metrics, [5], [1e14], students=4, checkpoints=4, curve=100, jobs=3)
    assert par["hours"] == pytest.approx(row["hours"] / JOBS_SPEEDUP)
    # idle: the pilot's seconds at its load, with the weight diversity of each population step and each arm's step 0,
    # over the slowdown; the warm start and a shard's fixed seconds on the scoring side
    [idle] = design_table(pilot, metrics, [5], [1e14], students=4, checkpoints=4, curve=100, slowdown=2.0,
                          diversity=100.0, step0={"population": 60.0, "baseline": 20.0}, overhead=30.0, start=1)
    assert idle["shard"]["training_seconds"] == {"population": (10 * 300 + 60) / 2, "baseline": (2500 + 20) / 2}
    assert idle["shard"]["scoring_seconds"] == {"pass@1": 6300.0, "likelihood": 1050.0, "other": 30.0}
    assert idle["shard"]["hours"] == pytest.approx((1530 + 1260 + 7380) / 3600)


def test_the_pilot_records_each_problems_likelihood_difference():
    class Result:
        def __init__(self, label, values):
            self.label, self.problems = label, [{"id": k, "value": v} for k, v in values.items()]

    results = [Result("warm start", {"a": -2.0, "b": -1.0}), Result("S0", {"a": -1.0, "b": -1.0}),
               Result("S1", {"a": -2.0, "b": -0.5}), Result("B0", {"a": -1.0, "b": -2.0})]
    arm_of = {"S0": "population", "S1": "population", "B0": "baseline"}
    assert problem_differences(results, arm_of) == [-0.5, 1.25]
    assert problem_differences(results, {}) == []


PILOT = {"overrides": [],
         "training": {"load": {"mean": 5.0},
                      "arms": {"population": {"steps": 2, "flops_per_step": 1e13, "seconds_per_step": 200.0},
                               "baseline": {"steps": 2, "flops_per_step": 2e12, "seconds_per_step": 50.0}}},
         "scoring": {"benchmarks": {"cruxeval-o": {"seconds_per_answer": 1.9, "pass_rate": {"a": 0.1, "b": 0.3}}}}}
HELD = {"sd_seed": 0.02, "sd_problem": 0.2, "n_seeds": 3, "problems": 254}


def metrics_of(*options: str, pilot: dict = PILOT) -> dict:
    return metric_table(parser().parse_args(["--pilot", "p.json", "--benchmarks", "heldout,cruxeval-o", *options]),
                        pilot, HELD)


def test_the_metrics_of_a_shard_design_and_where_their_numbers_come_from():
    m = metrics_of("--pass-problems", "30", "--likelihood-problems", "100")
    assert list(m) == ["heldout", "cruxeval-o", "heldout-logprob", "cruxeval-o-logprob"]
    # every fifth problem chooses the best member: 24 of 30 and 80 of 100 are compared
    assert [v["scoring"] for v in m.values()] == [24, 24, 80, 80]
    assert (m["heldout"]["sd_seed"], m["heldout"]["sd_problem"]) == (0.02, 0.2)
    assert m["cruxeval-o"]["sd_problem"] == pytest.approx(math.sqrt(2 * 0.2 * 0.8))  # the pilot's mean pass rate
    assert m["cruxeval-o"]["sd_seed"] == 0.02 and "assumed" in m["cruxeval-o"]["spread_from"]
    # the pilot ran without run.reproducible: the shards' costs are the documented table's, not its 1.9 s
    assert m["cruxeval-o"]["seconds"] == TABLE_SECONDS["pass"]["cruxeval-o"]
    assert m["heldout-logprob"]["seconds"] == TABLE_SECONDS["likelihood"]["heldout"]
    for b in ("heldout-logprob", "cruxeval-o-logprob"):
        assert (m[b]["sd_seed"], m[b]["sd_problem"]) == (ASSUMED_SD_SEED_LOGPROB, ASSUMED_SD_PROBLEM_LOGPROB)
        assert m[b]["spread_from"].count("ASSUMED") == 2
    given = metrics_of("--pass-problems", "30", "--likelihood-problems", "100", "--sd-seed-logprob", "0.01",
                       "--pass-seconds", "cruxeval-o=3")
    assert given["cruxeval-o-logprob"]["sd_seed"] == 0.01 and given["cruxeval-o"]["seconds"] == 3.0
    assert "seed part given" in given["cruxeval-o-logprob"]["spread_from"]
    # a pilot run as the shards run, with per-problem likelihood differences: its costs and its problem spread
    diffs = [0.1, -0.2, 0.3, 0.0]
    pilot = json.loads(json.dumps(PILOT))
    pilot["overrides"] = ["run.reproducible=true"]
    pilot["scoring"]["benchmarks"]["cruxeval-o"]["likelihood"] = {"seconds_per_row": 0.4, "differences": diffs}
    m = metrics_of("--pass-problems", "30", "--likelihood-problems", "100", pilot=pilot)
    assert m["cruxeval-o"]["seconds"] == 1.9 and m["cruxeval-o-logprob"]["seconds"] == 0.4
    assert m["cruxeval-o-logprob"]["sd_problem"] == pytest.approx(statistics.stdev(diffs))
    assert m["cruxeval-o-logprob"]["spread_from"].startswith("problem part measured")
    assert m["heldout-logprob"]["sd_problem"] == ASSUMED_SD_PROBLEM_LOGPROB  # the pilot did not score heldout


def test_more_problems_or_more_seeds_detect_smaller_differences():
    def mdd(seeds: int, *options: str) -> dict:
        [row] = design_table(PILOT, metrics_of(*options), [seeds], [6e13], students=4, checkpoints=2, curve=50)
        return row["mdd"]

    few, more = mdd(5, "--pass-problems", "30", "--likelihood-problems", "100"), mdd(
        5, "--pass-problems", "60", "--likelihood-problems", "200")
    assert all(more[b] < few[b] for b in few)
    # the problem part alone: with no seed-to-seed spread the MDD falls as 1/sqrt(problems)
    flat = ["--pass-problems", "30", "--sd-seed-logprob", "0", "--likelihood-problems"]
    assert mdd(5, *flat, "400")["heldout-logprob"] == pytest.approx(mdd(5, *flat, "100")["heldout-logprob"] / 2)
    five, ten = few, mdd(10, "--pass-problems", "30", "--likelihood-problems", "100")
    assert all(ten[b] < five[b] for b in five)
    assert "heldout-logprob" not in mdd(5, "--pass-problems", "30")  # no likelihood asked: no such metric


def test_removed_templates_leave_the_comparison(tmp_path):
    ids = [f"heldout/{i}/code_o/{'reverse_rec' if i % 3 == 0 else 'gcd'}" for i in range(10)]
    # the scoring problems are the eight not at positions 4 and 9; of them 0, 3 and 6 are reverse_rec's
    assert scoring_count(10, ids, ("reverse_rec",)) == 5 and scoring_count(10, ids) == 8 == scoring_count(10)
    f = tmp_path / "problems.json"
    f.write_text(json.dumps({"benchmarks": {"heldout": {"pass": ids, "likelihood": ids}}}))
    m = metrics_of("--pass-problems", "10", "--likelihood-problems", "10", "--problems", str(f), "--removed",
                   "reverse_rec")
    assert m["heldout"]["scoring"] == m["heldout-logprob"]["scoring"] == 5 and m["cruxeval-o"]["scoring"] == 8
    with pytest.raises(SystemExit, match="has 10 pass@1 problems"):
        metrics_of("--pass-problems", "30", "--problems", str(f))


def test_the_committed_shard_design_is_what_the_tool_makes_of_the_committed_inputs(tmp_path, capsys, monkeypatch):
    """A design that no longer follows from its inputs (the pilot, the spread, the problems, the tool) fails here:
    the command at the top of design.txt is run again and its JSON and text compared with the committed ones."""
    monkeypatch.chdir(ROOT)
    text = (RESULT / "design.txt").read_text().splitlines()
    argv = shlex.split(text[0].removeprefix("$ "))[3:]  # after "python -m coordinator.experiment.design"
    assert argv[argv.index("--out") + 1] == str((RESULT / "design.json").relative_to(ROOT))
    argv[argv.index("--out") + 1] = str(tmp_path / "design.json")
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[1:] == text[1:]
    made = json.loads((tmp_path / "design.json").read_text())
    committed = json.loads((RESULT / "design.json").read_text())
    assert close(made, committed)
    assert set(made["metrics"]) == {"heldout", "cruxeval-o", "cruxeval-i", "heldout-logprob", "cruxeval-o-logprob",
                                    "cruxeval-i-logprob"}
    assert [r["seeds"] for r in made["designs"]] == [3, 5, 8, 10]


def close(a, b) -> bool:
    """Equal, floats to 1e-9 relative (another numpy may round the last bits of a power integral differently)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float | int):
        return a == pytest.approx(b, rel=1e-9)
    return a == b
