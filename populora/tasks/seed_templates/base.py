"""What a seed-program template is (spec 13): a function of the generator's rng drawing one program, its input
drawer and its description."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


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


def pick_name(rng: random.Random, *names: str) -> str:
    """One of the argument names a template may give its function."""
    return rng.choice(names)
