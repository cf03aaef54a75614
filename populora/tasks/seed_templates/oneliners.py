"""The seed generator's one-line templates: a small model can learn to trace these, so the first tasks of a run
are solvable at all."""

from __future__ import annotations

import random

from populora.tasks.seed_templates.base import Draft, Template, pick_name
from populora.tasks.seed_templates.inputs import int_input, ints_input, word_input, word_scores_input


def _string_op(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "word")
    body, what = rng.choice([(f"{s}.upper()", "Upper-cases the word."), (f"{s}[::-1]", "Reverses the word."),
                             (f"{s} + {s}", "Repeats the word twice."), (f"{s}[0] + {s}[-1]",
                                                                         "Returns the first and last letters."),
                             (f"len({s})", "Returns the length of the word."),
                             (f"{s}.capitalize()", "Capitalizes the word.")])
    return Draft(f"def f({s}):\n    return {body}", word_input, what)


def _arithmetic(rng: random.Random) -> Draft:
    x, k = pick_name(rng, "x", "n"), rng.randint(2, 9)
    body, what = rng.choice([(f"{x} + {k}", f"Adds {k}."), (f"{x} * {k}", f"Multiplies by {k}."),
                             (f"{x} - {k}", f"Subtracts {k}."), (f"{x} * {x}", "Squares the number."),
                             (f"{x} // {k}", f"Divides by {k}, rounding down."), (f"{x} % {k}", f"Remainder by {k}.")])
    return Draft(f"def f({x}):\n    return {body}", int_input(0, 30), what)


def _list_op(rng: random.Random) -> Draft:
    xs = pick_name(rng, "xs", "nums")
    body, what = rng.choice([(f"sum({xs})", "Sums the list."), (f"max({xs})", "Returns the largest number."),
                             (f"sorted({xs})", "Sorts the list."), (f"{xs}[::-1]", "Reverses the list."),
                             (f"len({xs})", "Counts the items."), (f"{xs}[0] + {xs}[-1]",
                                                                  "Adds the first and last numbers.")])
    return Draft(f"def f({xs}):\n    return {body}", ints_input(2, 5, 0, 9), what)


def _dict_op(rng: random.Random) -> Draft:
    d = pick_name(rng, "d", "table")
    body, what = rng.choice([(f"sorted({d})", "Lists the keys, sorted."), (f"sum({d}.values())", "Sums the values."),
                             (f"len({d})", "Counts the keys."), (f"max({d}.values())", "Returns the largest value.")])
    return Draft(f"def f({d}):\n    return {body}", word_scores_input(2, 3), what)


def _count_up(rng: random.Random) -> Draft:
    n, k = pick_name(rng, "n", "x"), rng.randint(1, 3)
    prog = f"def f({n}):\n    total = 0\n    for i in range({n}):\n        total += {k}\n    return total"
    return Draft(prog, int_input(0, 9), f"Adds {k} once per number below n.")


# Three turns each in the generator's round-robin: about 40% of the warm start's programs are one-liners a
# 135M model can learn to trace.
ONELINERS = [
    Template("string_op", frozenset({"string"}), _string_op, weight=3),
    Template("arithmetic", frozenset(), _arithmetic, weight=3),
    Template("list_op", frozenset({"list"}), _list_op, weight=3),
    Template("dict_op", frozenset({"dict"}), _dict_op, weight=3),
    Template("count_up", frozenset({"loop"}), _count_up, weight=3),
]
