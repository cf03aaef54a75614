"""The seed generator's dictionary templates: counting, grouping, inverting, mapping words and filtering keys."""

from __future__ import annotations

import random

from populora.tasks.seed_templates.base import Draft, Template, pick_name
from populora.tasks.seed_templates.inputs import sentence, sentence_input, word_input, word_scores_input


def _char_counts(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "word")
    prog = (f"def f({s}):\n    counts = {{}}\n    for c in {s}:\n        counts[c] = counts.get(c, 0) + 1\n"
            "    return counts")
    return Draft(prog, word_input, "Counts how often each character occurs.")


def _group_by_length(rng: random.Random) -> Draft:
    ws = pick_name(rng, "words", "ws")
    prog = (f"def f({ws}):\n    groups = {{}}\n    for w in {ws}:\n        groups.setdefault(len(w), []).append(w)\n"
            "    return groups")
    return Draft(prog, lambda r: repr(sentence(r, 2, 5).split()), "Groups the words by their length.")


def _invert(rng: random.Random) -> Draft:
    d = pick_name(rng, "d", "table")
    prog = f"def f({d}):\n    return {{v: k for k, v in {d}.items()}}"
    return Draft(prog, word_scores_input(2, 4), "Swaps the keys and the values of the dictionary.")


def _word_lengths(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "text")
    c = rng.choice("aeo")
    prog, what = rng.choice([(f"def f({s}):\n    return {{w: len(w) for w in {s}.split()}}", "its length"),
                             (f"def f({s}):\n    return {{w: w.count({c!r}) for w in {s}.split()}}",
                              f"how many {c!r} it holds")])
    return Draft(prog, sentence_input, f"Maps every word to {what}.")


def _keys_above(rng: random.Random) -> Draft:
    d, t = pick_name(rng, "d", "scores"), rng.randint(2, 6)
    prog = f"def f({d}):\n    return sorted(k for k, v in {d}.items() if v > {t})"
    return Draft(prog, word_scores_input(2, 4), f"Lists, sorted, the keys whose value is above {t}.")


DICTS = [
    Template("char_counts", frozenset({"string", "dict", "loop"}), _char_counts),
    Template("group_by_length", frozenset({"dict", "list", "loop"}), _group_by_length),
    Template("invert", frozenset({"dict", "comprehension"}), _invert),
    Template("word_lengths", frozenset({"dict", "string", "comprehension"}), _word_lengths),
    Template("keys_above", frozenset({"dict", "comprehension"}), _keys_above),
]
