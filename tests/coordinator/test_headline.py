"""The comparison's headline on cases whose numbers are known: the families a shared template removes, the
per-family table, leave one family out, the per-seed values and the parts a seed's scoring is cut into."""

from __future__ import annotations

import pytest

from coordinator.experiment.headline import family_of, headline, kept
from coordinator.experiment.seedeval import PART_PROBLEMS, parts_of


def _ids(template: str, task_type: str, n: int, start: int) -> list[str]:
    return [f"heldout/{start + k}/{task_type}/{template}" for k in range(n)]


def _case():
    """Two seeds, three families of 10 problems: reverse_rec x code_f (the population solves all, the baseline
    none), window x code_o (0.3 against 0.1) and gcd x code_i (0.2 against 0.2); two students."""
    ids = {"reverse_rec x code_f": _ids("reverse_rec", "code_f", 10, 0), "window x code_o": _ids("window", "code_o", 10, 10),
           "gcd x code_i": _ids("gcd", "code_i", 10, 20)}
    values = {"reverse_rec x code_f": (1.0, 0.0), "window x code_o": (0.3, 0.1), "gcd x code_i": (0.2, 0.2)}
    pop = {s: {p: [values[f][0]] * 2 for f, ps in ids.items() for p in ps} for s in (1, 2)}
    base = {s: {p: values[f][1] for f, ps in ids.items() for p in ps} for s in (1, 2)}
    warm = {p: 0.0 for ps in ids.values() for p in ps}
    return pop, base, warm


def test_a_family_shared_with_the_warm_start_is_left_out_and_listed():
    pop, base, warm = _case()
    whole = headline("heldout", pop, base, warm, n_resamples=500)
    assert whole["difference"] == pytest.approx((1.0 + 0.2 + 0.0) / 3)
    cut = headline("heldout", pop, base, warm, {"reverse_rec": ["string_op"]}, n_resamples=500)
    assert cut["difference"] == pytest.approx(0.1)  # (0.2 + 0.0) / 2 over the two families left
    assert cut["removed"] == ["reverse_rec x code_f"] and cut["removed_because"] == {"reverse_rec": ["string_op"]}
    assert cut["n_pairs"] == 40 and cut["n_families"] == 2
    assert cut["population_mean"] == pytest.approx(0.25) and cut["baseline"] == pytest.approx(0.15)
    assert cut["per_seed"] == {s: {"population": pytest.approx(0.25), "baseline": pytest.approx(0.15),
                                   "difference": pytest.approx(0.1), "problems": 20} for s in (1, 2)}
    # the table keeps every family, the removed one marked with what it shares behaviour with
    table = {r["family"]: r for r in cut["families"]}
    assert set(table) == {"reverse_rec x code_f", "window x code_o", "gcd x code_i"}
    assert table["reverse_rec x code_f"]["removed"] == ["string_op"] and table["gcd x code_i"]["removed"] == []
    assert table["window x code_o"]["difference"] == pytest.approx(0.2) and table["window x code_o"]["problems"] == 10
    assert table["window x code_o"]["warm_start"] == 0.0
    # leave one family out: without window nothing is left of the difference
    assert cut["leave_one_out"] == {"window x code_o": pytest.approx(0.0), "gcd x code_i": pytest.approx(0.2)}
    assert whole["leave_one_out"]["reverse_rec x code_f"] == pytest.approx(0.1)
    # two seeds that agree exactly: the t interval has no width, and both intervals sit on the difference
    assert cut["seed_t"]["low"] == pytest.approx(0.1) and cut["seed_t"]["high"] == pytest.approx(0.1)
    assert cut["few_seeds"] is True


def test_a_published_benchmark_has_one_problem_per_family_and_no_table():
    pop = {1: {"sample_0": [1.0, 0.0], "sample_1": [0.0, 0.0]}, 2: {"sample_0": [1.0, 1.0], "sample_1": [0.0, 1.0]}}
    base = {1: {"sample_0": 0.0, "sample_1": 0.0}, 2: {"sample_0": 1.0, "sample_1": 0.0}}
    h = headline("cruxeval-o", pop, base, n_resamples=200)
    assert h["difference"] == pytest.approx((0.25 + 0.25) / 2) and h["n_families"] == 2
    assert "families" not in h and "removed" not in h
    assert family_of("cruxeval-o", "sample_0") == "sample_0"
    assert family_of("heldout", "heldout/4/code_o/window") == "window x code_o"
    assert kept(["heldout/0/code_f/reverse_rec", "heldout/1/code_o/gcd"], "heldout", {"reverse_rec": ["x"]}) == [
        "heldout/1/code_o/gcd"]


def test_a_seeds_scoring_is_cut_into_kept_parts_and_the_curve_answers_only_the_first():
    problems = list(range(250))
    parts = parts_of(problems, 120)  # the curve's versions answer the first 120, cut at PART_PROBLEMS
    assert [(len(p), curve) for p, curve in parts] == [(100, True), (20, True), (100, False), (30, False)]
    assert [x for p, _ in parts for x in p] == problems
    assert [(len(p), c) for p, c in parts_of(problems, 0)] == [(PART_PROBLEMS, True), (100, True), (50, True)]
    assert parts_of([], 10) == []
