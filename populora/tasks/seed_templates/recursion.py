"""The seed generator's recursive templates: digit sums, Fibonacci-like sequences, flattening, gcd, reversal."""

from __future__ import annotations

import random

from populora.tasks.seed_templates.base import Draft, Template, pick_name
from populora.tasks.seed_templates.inputs import int_input, word_input


def _digit_sum(rng: random.Random) -> Draft:
    n = pick_name(rng, "n", "x")
    op, what = rng.choice([("+", "sum"), ("*", "product")])
    prog = f"def f({n}):\n    if {n} < 10:\n        return {n}\n    return {n} % 10 {op} f({n} // 10)"
    return Draft(prog, int_input(0, 9999), f"Returns the {what} of the digits, recursively.")


def _fib(rng: random.Random) -> Draft:
    n, a, b = pick_name(rng, "n", "k"), rng.randint(0, 2), rng.randint(1, 3)
    prog = (f"def f({n}):\n    if {n} == 0:\n        return {a}\n    if {n} == 1:\n        return {b}\n"
            f"    return f({n} - 1) + f({n} - 2)")
    return Draft(prog, int_input(0, 12), f"A Fibonacci-like sequence that starts {a}, {b}; returns term n.")


def _flatten(rng: random.Random) -> Draft:
    xs = pick_name(rng, "xs", "items")
    prog = (f"def f({xs}):\n    out = []\n    for x in {xs}:\n        if isinstance(x, list):\n"
            "            out.extend(f(x))\n        else:\n            out.append(x)\n    return out")

    def draw(r: random.Random) -> str:
        return repr([r.randint(0, 9) if r.random() < 0.6 else [r.randint(0, 9), [r.randint(0, 9)]]
                     for _ in range(r.randint(2, 4))])

    return Draft(prog, draw, "Flattens nested lists into one list, recursively.")


def _gcd(rng: random.Random) -> Draft:
    a, b = rng.choice([("a", "b"), ("x", "y")])
    prog = f"def f({a}, {b}):\n    if {b} == 0:\n        return {a}\n    return f({b}, {a} % {b})"
    return Draft(prog, lambda r: f"{r.randint(1, 60)}, {r.randint(1, 60)}",
                 "Returns the greatest common divisor, recursively.")


def _reverse_rec(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "word")
    prog = f"def f({s}):\n    if not {s}:\n        return ''\n    return f({s}[1:]) + {s}[0]"
    return Draft(prog, word_input, "Reverses the string, recursively.")


RECURSION = [
    Template("digit_sum", frozenset({"recursion"}), _digit_sum),
    Template("fib", frozenset({"recursion"}), _fib),
    Template("flatten", frozenset({"recursion", "list", "loop"}), _flatten),
    Template("gcd", frozenset({"recursion"}), _gcd),
    Template("reverse_rec", frozenset({"recursion", "string"}), _reverse_rec),
]
