"""The arms at equal compute: checkpoint states, the validation split, and the paired comparison (spec 14)."""

from __future__ import annotations

import random

import pytest

from coordinator.experiment.checkpointeval import (
    VALIDATION_EVERY,
    WARM,
    choose,
    compare_at_checkpoints,
    label,
    population_at,
    split,
)


def test_the_split_holds_every_fifth_problem_apart_and_all_three_task_types():
    ids = [f"{tt}/{k}" for k in range(20) for tt in ("code_o", "code_i", "code_f")]
    validation, scoring = split(ids)
    assert len(validation) == len(ids) // VALIDATION_EVERY and not set(validation) & set(scoring)
    assert set(validation) | set(scoring) == set(ids)
    for part in (validation, scoring):
        assert {p.split("/")[0] for p in part} == {"code_o", "code_i", "code_f"}


def test_the_best_member_is_never_chosen_on_its_scoring_problems():
    ids = [f"p{i}" for i in range(50)]
    validation, scoring = split(ids)
    # A is perfect on every scoring problem and fails validation; B the reverse
    members = {"A": {p: 1.0 if p in scoring else 0.0 for p in ids},
               "B": {p: 1.0 if p in validation else 0.0 for p in ids}}
    assert choose(members, validation) == ("B", "A")
    # whatever the scoring problems say, the choice does not move
    rng = random.Random(0)
    for _ in range(20):
        shuffled = {m: {p: rng.random() if p in scoring else v[p] for p in ids} for m, v in members.items()}
        assert choose(shuffled, validation) == ("B", "A")
    with pytest.raises(ValueError, match="validation"):
        choose(members, [])


def test_ties_never_make_one_member_both_best_and_worst():
    # seed 2 of docs/results: both students solved the same validation share, and the first name was both
    validation = ["v1", "v2"]
    tied = {"S6c1": {"v1": 1.0, "v2": 0.0}, "S12c1": {"v1": 0.0, "v2": 1.0}}
    assert choose(tied, validation) == ("S12c1", "S6c1")  # ranked by score, ties by name: first and last
    three = {"A": {"v1": 1.0, "v2": 1.0}, "B": {"v1": 1.0, "v2": 1.0}, "C": {"v1": 0.0, "v2": 0.0}}
    assert choose(three, validation) == ("A", "C")
    assert choose({"A": three["A"], "B": three["B"], "C": three["A"]}, validation) == ("A", "C")
    assert choose({"only": tied["S6c1"]}, validation) == ("only", "only")  # one member is both, necessarily


def _rows(steps: list[tuple[int, float]], prefix: str, members: int) -> list[dict]:
    return [{"step": s, "compute_cumulative": {"budget_flops": f},
             "population": {} if s == 0 else {f"{prefix}{m}": {"role": "both", "version": s} for m in range(members)}}
            for s, f in steps]


def _file(prefix: str, versions: range, members: int, ids: list[str], value, warm: bool = False) -> dict:
    results = [{"label": label(f"{prefix}{m}", v), "problems": [{"id": p, "passed": value(m, v, p), "n": 1}
                                                                for p in ids]}
               for v in versions for m in range(members)]
    if warm:
        results.insert(0, {"label": WARM, "problems": [{"id": p, "passed": 0, "n": 1} for p in ids]})
    return {"results": results}


def test_checkpoints_compare_the_states_at_equal_compute_with_the_gap():
    ids = [f"p{i}" for i in range(40)]
    _, scoring = split(ids)
    rows = {("population", 1): _rows([(0, 0), (1, 40), (2, 80), (3, 120)], "P", 2),
            ("baseline", 1): _rows([(0, 0), (1, 20), (2, 40), (3, 60), (4, 80), (5, 100)], "B", 1)}
    # population members solve problem p at version v when index < 10 * v; the baseline never solves anything
    evals = {("population", 1): _file("P", range(1, 4), 2, ids, lambda m, v, p: int(int(p[1:]) < 10 * v), True),
             ("baseline", 1): _file("B", range(1, 6), 1, ids, lambda m, v, p: 0)}
    out = compare_at_checkpoints([1], rows, evals, budget=100, n_resamples=500)
    assert [c["fraction"] for c in out] == [0.25, 0.5, 0.75, 1.0]
    first, last = out[0], out[-1]
    assert first["arms"][1]["population"] == {"step": 0, "flops": 0.0, "gap": 25.0}  # warm start: first step is 40
    assert first["arms"][1]["baseline"] == {"step": 1, "flops": 20.0, "gap": 5.0}
    assert first["difference"] == 0.0 and first["population_mean"] == 0.0  # the warm start solves nothing
    assert last["arms"][1]["population"]["step"] == 2 and last["arms"][1]["baseline"]["step"] == 5
    expected = sum(int(p[1:]) < 20 for p in scoring) / len(scoring)
    assert last["population_mean"] == pytest.approx(expected) == pytest.approx(last["difference"])
    assert last["low"] <= last["difference"] <= last["high"] and last["n_pairs"] == len(scoring)
    assert last["counts"]["only_population"] == 2 * sum(int(p[1:]) < 20 for p in scoring)
    assert last["baseline"] == 0.0


def test_population_at_a_step():
    rows = _rows([(0, 0), (1, 10)], "P", 2)
    assert population_at(rows, 0) is None and population_at(rows, None) is None
    assert population_at(rows, 1) == {"P0": 1, "P1": 1}


def test_only_the_students_are_scored_when_eval_members_says_so():
    rows = [{"step": 1, "compute_cumulative": {"budget_flops": 10},
             "population": {"T0": {"role": "teacher", "version": 2}, "S0": {"role": "student", "version": 3},
                            "S1": {"role": "student", "version": 1}}}]
    assert population_at(rows, 1, "students") == {"S0": 3, "S1": 1}
    assert population_at(rows, 1) == {"S0": 3, "S1": 1, "T0": 2}
    base = _rows([(0, 0), (1, 10)], "B", 1)
    assert population_at(base, 1, "students") == {"B0": 1}  # the baseline's one adapter plays both roles
    with pytest.raises(ValueError, match="members"):
        population_at(rows, 1, "teachers")


def test_the_comparison_follows_the_chosen_checkpoints_and_members():
    """At eval.checkpoints [0.5, 1] with eval.members students, the teachers' scores (here perfect) are in no number,
    and no version outside the two checkpoints' states is needed."""
    ids = [f"p{i}" for i in range(40)]
    _, scoring = split(ids)

    def pop_rows(steps):
        return [{"step": s, "compute_cumulative": {"budget_flops": f},
                 "population": {} if s == 0 else {"T0": {"role": "teacher", "version": s},
                                                   "S0": {"role": "student", "version": s}}} for s, f in steps]

    rows = {("population", 1): pop_rows([(0, 0), (1, 50), (2, 100)]),
            ("baseline", 1): _rows([(0, 0), (1, 50), (2, 100)], "B", 1)}
    results = [{"label": label(a, v), "problems": [{"id": p, "passed": int(a == "T0" or int(p[1:]) < 8), "n": 1}
                                                    for p in ids]} for a in ("T0", "S0") for v in (1, 2)]
    evals = {("population", 1): {"results": results},
             ("baseline", 1): _file("B", range(1, 3), 1, ids, lambda m, v, p: 0)}
    out = compare_at_checkpoints([1], rows, evals, budget=100, n_resamples=200, fractions=[0.5, 1.0],
                                 members="students")
    assert [c["fraction"] for c in out] == [0.5, 1.0]
    expected = sum(int(p[1:]) < 8 for p in scoring) / len(scoring)
    for c in out:
        assert c["population_mean"] == pytest.approx(expected) == c["best_member"] == c["worst_member"]
        assert sum(c["counts"].values()) == len(scoring)  # one member (S0) paired with the baseline
    with_teachers = compare_at_checkpoints([1], rows, evals, budget=100, n_resamples=200, fractions=[1.0])
    assert with_teachers[0]["best_member"] == 1.0 and with_teachers[0]["population_mean"] > expected


def test_the_mixed_rank_population_is_compared_with_the_uniform_one_by_the_same_statistics():
    """Spec 9, "Mixed ranks": arms=("mixed-rank", "population") pairs the mixed-rank members with the uniform
    population's mean on each problem, at each arm's last step not past each checkpoint; the default arms give what
    they always did."""
    ids = [f"p{i}" for i in range(40)]
    _, scoring = split(ids)
    rows = {("mixed-rank", 1): _rows([(0, 0), (1, 50), (2, 100)], "M", 2),
            ("population", 1): _rows([(0, 0), (1, 50), (2, 100)], "P", 2),
            ("baseline", 1): _rows([(0, 0), (1, 50), (2, 100)], "B", 1)}
    # the mixed-rank members solve the first 20 problems; of the uniform ones, one solves the first 10, one none
    evals = {("mixed-rank", 1): _file("M", range(1, 3), 2, ids, lambda m, v, p: int(int(p[1:]) < 20)),
             ("population", 1): _file("P", range(1, 3), 2, ids, lambda m, v, p: int(m == 0 and int(p[1:]) < 10)),
             ("baseline", 1): _file("B", range(1, 3), 1, ids, lambda m, v, p: 0)}
    out = compare_at_checkpoints([1], rows, evals, budget=100, n_resamples=300, fractions=[1.0],
                                 arms=("mixed-rank", "population"))
    [c] = out
    mixed = sum(int(p[1:]) < 20 for p in scoring) / len(scoring)
    uniform = sum(0.5 for p in scoring if int(p[1:]) < 10) / len(scoring)
    assert set(c["arms"][1]) == {"mixed-rank", "population"}
    assert c["population_mean"] == pytest.approx(mixed) and c["baseline"] == pytest.approx(uniform)
    assert c["difference"] == pytest.approx(mixed - uniform) and c["low"] <= c["difference"] <= c["high"]
    assert c["n_pairs"] == len(scoring) and sum(c["counts"].values()) == 2 * len(scoring)
    default = compare_at_checkpoints([1], rows, evals, budget=100, n_resamples=300, fractions=[1.0])
    assert default == compare_at_checkpoints([1], rows, evals, budget=100, n_resamples=300, fractions=[1.0],
                                             arms=("population", "baseline"))
    assert default[0]["baseline"] == 0.0 and default[0]["population_mean"] == pytest.approx(uniform)
