"""The evaluation tests' own rows in CRUXEval's release layout (`code`, `input`, `output`, `id`), written by hand for
the tests, none taken from the published file: a list comprehension, a string, two arguments, a dict, a function of no
arguments (the empty input), a slice, a lambda input (not an allowed answer expression: cruxeval-i sets it apart) and
a length. tests/evals/data/smollm2_outputs.json holds SmolLM2's answers to them, by id."""

from __future__ import annotations

import json
from pathlib import Path

CRUXEVAL_LAYOUT_ROWS = [
    {"code": "def f(nums):\n    return [n * n for n in nums if n % 2]", "input": "[1, 2, 3, 4, 5]",
     "output": "[1, 9, 25]", "id": "sample_0"},
    {"code": "def f(text):\n    return text.upper() + text", "input": "'ab'", "output": "'ABab'", "id": "sample_1"},
    {"code": "def f(a, b):\n    return a - b", "input": "10, 4", "output": "6", "id": "sample_2"},
    {"code": "def f(d):\n    return sorted(d.items())", "input": "{'b': 2, 'a': 1}", "output": "[('a', 1), ('b', 2)]",
     "id": "sample_3"},
    {"code": "def f():\n    return 'x' * 3", "input": "", "output": "'xxx'", "id": "sample_4"},
    {"code": "def f(s, n):\n    return s[:n]", "input": "'hello', 3", "output": "'hel'", "id": "sample_5"},
    {"code": "def f(g, x):\n    return g(x) + 1", "input": "lambda v: v * 2, 5", "output": "11", "id": "sample_6"},
    {"code": "def f(xs):\n    return len(xs)", "input": "[7, 8, 9]", "output": "3", "id": "sample_7"},
]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    """`rows` as a JSON-lines file at `path`; its path as text (what --data takes)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)
