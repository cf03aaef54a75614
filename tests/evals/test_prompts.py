"""Prompts and program extraction per model kind, on real answers of SmolLM2-135M-Instruct (the cpu-smol model:
tests/evals/data/smollm2_outputs.json, made by tests/evals/smollm2_outputs.py) and on the shapes answers take."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from populora.evals.benchmarks import load_problems
from populora.evals.problem import Problem
from populora.evals.prompts import (
    COMPLETION_STOP,
    chat_messages,
    code_blocks,
    cut_at_stop,
    extract_program,
    program_from_chat,
)
from populora.evals.scoring import SCORERS, Answer

REAL = json.loads((Path(__file__).with_name("data") / "smollm2_outputs.json").read_text())
PROBLEMS = {p.id: p for p in load_problems("humaneval", limit=6)}
ADD = Problem("add", "program", prompt='from math import fsum\n\n\ndef add(a, b):\n    """Add."""\n',
              entry_point="add", test="def check(candidate):\n    assert candidate(1, 2) == 3\n")


def _real(mode):
    return [(PROBLEMS[a["problem"]], a["text"]) for a in REAL["answers"] if a["mode"] == mode]


def test_real_chat_answers_give_programs_that_define_the_entry_point_after_the_prompt():
    answers = _real("chat")
    assert len(answers) == 6 and REAL["model"] == "smollm2-135m"
    for problem, text in answers:
        program = extract_program(problem, text, "chat")
        assert program.startswith(problem.prompt.rstrip())  # the prompt's imports (typing.List) stay defined
        assert f"def {problem.entry_point}(" in program[len(problem.prompt):]
        assert "This function" not in program and "Example usage" not in program  # prose after the block is gone
        if problem.id != "HumanEval/1":  # that answer ran out of tokens inside a line: the sandbox reports it
            ast.parse(program)


def test_real_completions_are_cut_at_the_next_top_level_statement():
    for problem, text in _real("completion"):
        program = extract_program(problem, text, "completion")
        assert program.startswith(problem.prompt)
        body = program[len(problem.prompt):]
        assert not any(s in body for s in COMPLETION_STOP)
    cut = {p.id: extract_program(p, t, "completion") for p, t in _real("completion")}
    assert cut["HumanEval/3"] == PROBLEMS["HumanEval/3"].prompt  # "\ndef " straight away: an empty body


def test_real_answers_are_scored_without_a_crash(sandbox):
    answers = [Answer(f"{mode}/{p.id}", p, t, mode) for mode in ("chat", "completion") for p, t in _real(mode)]
    chat = [a for a in answers if a.key.startswith("chat/")]
    outcomes, jobs = SCORERS["program"](sandbox, chat, 5.0)
    assert jobs == len(chat) and all(o.passed or o.error for o in outcomes)
    completion = [a for a in answers if a.key.startswith("completion/")]
    outcomes, _ = SCORERS["program"](sandbox, completion, 5.0)
    assert all(o.passed or o.error for o in outcomes)


@pytest.mark.parametrize("text,expected_tail", [
    ("```python\ndef add(a, b):\n    return a + b\n```\nThis adds.", "def add(a, b):\n    return a + b\n"),
    ("Sure:\n```\ndef add(a, b):\n    return fsum([a, b])\n```", "def add(a, b):\n    return fsum([a, b])\n"),
    ("```python\nimport math\n```\n```python\ndef add(a, b):\n    return a + b\n```",
     "def add(a, b):\n    return a + b\n"),  # the block that defines the entry point
    ("```python\ndef add(a, b):\n    return a + b", "def add(a, b):\n    return a + b\n"),  # ran out of tokens
    ("def add(a, b):\n    return a + b", "def add(a, b):\n    return a + b\n"),  # no fence at all
])
def test_chat_extraction_shapes(text, expected_tail):
    program = program_from_chat(ADD, text)
    assert program.startswith(ADD.prompt.rstrip()) and program.endswith(expected_tail)
    ast.parse(program)


def test_a_chat_answer_with_only_the_body_continues_the_prompt():
    assert program_from_chat(ADD, "```python\n    return a + b\n```") == ADD.prompt + "    return a + b\n"


def test_completion_stops_and_cut():
    assert cut_at_stop("    return a + b\n\ndef other():\n    pass") == "    return a + b\n"
    assert cut_at_stop("    return a + b\nif __name__ == '__main__':") == "    return a + b"
    assert cut_at_stop("    return a + b\n") == "    return a + b\n"
    assert code_blocks("x\n```py\n1\n```\n```\n2") == [("py", "1\n"), ("", "2")]


def test_prompts_per_kind():
    msgs = chat_messages(ADD)
    assert [m["role"] for m in msgs] == ["system", "user"] and "Complete the Python function `add`" in msgs[1]["content"]
    assert ADD.prompt.rstrip() in msgs[1]["content"]
    mbpp = Problem("m", "program", prompt='"""\nWrite a function to add.\nassert add(1, 2) == 3\n"""\n',
                   entry_point="add", test="def check(candidate):\n    pass\n")
    assert "Write the Python function `add` described below" in chat_messages(mbpp)[1]["content"]
