"""Benchmark files in the layouts their authors publish, written here row for row (EvalPlus's HumanEval+ and MBPP+,
HumanEval's `test` layout, CRUXEval's release): they load, their reference solutions score 100%, candidates are
scored as the authors score them (outputs against the canonical solution's, atol for floats, base and plus apart),
and the edge rows of the real files (an entry point named `check`, a no-argument call, a lambda input, a prompt of
megabytes) are handled, through `populora eval` on the tiny model where a model is needed."""

from __future__ import annotations

import json

import pytest

from coordinator.cli import main
from populora.evals.benchmarks import load_problems
from populora.evals.evalplus import with_expected
from populora.evals.problem import Problem
from populora.evals.scoring import SCORERS, Answer, check_references, run_programs

MEAN_PROMPT = 'def mean(xs):\n    """The arithmetic mean of a non-empty list of numbers."""\n'
CHECK_PROMPT = 'def check(n):\n    """Whether n is even."""\n'
HUMANEVAL_PLUS = [  # task_id, prompt, entry_point, canonical_solution, base_input, plus_input, atol, contract
    {"task_id": "HumanEval/0", "prompt": MEAN_PROMPT, "entry_point": "mean",
     "canonical_solution": "    return sum(xs) / len(xs)\n", "base_input": [[[1.0, 2.0]], [[0.1, 0.2, 0.3]]],
     "plus_input": [[[1e-9, 3.0, 7.5]], [[2.0, 4.0, 6.0, 8.0]]], "atol": 0,
     "contract": "\n    assert len(xs) > 0, \"invalid inputs\"  # $_CONTRACT_$\n"},
    {"task_id": "HumanEval/1", "prompt": CHECK_PROMPT, "entry_point": "check",
     "canonical_solution": "    return n % 2 == 0\n", "base_input": [[1], [2]], "plus_input": [[10 ** 20], [-3]],
     "atol": 0, "contract": "\n    assert isinstance(n, int)  # $_CONTRACT_$\n"},
    {"task_id": "HumanEval/2", "prompt": 'def halves(n):\n    """n halved k times, k = 0..3."""\n',
     "entry_point": "halves", "canonical_solution": "    return [n / 2 ** k for k in range(4)]\n",
     "base_input": [[1.0]], "plus_input": [[3.3], [1e-7]], "atol": 1e-6, "contract": ""},
]
MBPP_PLUS = [  # as HumanEval+, with `assertion`; the prompt describes the function, the solution is the whole def
    {"task_id": "Mbpp/2", "prompt": '"""\nWrite a function to find the shared elements from the given two lists.\n'
                                    'assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"""\n',
     "entry_point": "similar_elements",
     "canonical_solution": "\ndef similar_elements(test_tup1, test_tup2):\n"
                           "  return tuple(set(test_tup1) & set(test_tup2))\n",
     "base_input": [[[3, 4, 5, 6], [5, 7, 4, 10]]], "plus_input": [[[1, 2, 3], [4, 5]], [[], [1]]], "atol": 0,
     "contract": "", "assertion": "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))"},
]
HUMANEVAL_TEST_LAYOUT = [  # HumanEval's own layout: `test` defines check(candidate), here for a function named check
    {"task_id": "T/0", "prompt": CHECK_PROMPT, "entry_point": "check", "canonical_solution": "    return n % 2 == 0\n",
     "test": "def check(candidate):\n    assert candidate(2) is True\n    assert candidate(3) is False\n"},
]
CRUXEVAL = [  # code, input, output, id
    {"code": "def f(nums):\n    return [n * n for n in nums if n % 2]", "input": "[1, 2, 3]", "output": "[1, 9]",
     "id": "sample_0"},
    {"code": "def f():\n    return 'x' * 3", "input": "", "output": "'xxx'", "id": "sample_1"},
    {"code": "def f(g, x):\n    return g(x) + 1", "input": "lambda v: v * 2, 5", "output": "11", "id": "sample_2"},
    {"code": "def f(a, b):\n    return a - b", "input": "10, 4", "output": "6", "id": "sample_3"},
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _cli(tmp_path, *args):
    return main(["eval", "--preset", "cpu-tiny", "--set", f"run.output_dir={tmp_path / 'runs'}",
                 "--set", f"model.cache_dir={tmp_path / 'cache'}", "--max-new-tokens", "6", *args])


@pytest.fixture
def cache(tmp_path, tiny):
    """The tiny model from the session's cache; EvalPlus's expected outputs in a fresh one."""
    from populora.models import cache_dir

    root = cache_dir()
    fresh = tmp_path / "cache"
    (fresh / "models").mkdir(parents=True)
    for sub in ("models", "tokenizers"):
        for entry in (root / sub).glob("*"):
            if sub == "tokenizers" or entry.name.startswith("tiny-"):
                (fresh / sub).mkdir(exist_ok=True)
                (fresh / sub / entry.name).symlink_to(entry)
    return fresh


def _answers(problem: Problem, programs: dict[str, str]) -> list[Answer]:
    return [Answer(key, problem, text, "completion") for key, text in programs.items()]


def test_evalplus_outputs_are_compared_with_the_canonical_solutions(sandbox, tmp_path):
    problems = load_problems("humaneval-plus", _write(tmp_path / "HumanEvalPlus.jsonl", HUMANEVAL_PLUS))
    assert [p.kind for p in problems] == ["evalplus"] * 3
    ready = with_expected(sandbox, problems, tmp_path / "cache")
    mean, check, halves = ready
    answers = _answers(mean, {
        "exact": "    return sum(xs) / len(xs)\n",
        "within_atol": "    return sum(xs) / len(xs) + 1e-9\n",  # no atol given: floats within 1e-6, as EvalPlus
        "off": "    return sum(xs) / len(xs) + 1e-3\n",
        "base_only": "    return sum(xs) / len(xs) if len(xs) < 3 or xs[0] > 0.05 else 0.0\n",
        "int_for_float": "    return round(sum(xs) / len(xs))\n",
        "exits": "    import os\n    os._exit(0)\n",
    }) + _answers(check, {"check": "    return not n % 2\n", "check_wrong": "    return n % 2 == 1\n"}) + _answers(
        halves, {"halves_close": "    return [n * 0.5 ** k + 5e-7 for k in range(4)]\n",
                 "halves_far": "    return [n * 0.5 ** k + 5e-6 for k in range(4)]\n"})
    outcomes, jobs = SCORERS["evalplus"](sandbox, answers, 10.0)
    got = {a.key: o for a, o in zip(answers, outcomes)}
    assert jobs == 2 * len(answers)  # a base and a plus job per answer (inputs fit one job each)
    assert (got["exact"].base, got["exact"].passed) == (True, True)
    assert (got["within_atol"].base, got["within_atol"].passed) == (True, True)
    assert (got["off"].base, got["off"].passed) == (False, False) and got["off"].error.startswith("base input 0")
    assert (got["base_only"].base, got["base_only"].passed) == (True, False)
    assert got["base_only"].error.startswith("plus input 0: returned 0.0")
    assert got["int_for_float"].base is False  # a value of another type is never close
    assert not got["exits"].passed and "SystemExit" in got["exits"].error and "sandbox_error" not in got["exits"].error
    assert (got["check"].passed, got["check_wrong"].passed) == (True, False)  # an entry point named check
    assert (got["halves_close"].passed, got["halves_far"].passed) == (True, False)  # atol 1e-6 from the row


def test_expected_outputs_are_cached_by_the_files_digest(sandbox, tmp_path):
    problems = load_problems("humaneval-plus", _write(tmp_path / "p.jsonl", HUMANEVAL_PLUS))
    first = with_expected(sandbox, problems, tmp_path / "cache")
    [cached] = (tmp_path / "cache" / "evals" / "expected").glob("*.json")
    assert cached.stem == problems[0].digest

    class NoSandbox:
        def Execute(self, request):
            raise AssertionError("the expected outputs should have come from the cache")

    again = with_expected(NoSandbox(), load_problems("humaneval-plus", str(tmp_path / "p.jsonl")), tmp_path / "cache")
    assert [p.expected for p in again] == [p.expected for p in first]
    assert [o.text for o in first[0].expected["base"]] == ["1.5", "0.20000000000000004"]


def test_a_test_layout_entry_point_named_check_can_pass(sandbox, tmp_path):
    [p] = load_problems("humaneval", _write(tmp_path / "he.jsonl", HUMANEVAL_TEST_LAYOUT))
    jsonl = load_problems("jsonl", _write(tmp_path / "j.jsonl", [
        {"id": "j", "prompt": CHECK_PROMPT, "entry_point": "check", "solution": "    return n % 2 == 0\n",
         "asserts": ["assert check(4) is True", "assert check(5) is False"]}]))[0]
    right, wrong = "    return n % 2 == 0\n", "    return True\n"
    outcomes = run_programs(sandbox, [("r", p, p.prompt + right), ("w", p, p.prompt + wrong),
                                      ("jr", jsonl, jsonl.prompt + right), ("jw", jsonl, jsonl.prompt + wrong)], 10.0)
    assert [o.passed for o in outcomes] == [True, False, True, False], [o.error for o in outcomes]


def test_cruxeval_release_rows_all_load(tmp_path):
    path = _write(tmp_path / "cruxeval.jsonl", CRUXEVAL)
    o, i = load_problems("cruxeval-o", path), load_problems("cruxeval-i", path)
    assert [p.id for p in o] == [p.id for p in i] == ["sample_0", "sample_1", "sample_2", "sample_3"]
    assert o[1].task.inputs == [""] and o[1].task.program.startswith("def f():")  # a call with no arguments
    assert [p.set_apart != "" for p in o] == [False] * 4  # output prediction never needs the input as an answer
    assert [p.set_apart != "" for p in i] == [False, False, True, False]
    assert "not an allowed answer expression" in i[2].set_apart and "lambda" in i[2].set_apart.lower()
    inf = _write(tmp_path / "inf.jsonl", [{"code": "def f():\n    return float('inf')", "input": "", "output": "inf",
                                            "id": "sample_9"}])
    for name in ("cruxeval-o", "cruxeval-i"):  # no answer can equal an output the verifier cannot rebuild
        [p] = load_problems(name, inf)
        assert "its output inf is not a literal the verifier can rebuild" in p.set_apart


@pytest.mark.parametrize("name,rows,counted,apart", [
    ("humaneval-plus", HUMANEVAL_PLUS, 3, 0), ("mbpp-plus", MBPP_PLUS, 1, 0),
    ("humaneval", HUMANEVAL_TEST_LAYOUT, 1, 0), ("cruxeval-o", CRUXEVAL, 4, 0), ("cruxeval-i", CRUXEVAL, 3, 1)])
def test_check_references_gives_100_percent_on_the_files(tmp_path, cache, capsys, name, rows, counted, apart):
    path = _write(tmp_path / "data.jsonl", rows)
    out = tmp_path / "refs.json"
    assert _cli(tmp_path, "--benchmark", name, "--data", path, "--check-references", "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert f"{counted}/{counted} pass (100.0%), 0 fail" in text and f"{apart} set apart" in text
    statuses = [r["status"] for r in json.loads(out.read_text())["references"]]
    assert statuses.count("passed") == counted and statuses.count("set_apart") == apart
    if apart:
        assert "SET APART sample_2" in text


def test_check_references_prints_each_failure_with_its_reason(tmp_path, cache, capsys):
    broken = [HUMANEVAL_PLUS[0], dict(HUMANEVAL_PLUS[1], plus_input=[["a"]]), HUMANEVAL_PLUS[2]]
    crux = [dict(CRUXEVAL[0], output="[1, 4]")]
    assert _cli(tmp_path, "--benchmark", "humaneval-plus", "--data", _write(tmp_path / "b.jsonl", broken),
                "--check-references") == 1
    text = capsys.readouterr().out
    assert "FAIL HumanEval/1" in text and "plus input 0: the canonical solution raised TypeError" in text
    assert "2/3 pass" in text and "FAIL HumanEval/0" not in text
    assert _cli(tmp_path, "--benchmark", "cruxeval-o", "--data", _write(tmp_path / "c.jsonl", crux),
                "--check-references") == 1
    assert "FAIL sample_0" in capsys.readouterr().out


@pytest.mark.slow
def test_evalplus_through_the_cli_reports_base_and_plus(tmp_path, cache, capsys):
    out = tmp_path / "scores.json"
    assert _cli(tmp_path, "--base", "--benchmark", "mbpp-plus", "--data", _write(tmp_path / "m.jsonl", MBPP_PLUS),
                "--out", str(out)) == 0
    [result] = json.loads(out.read_text())["results"]
    assert result["protocol"] == "benchmark" and set(result["splits"]) == {"base", "plus"}
    assert set(result["problems"][0]) == {"id", "passed", "n", "error", "base_passed"}
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert head.split()[:3] == ["target", "benchmark", "protocol"] and head.split()[6:8] == ["base", "plus"]
    assert row.split()[:3] == ["base", "mbpp-plus", "benchmark"]  # the protocol used, named


@pytest.mark.slow
def test_cruxeval_input_rows_set_apart_are_out_of_the_denominator(tmp_path, cache, capsys):
    out = tmp_path / "scores.json"
    assert _cli(tmp_path, "--base", "--benchmark", "cruxeval-i", "--data", _write(tmp_path / "c.jsonl", CRUXEVAL),
                "--protocol", "training", "--out", str(out)) == 0
    [result] = json.loads(out.read_text())["results"]
    assert result["n_problems"] == 3 and [p["id"] for p in result["problems"]] == ["sample_0", "sample_1", "sample_3"]
    assert [a["id"] for a in result["set_apart"]] == ["sample_2"] and result["protocol"] == "training"
    assert "1 problem(s) set apart, not asked and not in the denominator" in capsys.readouterr().out


def test_a_prompt_over_the_context_is_refused_by_its_line(tmp_path, cache, capsys):
    rows = [{"id": "ok", "prompt": "def f(x):\n", "entry_point": "f", "asserts": ["assert f(1) == 1"]},
            {"id": "huge", "prompt": "def f(x):\n    \"\"\"" + "many words here " * 330_000 + "\"\"\"\n",
             "entry_point": "f", "asserts": ["assert f(1) == 1"]}]
    path = _write(tmp_path / "big.jsonl", rows)
    assert (tmp_path / "big.jsonl").stat().st_size > 5_000_000
    out = tmp_path / "scores.json"
    assert _cli(tmp_path, "--base", "--benchmark", "jsonl", "--data", path, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "big.jsonl:2:" in err and "'huge'" in err and "context of 4096 tokens" in err
    assert not out.exists()


def test_references_of_a_file_without_solutions_are_counted_apart(sandbox, tmp_path):
    problems = load_problems("jsonl", _write(tmp_path / "j.jsonl", [
        {"id": "a", "prompt": "def f(x):\n", "entry_point": "f", "asserts": ["assert f(1) == 1"]}]))
    checks, _ = check_references(sandbox, problems, 10.0)
    assert [(c.status, c.reason) for c in checks] == [("none", "the file gives no reference solution")]


def test_a_run_whose_values_are_over_the_output_limit_is_split(sandbox, tmp_path):
    """32 outputs of 990 two-byte characters (under the digest size, over the sandbox's 64 KB together as it sends
    them) come back whole from smaller runs; the candidate is still judged on every one."""
    row = {"task_id": "T/0", "prompt": "def pad(c, n):\n", "entry_point": "pad", "canonical_solution": "    return c * n\n",
           "base_input": [["a", 990]], "plus_input": [[chr(0xE0 + k % 20), 990] for k in range(40)], "atol": 0,
           "contract": ""}
    [p] = with_expected(sandbox, load_problems("humaneval-plus", _write(tmp_path / "pad.jsonl", [row])), None)
    assert [o.status for o in p.expected["plus"]] == ["ok"] * 40
    answers = _answers(p, {"right": "    return c * n\n", "last_wrong": "    return c * n if c != '\\xf3' else c\n"})
    outcomes, jobs = SCORERS["evalplus"](sandbox, answers, 10.0)
    assert [(o.base, o.passed) for o in outcomes] == [(True, True), (True, False)]
    assert "plus input 19" in outcomes[1].error
    assert jobs > 2 * 3  # per answer: a base job, and more than the two runs of 32 and 8 plus inputs
