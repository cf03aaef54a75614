"""The two prompt protocols: `training` (the format adapters were trained on) and `benchmark` (as each benchmark's
authors prompt and read answers: few-shot assertions for CRUXEval, signature-and-docstring completion for HumanEval
and MBPP), on the bare SmolLM2-135M-Instruct's real answers to rows in CRUXEval's layout (the tests' own:
tests/evals/own_rows.py; the answers in tests/evals/data/smollm2_outputs.json, made by tests/evals/smollm2_outputs.py)
and on the shapes answers take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populora.evals.benchmarks import load_problems
from populora.evals.harness import EvalTarget, _request, target_protocol
from populora.evals.problem import Problem
from populora.evals.prompts import (
    CRUXEVAL_STOP,
    DESCRIPTION_STOP,
    extract_program,
    prompt_form,
    prompt_of,
    read_task_answer,
)
from populora.evals.scoring import SCORERS, Answer
from tests.evals.own_rows import CRUXEVAL_LAYOUT_ROWS, write_jsonl

DATA = Path(__file__).with_name("data")
REAL = json.loads((DATA / "smollm2_outputs.json").read_text())
HUMANEVAL = load_problems("humaneval", limit=1)[0]
MBPP = Problem("Mbpp/2", "evalplus", prompt='"""\nWrite a function to reverse a list.\nassert rev([1, 2]) == [2, 1]\n"""\n',
               entry_point="rev")


@pytest.fixture(scope="module")
def crux(tmp_path_factory) -> dict[str, dict[str, Problem]]:
    """The tests' own CRUXEval-layout rows as cruxeval-o and cruxeval-i problems, by id."""
    rows = write_jsonl(tmp_path_factory.mktemp("rows") / "rows.jsonl", CRUXEVAL_LAYOUT_ROWS)
    return {name: {p.id: p for p in load_problems(name, rows)} for name in ("cruxeval-o", "cruxeval-i")}


def test_forms_per_protocol_and_model_kind(crux):
    o = crux["cruxeval-o"]["sample_0"]
    heldout = Problem("h", "task", task_type="code_o")
    assert [prompt_form(o, p, True) for p in ("training", "benchmark")] == ["training", "cruxeval"]
    assert prompt_form(heldout, "benchmark", True) == "training"  # the project's own benchmark: its own format
    assert [prompt_form(HUMANEVAL, "training", c) for c in (True, False)] == ["chat", "completion"]
    assert prompt_form(HUMANEVAL, "benchmark", True) == "completion"  # the raw signature and docstring
    assert target_protocol(EvalTarget("base", None), None) == "benchmark"
    assert target_protocol(EvalTarget("a", "run.A0", 1), None) == "training"
    assert target_protocol(EvalTarget("a", "run.A0", 1), "benchmark") == "benchmark"


def test_benchmark_requests_are_raw_prompts_with_the_authors_stops(crux):
    base = EvalTarget("base", None)
    req = _request(crux["cruxeval-i"]["sample_2"], base, "r", "cruxeval", 1, 0.0, 64, 0)
    assert not req.messages and list(req.sampling.stop) == list(CRUXEVAL_STOP)
    assert req.prompt.endswith("def f(a, b):\n    return a - b\nassert f(??) == 6\n[/PYTHON]\n[ANSWER]\n")
    assert req.prompt.count("[/ANSWER]\n\n[PYTHON]") == 2  # two worked examples before the question
    out = _request(crux["cruxeval-o"]["sample_4"], base, "r", "cruxeval", 1, 0.0, 64, 0)
    assert "assert f() == ??" in out.prompt  # the no-argument row
    he = _request(HUMANEVAL, base, "r", "completion", 1, 0.0, 64, 0)
    assert he.prompt == HUMANEVAL.prompt and "\ndef " in he.sampling.stop
    mbpp = _request(MBPP, base, "r", "completion", 1, 0.0, 64, 0)
    assert list(mbpp.sampling.stop) == list(DESCRIPTION_STOP)  # the model writes the def: "\ndef " cannot stop it
    trained = _request(crux["cruxeval-o"]["sample_0"], base, "r", "training", 1, 0.0, 64, 0)
    assert trained.messages and "<answer>" in trained.messages[-1].content


@pytest.mark.parametrize("name,text,answer", [
    ("cruxeval-o", "assert f([1, 2, 3, 4, 5]) == [1, 9, 25]\n", "[1, 9, 25]"),
    ("cruxeval-o", "assert f(1) == 'a == b'", "'a == b'"),  # "==" inside the value
    ("cruxeval-o", "f([1]) == [1]\n[/ANSWER]\nmore", "[1]"),
    ("cruxeval-o", "def f(a, b):\n    return a + b\nassert f(10, 4) == 14\n", "14"),  # the line with ==
    ("cruxeval-o", "assert f(1) == [1, 2", "[1, 2"),  # cut off: the text after == (the verifier judges it)
    ("cruxeval-i", "assert f('hello', 3) == 'hel'", "'hello', 3"),
    ("cruxeval-i", "assert f() == 'xxx'", ""),
    ("cruxeval-i", "assert f(g(1)) == 2", "g(1)"),  # read; the verifier refuses the call as not restricted
])
def test_cruxeval_answers_are_read_as_its_authors_read_them(crux, name, text, answer):
    problem = next(iter(crux[name].values()))
    assert read_task_answer(problem, text, "cruxeval") == f"<think></think><answer>{answer}</answer>"


@pytest.mark.parametrize("text", ["", "I think the answer is 3.", "[/ANSWER]", "assert x"])
def test_a_cruxeval_answer_without_an_assertion_is_no_answer(crux, text):
    assert read_task_answer(crux["cruxeval-o"]["sample_0"], text, "cruxeval") is None


def test_cruxeval_answers_in_the_benchmark_form_are_judged_by_the_training_verifier(crux, sandbox):
    o, i = crux["cruxeval-o"], crux["cruxeval-i"]
    answers = [Answer("o_right", o["sample_2"], "assert f(10, 4) == 6\n", "cruxeval"),
               Answer("o_wrong", o["sample_2"], "assert f(10, 4) == 14\n", "cruxeval"),
               Answer("i_right", i["sample_5"], "assert f('help', 3) == 'hel'\n", "cruxeval"),  # another input
               Answer("i_none", i["sample_4"], "assert f() == 'xxx'\n", "cruxeval"),  # no arguments
               Answer("none", o["sample_0"], "The output is [1, 9, 25].", "cruxeval")]
    outcomes, _ = SCORERS["task"](sandbox, answers, 5.0)
    got = {a.key: o for a, o in zip(answers, outcomes)}
    assert [got[k].passed for k in ("o_right", "o_wrong", "i_right", "i_none")] == [True, False, True, True]
    assert got["o_wrong"].error.startswith("wrong")
    assert got["none"].error.startswith("malformed: no_answer")


def test_a_description_prompt_completion_keeps_the_function():
    text = "def rev(xs):\n    return xs[::-1]\n\n\ndef helper():\n    return 1\n\nif __name__ == '__main__':\n    pass"
    program = extract_program(MBPP, text, "completion")
    assert program == MBPP.prompt + "def rev(xs):\n    return xs[::-1]\n\n\ndef helper():\n    return 1\n"
    cut = extract_program(MBPP, "def rev(xs):\n    return xs[::-1]\n\ndef broken(:\n", "completion")
    assert cut.endswith("return xs[::-1]\n\n")  # the lines that parse (the budget cut the answer off)
    assert prompt_of(MBPP, "completion")[0] == MBPP.prompt


def _real_cruxeval(crux):
    return [(crux[a["mode"]][a["problem"]], a["text"]) for a in REAL["answers"] if a["mode"].startswith("cruxeval")]


def test_the_bare_models_cruxeval_answers_under_the_benchmark_protocol_are_read(crux, sandbox):
    """Under the training format every answer of the bare SmolLM2 was no_answer; under the benchmark protocol its
    real greedy answers hold an assertion the reading takes and the verifier judges."""
    real = _real_cruxeval(crux)
    assert len(real) == 15 and REAL["model"] == "smollm2-135m"  # 8 output rows, 7 input rows (one set apart)
    read = [read_task_answer(p, text, "cruxeval") for p, text in real]
    assert all(r is not None for r in read), [t for (_, t), r in zip(real, read) if r is None]
    answers = [Answer(f"{k}", p, text, "cruxeval") for k, (p, text) in enumerate(real)]
    outcomes, _ = SCORERS["task"](sandbox, answers, 5.0)
    assert not any("no_answer" in o.error for o in outcomes), [o.error for o in outcomes]
    inputs = [o for (p, _), o in zip(real, outcomes) if p.task_type == "code_i"]
    assert len(inputs) == 7 and all(o.error.startswith("wrong") for o in inputs)  # judged on their values
