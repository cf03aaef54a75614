"""The seed generator's string templates: word reversal, letter shifts and counts, case, run-length, palindromes."""

from __future__ import annotations

import random

from populora.tasks.seed_templates.base import Draft, Template, pick_name
from populora.tasks.seed_templates.inputs import LETTERS, sentence_input, word_input


def _reverse_words(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "text", "sentence")
    sep = rng.choice([" ", "-", "_"])
    prog = f"def f({s}):\n    return {sep!r}.join(w[::-1] for w in {s}.split())"
    return Draft(prog, sentence_input, f"Reverses every word and joins the words with {sep!r}.")


def _shift_letters(rng: random.Random) -> Draft:
    s, k = pick_name(rng, "s", "word"), rng.randint(1, 5)
    prog = (f"def f({s}):\n    out = ''\n    for c in {s}:\n        out += chr((ord(c) - 97 + {k}) % 26 + 97)\n"
            "    return out")
    return Draft(prog, word_input, f"Shifts every letter {k} places forward in the alphabet.")


def _count_letters(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "text")
    chars = rng.choice(["aeiou", "".join(sorted(rng.sample(LETTERS, 3)))])
    prog = (f"def f({s}):\n    n = 0\n    for c in {s}:\n        if c in {chars!r}:\n            n += 1\n"
            "    return n")
    return Draft(prog, sentence_input, f"Counts the characters that are in {chars!r}.")


def _alternate_case(rng: random.Random) -> Draft:
    s, m = pick_name(rng, "s", "word"), rng.randint(2, 3)
    prog = f"def f({s}):\n    return ''.join(c.upper() if i % {m} == 0 else c for i, c in enumerate({s}))"
    return Draft(prog, word_input, f"Upper-cases every character whose index is a multiple of {m}.")


def _run_length(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "text")
    prog = (f"def f({s}):\n    out = []\n    i = 0\n    while i < len({s}):\n        j = i\n"
            f"        while j < len({s}) and {s}[j] == {s}[i]:\n            j += 1\n"
            f"        out.append({s}[i] + str(j - i))\n        i = j\n    return ''.join(out)")

    def draw(r: random.Random) -> str:
        return repr("".join(r.choice("abc") * r.randint(1, 3) for _ in range(r.randint(2, 4))))

    return Draft(prog, draw, "Run-length encodes the string: each run becomes its letter and its length.")


def _palindrome(rng: random.Random) -> Draft:
    s = pick_name(rng, "s", "word")
    prog = f"def f({s}):\n    t = {s}.lower()\n    return t == t[::-1]"
    return Draft(prog, word_input, "Tells whether the word reads the same backwards.")


STRINGS = [
    Template("reverse_words", frozenset({"string", "comprehension"}), _reverse_words),
    Template("shift_letters", frozenset({"string", "loop"}), _shift_letters),
    Template("count_letters", frozenset({"string", "loop"}), _count_letters),
    Template("alternate_case", frozenset({"string", "comprehension"}), _alternate_case),
    Template("run_length", frozenset({"string", "loop"}), _run_length),
    Template("palindrome", frozenset({"string"}), _palindrome),
]
