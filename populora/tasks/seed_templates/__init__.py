"""The seed generator's program templates (spec 13), by family, and their split once and for all into warm-start and
held-out templates."""

from __future__ import annotations

from populora.tasks.seed_templates.base import Draft, Template
from populora.tasks.seed_templates.dicts import DICTS
from populora.tasks.seed_templates.inputs import LETTERS, WORDS
from populora.tasks.seed_templates.lists import LISTS
from populora.tasks.seed_templates.numbers import NUMBERS
from populora.tasks.seed_templates.oneliners import ONELINERS
from populora.tasks.seed_templates.recursion import RECURSION
from populora.tasks.seed_templates.strings import STRINGS

__all__ = ["CONSTRUCTS", "HELDOUT_TEMPLATES", "LETTERS", "SPLITS", "TEMPLATES", "WARM_TEMPLATES", "WORDS", "Draft",
           "Template", "templates_of"]

CONSTRUCTS = ("string", "list", "dict", "loop", "recursion", "comprehension")
SPLITS = ("warm", "heldout")

# The order is part of the generator's determinism: the round-robin shuffles the names in this order.
TEMPLATES: dict[str, Template] = {t.name: t for t in [*STRINGS, *LISTS, *DICTS, *RECURSION, *NUMBERS, *ONELINERS]}

# The held-out split (spec 13): templates the warm start never uses, one or more per construct, so an evaluation on
# them measures what self-play taught rather than what the warm start showed.
HELDOUT_TEMPLATES = ("alternate_case", "window", "invert", "gcd", "collatz", "reverse_rec")
WARM_TEMPLATES = tuple(name for name in TEMPLATES if name not in HELDOUT_TEMPLATES)


def templates_of(split: str) -> tuple[str, ...]:
    """The template names of a split: `warm` (the warm start's) or `heldout` (never used by it)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {list(SPLITS)}")
    return WARM_TEMPLATES if split == "warm" else HELDOUT_TEMPLATES
