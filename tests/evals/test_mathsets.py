"""The math benchmarks (spec 18): GSM8K, SVAMP and MATH-500 loaded from rows of the tests' own in each publisher's
layout, malformed rows refused with their line, the prompt, the scorer, `populora eval --check-references`, and the
published files (read from $POPULORA_BENCHMARKS, never carried in the tree): every reference answer passes."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest

from coordinator.cli import main
from populora.evals import EvalTarget, evaluate, load_problems
from populora.evals.datafiles import BENCHMARKS_ENV, PUBLISHED
from populora.evals.problem import BenchmarkError
from populora.evals.prompts import MATH_INSTRUCTION, prompt_form, prompt_of
from populora.evals.scoring import SCORERS, Answer, check_references
from populora.tasks.mathcheck import Gold, MathChecker
from tests.conftest import published_benchmarks
from tests.evals.own_rows import write_jsonl

GSM8K_ROWS = [
    {"question": "Tom has 3 boxes of 12 pencils and gives away 5 pencils. How many pencils does he keep?",
     "answer": "He had 3 * 12 = <<3*12=36>>36 pencils.\nHe keeps 36 - 5 = <<36-5=31>>31.\n#### 31", "idx": 0},
    {"question": "A farm sells 250 eggs a day for 5 days. How many eggs is that?",
     "answer": "250 * 5 = 1,250\n#### 1,250"},
    {"question": "The temperature was 4 degrees and fell by 9. What is it now?", "answer": "4 - 9 = -5\n#### -5"},
]
SVAMP_ROWS = [
    {"ID": "own-1", "Body": "Lisa has 8 stamps and buys 5 more", "Question": "How many stamps does she have?",
     "Equation": "( 8.0 + 5.0 )", "Answer": 13.0, "Type": "Addition"},
    {"ID": "own-2", "Body": "A rope of 7 meters is cut into 2 equal pieces.", "Question": "How long is each piece?",
     "Equation": "( 7.0 / 2.0 )", "Answer": 3.5, "Type": "Common-Division"},
]
MATH500_ROWS = [
    {"problem": "What is $\\frac{1}{2} + \\frac{1}{3}$?", "solution": "It is $\\boxed{\\frac{5}{6}}$.",
     "answer": "\\frac{5}{6}", "subject": "Prealgebra", "level": 1, "unique_id": "own/prealgebra/1.json"},
    {"problem": "Solve $x^2 = 4$ for all real $x$.", "solution": "$x = \\boxed{-2, 2}$",
     "answer": "-2, 2", "subject": "Algebra", "level": 2, "unique_id": "own/algebra/2.json"},
    {"problem": "Write the point $(1,1)$ in polar coordinates.", "solution": "...",
     "answer": "\\left( \\sqrt{2}, \\frac{\\pi}{4} \\right)", "subject": "Precalculus", "level": 2,
     "unique_id": "own/precalculus/3.json"},
]


# ------------------------------------------------------------------------------------------------ loading
def test_gsm8k_rows_become_questions_with_the_number_after_the_marks(tmp_path):
    problems = load_problems("gsm8k", str(write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS)))
    assert [p.id for p in problems] == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]  # idx when given, else the position
    assert [p.gold for p in problems] == [Gold("31"), Gold("1250"), Gold("-5")]
    assert problems[0].kind == "math" and problems[0].prompt == GSM8K_ROWS[0]["question"]
    assert problems[1].where == f"{tmp_path / 'g.jsonl'}:2" and len(problems[1].digest) == 64


@pytest.mark.parametrize("array", [False, True])
def test_svamp_rows_join_body_and_question_as_lines_or_as_its_release_array(tmp_path, array):
    path = tmp_path / "s.json"
    if array:
        path.write_text(json.dumps(SVAMP_ROWS, indent=2))
    else:
        write_jsonl(path, SVAMP_ROWS)
    problems = load_problems("svamp", str(path))
    assert [p.id for p in problems] == ["own-1", "own-2"]
    assert problems[0].prompt == "Lisa has 8 stamps and buys 5 more. How many stamps does she have?"
    assert problems[1].prompt.startswith("A rope of 7 meters is cut into 2 equal pieces. How long")
    assert [p.gold for p in problems] == [Gold("13"), Gold("3.5", is_float=True)]


def test_math500_rows_keep_the_answer_as_written(tmp_path):
    problems = load_problems("math500", str(write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS)))
    assert [p.id for p in problems] == [r["unique_id"] for r in MATH500_ROWS]
    assert problems[2].gold == Gold("\\left( \\sqrt{2}, \\frac{\\pi}{4} \\right)")
    assert problems[0].meta == {"subject": "Prealgebra", "level": 1}


@pytest.mark.parametrize("name, row, words", [
    ("gsm8k", {"question": "q"}, "missing field 'answer'"),
    ("gsm8k", {"question": "q", "answer": "it is 5"}, "no '####'"),
    ("gsm8k", {"question": "q", "answer": "#### five"}, "'five', not a number"),
    ("gsm8k", {"question": "", "answer": "#### 5"}, "field 'question' is empty"),
    ("svamp", {"Body": "b", "Question": "q", "Answer": "13"}, "'Answer' must be a number, got str"),
    ("svamp", {"Body": "b", "Question": "q", "Answer": True}, "'Answer' must be a number, got bool"),
    ("svamp", {"Body": "b", "Question": "q"}, "'Answer' must be a number, got nothing"),
    ("svamp", {"Body": "b", "Question": "q", "Answer": float("nan")}, "must be finite"),
    ("math500", {"problem": "p", "answer": 5}, "field 'answer' must be a string, got int"),
    ("math500", {"problem": "p", "answer": "   "}, "field 'answer' is empty"),
    ("math500", {"problem": "p", "answer": "1" * 501}, "at most 500"),
])
def test_a_malformed_row_is_refused_with_its_line(tmp_path, name, row, words):
    good = {"gsm8k": GSM8K_ROWS[0], "svamp": SVAMP_ROWS[0], "math500": MATH500_ROWS[0]}[name]
    path = write_jsonl(tmp_path / "f.jsonl", [good, row])
    with pytest.raises(BenchmarkError) as e:
        load_problems(name, str(path))
    assert f"{path}:2" in str(e.value) and words in str(e.value), str(e.value)


def test_bad_files_and_repeated_ids_are_refused(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "answer": "#### 1"}\nnot json\n')
    with pytest.raises(BenchmarkError, match=r"bad.jsonl:2: not valid JSON"):
        load_problems("gsm8k", str(tmp_path / "bad.jsonl"))
    (tmp_path / "arr.json").write_text('[{"Body": "b", "Question": "q", "Answer": 1}, 7]')
    with pytest.raises(BenchmarkError, match="item 2 of the array: expected a JSON object"):
        load_problems("svamp", str(tmp_path / "arr.json"))
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(BenchmarkError, match="the array is empty"):
        load_problems("svamp", str(tmp_path / "empty.json"))
    path = write_jsonl(tmp_path / "twice.jsonl", [MATH500_ROWS[0], MATH500_ROWS[0]])
    with pytest.raises(BenchmarkError, match="repeats line 1"):
        load_problems("math500", str(path))


@pytest.mark.parametrize("name", ["gsm8k", "svamp", "math500"])
def test_a_missing_file_names_where_it_was_looked_for(name, tmp_path, monkeypatch):
    with pytest.raises(BenchmarkError, match="does not exist"):
        load_problems(name, str(tmp_path / "nope.jsonl"))
    monkeypatch.delenv(BENCHMARKS_ENV, raising=False)
    with pytest.raises(BenchmarkError) as e:
        load_problems(name)
    assert PUBLISHED[name] in str(e.value) and "--data" in str(e.value) and "github.com" in str(e.value)
    monkeypatch.setenv(BENCHMARKS_ENV, str(tmp_path))
    with pytest.raises(BenchmarkError, match=str(tmp_path / PUBLISHED[name])):
        load_problems(name)


# ------------------------------------------------------------------------------------------------ prompt and scoring
def test_the_question_is_asked_with_the_instruction_to_box_the_answer(tmp_path):
    (problem,) = load_problems("gsm8k", str(write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS[:1])))
    for protocol in ("benchmark", "training"):
        assert prompt_form(problem, protocol, chat=True) == "math_chat"
        assert prompt_form(problem, protocol, chat=False) == "math_completion"
    _, messages, stops = prompt_of(problem, "math_chat")
    assert messages == [{"role": "user", "content": f"{GSM8K_ROWS[0]['question']}\n{MATH_INSTRUCTION}"}]
    raw, none, _ = prompt_of(problem, "math_completion")
    assert raw == f"{GSM8K_ROWS[0]['question']}\n{MATH_INSTRUCTION}\n" and none == [] and stops == ()
    assert "\\boxed{}" in MATH_INSTRUCTION


def test_the_scorer_judges_boxed_answers_and_runs_no_sandbox_job(tmp_path):
    problems = load_problems("svamp", str(write_jsonl(tmp_path / "s.jsonl", SVAMP_ROWS)))
    texts = [(problems[0], "8 + 5 = 13, so \\boxed{13}."), (problems[1], "\\boxed{\\frac{7}{2}}"),
             (problems[1], "\\boxed{3.4}"), (problems[0], "thirteen"), (problems[0], "\\boxed{10^{10^{10}}}")]
    answers = [Answer(str(k), p, text, "math_chat") for k, (p, text) in enumerate(texts)]
    outcomes, jobs = SCORERS["math"](None, answers, 10.0)
    assert jobs == 0
    assert [o.passed for o in outcomes] == [True, True, False, False, False]
    assert outcomes[2].error.startswith("wrong: not_equal")
    assert outcomes[3].error.startswith("malformed: no_boxed")
    assert outcomes[4].error.startswith("timeout: time_limit: no verdict within 3 s")


@pytest.mark.slow
def test_the_bare_model_is_evaluated_end_to_end(services, tmp_path):
    """The tiny random model through the harness: one batch, every answer judged (a random model writes no box)."""
    path = write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS)
    (result,) = evaluate(services, [EvalTarget("base", None)], "math500", data=str(path), max_new_tokens=8,
                         chat=True)
    assert (result.benchmark, result.protocol, result.n_problems, result.pass_at_1) == ("math500", "benchmark", 3, 0.0)
    assert all(p.error.startswith("malformed: no_boxed") for p in result.problems), result.problems


def test_check_references_in_the_command_line(tmp_path, capsys):
    good = write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS)
    assert main(["eval", "--check-references", "--benchmark", "gsm8k", "--data", str(good), "--preset", "cpu-tiny",
                 "--set", f"run.output_dir={tmp_path}"]) == 0
    assert "references of gsm8k: 3/3 pass (100.0%), 0 fail" in capsys.readouterr().out
    bad = write_jsonl(tmp_path / "b.jsonl", [GSM8K_ROWS[0], {"question": "q", "answer": "#### x"}])
    assert main(["eval", "--check-references", "--benchmark", "gsm8k", "--data", str(bad), "--preset", "cpu-tiny",
                 "--set", f"run.output_dir={tmp_path}"]) == 2
    assert f"{bad}:2" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the published files
@pytest.mark.slow
def test_every_reference_of_the_published_files_passes():
    """Each file's own answers, boxed, pass the checker: GSM8K 1,319, SVAMP 1,000, MATH-500 500 (spec 18)."""
    published_benchmarks(*(PUBLISHED[n] for n in ("gsm8k", "svamp", "math500")))
    for name, count in (("gsm8k", 1319), ("svamp", 1000), ("math500", 500)):
        problems = load_problems(name)
        start = time.perf_counter()
        checks, jobs = check_references(None, problems, 10.0)
        failed = [(c.id, c.reason) for c in checks if c.status != "passed"]
        assert (len(checks), failed, jobs) == (count, [], 0), name
        assert time.perf_counter() - start < count * 0.05, name  # a few ms an answer here


@pytest.mark.slow
def test_the_checker_reads_math500_solutions_and_tells_gsm8k_answers_apart():
    """Beyond the boxed references: MATH-500's worked solutions, read whole, end in a box equal to the row's answer
    (all 500); and each GSM8K reference against the next problem's gold is wrong unless the two numbers are equal."""
    directory = published_benchmarks(PUBLISHED["math500"], PUBLISHED["gsm8k"])
    rows = [json.loads(line) for line in (directory / PUBLISHED["math500"]).read_text().splitlines() if line.strip()]
    problems = load_problems("math500")
    gsm = load_problems("gsm8k")
    shifted = [(f"\\boxed{{{p.gold.text}}}", q.gold) for p, q in zip(gsm, gsm[1:] + gsm[:1])]
    with MathChecker(workers=2) as checker:
        solutions = checker.check_many([(r["solution"], p.gold) for r, p in zip(rows, problems)])
        crossed = checker.check_many(shifted)
    assert [(p.id, c.outcome) for p, c in zip(problems, solutions) if not c.correct] == []
    equal = [Fraction(text[len('\\boxed{'):-1]) == Fraction(gold.text) for text, gold in shifted]
    assert [c.correct for c in crossed] == equal
    assert sum(equal) < len(equal) / 20
