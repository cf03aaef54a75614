"""What a seed-program template is (spec 13), and the random inputs templates draw (always restricted literals)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "paper", "glass", "north", "music", "pixel", "ocean",
         "maple", "robot", "candle", "violet", "kiwi", "sun", "bee", "moon", "level", "noon", "radar", "stats")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Draft:
    """What a template draws: the program text, a function drawing one input text, and the description."""

    program: str
    draw_input: Callable[[random.Random], str]
    message: str


@dataclass(frozen=True)
class Template:
    """A family of programs: `draw` picks its parameters (constants, operators, argument names) from the generator's
    rng, so one template yields many programs; `constructs` are what its programs exercise."""

    name: str
    constructs: frozenset[str]
    draw: Callable[[random.Random], Draft]
    weight: int = 1  # turns in each round of the generator's round-robin


def word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def sentence(rng: random.Random, lo: int = 2, hi: int = 4) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def ints(rng: random.Random, lo: int = 3, hi: int = 6, a: int = -5, b: int = 20) -> list[int]:
    return [rng.randint(a, b) for _ in range(rng.randint(lo, hi))]


def pick_name(rng: random.Random, *names: str) -> str:
    return rng.choice(names)


def int_input(lo: int, hi: int) -> Callable[[random.Random], str]:
    """The input drawer of a one-integer program: an integer in [lo, hi], as its argument text."""
    return lambda r: str(r.randint(lo, hi))
