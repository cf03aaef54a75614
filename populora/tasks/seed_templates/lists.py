"""The seed generator's list templates: running totals, filters, neighbour differences, windows, rotation,
deduplication and splitting by parity."""

from __future__ import annotations

import random

from populora.tasks.seed_templates.base import Draft, Template, pick_name
from populora.tasks.seed_templates.inputs import ints_input


def _running(rng: random.Random) -> Draft:
    xs = pick_name(rng, "xs", "nums")
    op, what = rng.choice([("total + x", "sum"), ("max(total, x)", "maximum"), ("total * x", "product")])
    init = "1" if what == "product" else f"{xs}[0]" if what == "maximum" else "0"
    prog = (f"def f({xs}):\n    total = {init}\n    out = []\n    for x in {xs}:\n        total = {op}\n"
            "        out.append(total)\n    return out")
    return Draft(prog, ints_input(a=-3, b=9), f"Returns the running {what} of the list.")


def _filter_map(rng: random.Random) -> Draft:
    xs, k, m = pick_name(rng, "xs", "nums", "items"), rng.randint(2, 5), rng.randint(2, 3)
    r0 = rng.randint(0, m - 1)
    prog = f"def f({xs}):\n    return [x * {k} for x in {xs} if x % {m} == {r0}]"
    return Draft(prog, ints_input(), f"Multiplies by {k} the numbers whose remainder modulo {m} is {r0}.")


def _differences(rng: random.Random) -> Draft:
    xs = pick_name(rng, "xs", "nums")
    op, what = rng.choice([("-", "differences"), ("+", "sums")])
    prog = f"def f({xs}):\n    return [{xs}[i + 1] {op} {xs}[i] for i in range(len({xs}) - 1)]"
    return Draft(prog, ints_input(), f"Returns the {what} of neighbouring numbers.")


def _window(rng: random.Random) -> Draft:
    xs, k = pick_name(rng, "xs", "nums"), rng.randint(2, 3)
    prog = (f"def f({xs}):\n    best = sum({xs}[:{k}])\n    for i in range(1, len({xs}) - {k} + 1):\n"
            f"        best = max(best, sum({xs}[i:i + {k}]))\n    return best")
    return Draft(prog, ints_input(lo=k, hi=6, a=-9, b=9),
                 f"Returns the largest sum of {k} consecutive numbers.")


def _rotate(rng: random.Random) -> Draft:
    xs, k = pick_name(rng, "xs", "items"), rng.randint(1, 4)
    prog = f"def f({xs}):\n    k = {k} % len({xs})\n    return {xs}[k:] + {xs}[:k]"
    return Draft(prog, ints_input(lo=2), f"Rotates the list {k} places to the left.")


def _dedupe(rng: random.Random) -> Draft:
    xs = pick_name(rng, "xs", "items")
    prog = (f"def f({xs}):\n    seen = []\n    for x in {xs}:\n        if x not in seen:\n            seen.append(x)\n"
            "    return seen")
    return Draft(prog, ints_input(lo=4, hi=7, a=0, b=5),
                 "Removes repeated items, keeping the first of each.")


def _split_parity(rng: random.Random) -> Draft:
    xs = pick_name(rng, "xs", "nums")
    prog = (f"def f({xs}):\n    even, odd = [], []\n    for x in {xs}:\n        if x % 2 == 0:\n"
            "            even.append(x)\n        else:\n            odd.append(x)\n    return even, odd")
    return Draft(prog, ints_input(), "Splits the numbers into the even ones and the odd ones.")


LISTS = [
    Template("running", frozenset({"list", "loop"}), _running),
    Template("filter_map", frozenset({"list", "comprehension"}), _filter_map),
    Template("differences", frozenset({"list", "comprehension"}), _differences),
    Template("window", frozenset({"list", "loop"}), _window),
    Template("rotate", frozenset({"list"}), _rotate),
    Template("dedupe", frozenset({"list", "loop"}), _dedupe),
    Template("split_parity", frozenset({"list", "loop"}), _split_parity),
]
