"""Program shapes, coverage, oscillation and behavioural diversity on hand-computed cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from populora.analysis.dynamics import (
    StepPrograms,
    behavioural_diversity,
    coverage,
    jaccard,
    node_types,
    oscillation,
    run_dynamics,
    shape,
    sign_changes,
    split_reference,
)

BASE = "def f(a):\n    total = 0\n    for x in a:\n        total += x * 2\n    return total\n"
RENAMED = "def g(items):\n    acc = 10\n    for item in items:\n        acc += item * 7\n    return acc\n"
RESTRUCTURED = "def f(a):\n    total = 0\n    for x in a:\n        total -= x * 2\n    return total\n"
WHILE = "def f(a):\n    total = 0\n    while a:\n        total += a.pop() * 2\n    return total\n"


def test_renamed_variables_and_other_constants_keep_the_shape():
    assert shape(BASE) == shape(RENAMED)
    assert shape("def f(x):\n    return x * 3") == shape("def number(n):\n    return n * 'abc'")
    assert shape("def f(a):\n    return [1, 2, 3]") == shape("def f(b):\n    return ['x', -2.5]")
    assert shape("def f(s):\n    return s.upper()") == shape("def f(s):\n    return s.lower()")


def test_another_structure_changes_the_shape():
    shapes = {shape(p) for p in (BASE, RESTRUCTURED, WHILE)}
    assert len(shapes) == 3
    assert shape("def f(x):\n    return x * 3") != shape("def f(x):\n    return x + 3")
    assert shape("def f(x):\n    return [x, 1]") != shape("def f(x):\n    return [1, 2]")
    assert shape("def f(x):\n    return g(x)") != shape("def f(x):\n    return g(x, x)")
    assert shape("def f(x):\n    return g(k=x)") != shape("def f(x):\n    return g(**x)")


def test_the_shape_is_a_stable_hash_across_processes():
    # Python's own hash of a string is salted per process; the shape must not be.
    code = f"from populora.analysis.dynamics import shape; print(shape({BASE!r}))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "123",
                                "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert other.stdout.strip() == shape(BASE)
    assert len(shape(BASE)) == 16


def test_a_program_that_does_not_parse_has_no_shape():
    assert shape("def f(:\n  return") is None
    assert node_types("def f(:") == frozenset()
    deep = "x = " + "(" * 10_000 + "1" + ")" * 10_000
    assert shape(deep) is None  # too deeply nested for the parser: no shape, no crash
    # This one parses, and its tree is 2000 deep, past the recursion limit: the walk must not recurse.
    long_chain = "x = 1" + " + y" * 2000
    assert shape(long_chain) == shape("z = 2" + " + w" * 2000) != shape("x = 1" + " + y" * 1999)


def test_node_types_are_the_types_used():
    assert {"FunctionDef", "Return", "BinOp", "Mult", "Name", "Constant"} <= node_types("def f(x):\n return x * 3")
    assert "While" not in node_types(BASE) and "While" in node_types(WHILE)


def test_coverage_counts_cumulative_shapes_node_types_and_the_new_shape_rate():
    steps = [(1, [BASE, RENAMED, "def f(:"]),  # one shape (twice), one unparsable
             (2, [BASE, WHILE]),  # WHILE is new
             (3, []),
             (4, [RESTRUCTURED, RESTRUCTURED, WHILE, "def h(q):\n    return q"])]  # two new shapes
    cov = coverage(steps)
    assert [c.distinct_shapes for c in cov] == [1, 2, 2, 4]
    assert [c.new_shapes for c in cov] == [1, 1, 0, 2]
    assert [c.new_shape_rate for c in cov] == [1 / 3, 1 / 2, None, 2 / 4]
    assert [c.unparsed for c in cov] == [1, 0, 0, 0]
    types_1 = len(node_types(BASE))
    types_2 = len(node_types(BASE) | node_types(WHILE))
    assert [c.node_types for c in cov][:3] == [types_1, types_2, types_2]
    assert cov[3].node_types == len(node_types(BASE) | node_types(WHILE) | node_types(RESTRUCTURED))
    with pytest.raises(ValueError, match="increasing"):
        coverage([(2, []), (1, [])])


def test_oscillation_on_hand_computed_series():
    # rates 0.2 0.5 0.3 0.6 0.1: differences + - + -, three changes over 5 - 2 = 3 possible.
    assert sign_changes([0.2, 0.5, 0.3, 0.6, 0.1]) == 3
    assert oscillation([0.2, 0.5, 0.3, 0.6, 0.1]) == 1.0
    # saturating: rises then flat at 1: differences + + 0 0, no change.
    assert oscillation([0.4, 0.8, 1.0, 1.0, 1.0]) == 0.0
    # rise, flat, fall: the zero difference is skipped, one change; 5 rates -> 1/3.
    assert sign_changes([0.1, 0.4, 0.4, 0.2, 0.2]) == 1
    assert oscillation([0.1, 0.4, 0.4, 0.2, 0.2]) == pytest.approx(1 / 3)
    # rise, flat, rise: no change.
    assert sign_changes([0.1, 0.4, 0.4, 0.6]) == 0
    # steps without a rate are dropped: 0.5 0.2 0.5 -> one change over 1.
    assert oscillation([0.5, None, 0.2, None, 0.5]) == 1.0
    assert oscillation([0.5, 0.2]) is None and oscillation([None, None, 0.1]) is None


def test_jaccard_and_behavioural_diversity_by_hand():
    assert jaccard({"a", "b"}, {"b", "c"}) == 1 / 3
    assert jaccard(set(), set()) is None
    teachers = {
        "t1": {1: ["z"], 2: ["a", "b"], 3: ["b", None]},
        "t2": {2: ["b"], 3: ["c"]},
        "t3": {1: ["a"]},  # silent in the window
    }
    d = behavioural_diversity(teachers, k=2)  # window: steps 2 and 3
    assert d.steps == (2, 3)
    # t1 {a, b}, t2 {b, c}; t3 is silent in the window (retired), so it is not compared: J(t1,t2) = 1/3. Counted, its
    # empty set would have made both its pairs 0 and the diversity 8/9 instead of 2/3.
    assert d.active == ("t1", "t2")
    assert d.pairs == {("t1", "t2"): 1 / 3}
    assert d.overlap == pytest.approx(1 / 3) and d.diversity == pytest.approx(2 / 3)
    same = behavioural_diversity({"t1": {1: ["a"]}, "t2": {1: ["a"]}}, k=5)
    assert same.overlap == 1.0 and same.diversity == 0.0
    empty = behavioural_diversity({"t1": {1: [None]}, "t2": {1: []}}, k=1)
    assert empty.overlap is None and empty.diversity is None
    with pytest.raises(ValueError, match="at least one step"):
        behavioural_diversity(teachers, k=0)


def test_the_one_policy_reference_splits_one_adapters_proposals_in_two():
    # every proposal of one shape: the halves are identical (diversity 0); every proposal its own shape: disjoint (1)
    assert split_reference([(1, ["a"] * 6), (2, ["a"] * 4)], k=3) == [0.0, 0.0]
    assert split_reference([(1, ["a", "b", "c", "d"]), (2, ["e", "f"])], k=3) == [1.0, 1.0]
    # two shapes, two proposals each, over one step: the halves {a, b} / {a, b}, {a} / {a, b} ... by the draw; the
    # value is one of the few a split can give, and the same seed gives it again
    got = split_reference([(1, ["a", "a", "b", "b"])], k=1, seed=3)
    assert got[0] in (0.0, 0.5, 1.0) and got == split_reference([(1, ["a", "a", "b", "b"])], k=1, seed=3)
    # one proposal: one half is empty, so there is no pair to compare
    assert split_reference([(1, ["a"])], k=1) == [None]


def test_a_run_of_one_adapter_gets_the_reference_and_a_population_does_not():
    steps = [StepPrograms(step=s, flops=float(s), programs=[("base", "def f(x):\n    return x + 1"),
                                                           ("base", "def f(x):\n    return [x]")],
                          solve_rates={}, complexity={}) for s in (1, 2)]
    one = run_dynamics(steps)
    assert one["behavioural_diversity"] == [None, None] and len(one["behavioural_reference"]) == 2
    # at step 1 the two shapes always land in different halves; over steps 1-2 each half holds one or both
    assert one["behavioural_reference"][0] == 1.0 and one["behavioural_reference"][1] in (0.0, 1.0)
    two = run_dynamics([StepPrograms(1, 1.0, [("t1", "def f(x):\n    return x"), ("t2", "def f(x):\n    return x")],
                                     {}, {})])
    assert two["behavioural_diversity"] == [0.0] and two["behavioural_reference"] == []
