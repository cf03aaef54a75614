"""`python -m coordinator.experiment.reanalyse docs/results` recomputes the committed result's numbers from its files:
the ones its text quotes where no analysis changed them, and what the fixed analysis makes of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.experiment.reanalyse import main, reanalyse

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


@pytest.fixture(scope="module")
def numbers():
    return reanalyse(RESULTS, with_overlap=False)  # the committed heldout_overlap.json is read, nothing computed


def test_the_texts_numbers_come_back_where_nothing_changed_them(numbers):
    [c] = numbers["checkpoints"]["heldout"]
    every = c["every_family"]
    # docs/results/README.md: 0.128 against 0.071, difference 0.056 [0.037, 0.077] over 912 (seed, problem) pairs
    assert every["population_mean"] == pytest.approx(0.128, abs=5e-4) and every["baseline"] == pytest.approx(0.071, abs=5e-4)
    assert every["difference"] == pytest.approx(0.056, abs=5e-4)
    assert (every["pairs_interval"]["low"], every["pairs_interval"]["high"]) == (pytest.approx(0.037, abs=1e-3),
                                                                                pytest.approx(0.077, abs=1e-3))
    # the per-seed differences and their t interval, as the review recomputed them
    assert [round(v["difference"], 3) for v in every["per_seed"].values()] == [0.030, 0.069, 0.071]
    assert (every["seed_t"]["low"], every["seed_t"]["high"]) == (pytest.approx(-0.001, abs=1e-3),
                                                                 pytest.approx(0.114, abs=1e-3))
    assert {s: a["population"]["step"] for s, a in c["arms"].items()} == {1: 13, 2: 14, 3: 12}
    assert numbers["cost"]["wall"] == "2:28:32"


def test_the_fixed_analysis_is_what_the_files_say(numbers):
    [c] = numbers["checkpoints"]["heldout"]
    # reverse_rec is the warm start's s[::-1]: its three families go, and with them most of the difference
    assert c["removed"] == ["reverse_rec x code_f", "reverse_rec x code_i", "reverse_rec x code_o"]
    assert c["n_pairs"] == 762 and c["low"] < 0 < c["high"]
    family = {r["family"]: r for r in c["every_family"]["families"]}
    assert family["reverse_rec x code_f"]["population"] == pytest.approx(0.97, abs=0.01)
    assert family["reverse_rec x code_f"]["baseline"] == pytest.approx(0.06, abs=0.01)
    # seed 2's students: 0.137 with the role from the final population, 0.145 from the population at the checkpoint
    s2 = next(a for a in numbers["arms"].values() if a["arm"] == "population" and a["seed"] == 2)["evals"]["heldout"]
    assert (s2["students_mean_before"], s2["students_mean"]) == (0.137, 0.145)
    # behavioural diversity over the active teachers is lower than with the retired ones' empty sets counted
    pop = numbers["dynamics"]["population"]["per_seed"]
    assert all(v["behavioural_diversity"] < v["behavioural_diversity_before"] for v in pop.values())
    assert all(v["behavioural_reference"] is not None for v in numbers["dynamics"]["baseline"]["per_seed"].values())
    assert numbers["dynamics"]["population"]["trend"]["ast_depth"]["interval"] == "t over seeds"


def test_the_command_prints_labelled_lines(capsys):
    assert main([str(RESULTS), "--no-overlap"]) == 0
    out = capsys.readouterr().out
    assert "95% hierarchical bootstrap" in out and "families removed: reverse_rec x code_f" in out
    assert main([str(RESULTS / "evals")]) == 2
