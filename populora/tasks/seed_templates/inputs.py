"""The random inputs of seed programs: always restricted literals (spec 3.4), as argument-list texts, drawn from the
generator's rng."""

from __future__ import annotations

import random
from collections.abc import Callable

WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "paper", "glass", "north", "music", "pixel", "ocean",
         "maple", "robot", "candle", "violet", "kiwi", "sun", "bee", "moon", "level", "noon", "radar", "stats")
LETTERS = "abcdefghijklmnopqrstuvwxyz"

Drawer = Callable[[random.Random], str]


def word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def sentence(rng: random.Random, lo: int = 2, hi: int = 4) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def ints(rng: random.Random, lo: int = 3, hi: int = 6, a: int = -5, b: int = 20) -> list[int]:
    return [rng.randint(a, b) for _ in range(rng.randint(lo, hi))]


def word_input(rng: random.Random) -> str:
    """The input of a one-word program: a word."""
    return repr(word(rng))


def sentence_input(rng: random.Random) -> str:
    """The input of a one-sentence program: two to four words."""
    return repr(sentence(rng))


def int_input(lo: int, hi: int) -> Drawer:
    """The input drawer of a one-integer program: an integer in [lo, hi]."""
    return lambda r: str(r.randint(lo, hi))


def ints_input(lo: int = 3, hi: int = 6, a: int = -5, b: int = 20) -> Drawer:
    """The input drawer of a one-list program: `ints(rng, lo, hi, a, b)`."""
    return lambda r: repr(ints(r, lo, hi, a, b))


def word_scores_input(lo: int, hi: int) -> Drawer:
    """The input drawer of a one-dict program: lo to hi distinct words, each with a score in [0, 9]."""
    return lambda r: repr({k: r.randint(0, 9) for k in r.sample(WORDS, r.randint(lo, hi))})
