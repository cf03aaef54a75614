"""The seed generator's number templates: Collatz-like step counts, divisors and row aggregates of a grid."""

from __future__ import annotations

import random

from populora.tasks.seed_templates.base import Draft, Template, pick_name
from populora.tasks.seed_templates.inputs import int_input


def _collatz(rng: random.Random) -> Draft:
    n, k = pick_name(rng, "n", "x"), rng.choice([3, 5])
    prog = (f"def f({n}):\n    steps = 0\n    while {n} > 1 and steps < 50:\n"
            f"        {n} = {n} // 2 if {n} % 2 == 0 else {k} * {n} + 1\n        steps += 1\n    return steps")
    return Draft(prog, int_input(1, 40), f"Counts halving or {k}n+1 steps until 1 (at most 50).")


def _divisors(rng: random.Random) -> Draft:
    n = pick_name(rng, "n", "x")
    prog = f"def f({n}):\n    return [d for d in range(1, {n} + 1) if {n} % d == 0]"
    return Draft(prog, int_input(1, 60), "Lists the divisors of the number.")


def _row_sums(rng: random.Random) -> Draft:
    m = pick_name(rng, "rows", "grid")
    agg = rng.choice(["sum", "max", "min"])
    prog = f"def f({m}):\n    return [{agg}(row) for row in {m}]"

    def draw(r: random.Random) -> str:
        w = r.randint(2, 3)
        return repr([[r.randint(0, 9) for _ in range(w)] for _ in range(r.randint(2, 3))])

    return Draft(prog, draw, f"Returns the {agg} of every row.")


NUMBERS = [
    Template("collatz", frozenset({"loop"}), _collatz),
    Template("divisors", frozenset({"list", "comprehension"}), _divisors),
    Template("row_sums", frozenset({"list", "comprehension"}), _row_sums),
]
