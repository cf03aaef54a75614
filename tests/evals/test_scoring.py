"""The scorers on real data in the real sandbox: HumanEval's canonical solutions pass 164/164, a program that returns
None passes none, a program that loops or floods stdout is wrong (never a crash); task answers are judged by the
training verifier; pass@k is the unbiased estimator."""

from __future__ import annotations

import math

import pytest

from populora.evals.benchmarks import load_problems
from populora.evals.harness import materialise
from populora.evals.problem import Problem
from populora.evals.scoring import SCORERS, Answer, canonical_program, ks_for, pass_at_k, run_programs
from populora.tasks.seedgen import solution_text
from populora.tasks.triplet import Triplet


@pytest.fixture(scope="module")
def humaneval():
    return load_problems("humaneval")


def test_canonical_solutions_pass_all_164(sandbox, humaneval):
    assert len(humaneval) == 164
    outcomes = run_programs(sandbox, [(p.id, p, canonical_program(p)) for p in humaneval], 10.0)
    failed = [(p.id, o.error) for p, o in zip(humaneval, outcomes) if not o.passed]
    assert not failed and len(outcomes) == 164


def test_a_program_that_returns_none_passes_none(sandbox, humaneval):
    outcomes = run_programs(sandbox, [(p.id, p, p.prompt + "    return None\n") for p in humaneval], 10.0)
    assert sum(o.passed for o in outcomes) == 0
    assert all(o.error.startswith("error: ") for o in outcomes)


def test_loops_floods_and_crashes_are_wrong_answers(sandbox, humaneval):
    p = humaneval[0]
    bodies = {"loop": "    while True:\n        pass\n",
              "flood": "    while True:\n        print('x' * 4096)\n",
              "exit": "    raise SystemExit(0)\n",
              "os_exit": "    import os\n    os._exit(0)\n",
              "memory": "    return [0] * (10 ** 10)\n",
              "syntax": "    return (\n"}
    answers = [Answer(k, p, body, "completion") for k, body in bodies.items()]
    outcomes, jobs = SCORERS["program"](sandbox, answers, 2.0)
    got = dict(zip(bodies, outcomes))
    assert jobs == len(bodies) and not any(o.passed for o in outcomes)
    assert got["loop"].error.startswith("timeout")
    assert got["flood"].error.startswith("output_limit")
    assert got["os_exit"].error.startswith("error: SystemExit")  # the candidate's failure, not the sandbox's
    assert got["memory"].error.startswith(("memory", "error: MemoryError"))
    assert "SyntaxError" in got["syntax"].error or "never closed" in got["syntax"].error


def test_task_answers_are_judged_by_the_training_verifier(sandbox):
    """heldout problems become tasks through the sandbox's validation; a correct answer in the student format is
    correct, a wrong value wrong, a missing <think> malformed."""
    problems = materialise(_Services(sandbox), load_problems("heldout", limit=6))
    assert [p.task.task_type for p in problems] == ["code_o", "code_i", "code_f"] * 2
    right = [Answer(f"r{k}", p, solution_text(p.task, "because"), "training") for k, p in enumerate(problems)]
    outcomes, jobs = SCORERS["task"](sandbox, right, 5.0)
    assert all(o.passed for o in outcomes), [o.error for o in outcomes]
    assert jobs == len(problems)
    code_o = problems[0]
    wrong = [Answer("w", code_o, "<think>x</think><answer>'not it'</answer>"),
             Answer("m", code_o, f"<answer>{code_o.task.outputs[0]}</answer>")]
    outcomes, _ = SCORERS["task"](sandbox, wrong, 5.0)
    assert [o.passed for o in outcomes] == [False, False]
    assert outcomes[0].error.startswith("wrong") and outcomes[1].error.startswith("malformed")


def test_cruxeval_style_tasks_judge_output_and_input_prediction(sandbox):
    program = "def f(xs):\n    return sorted(xs)[::-1]"
    o = Problem("c/o", "task", task=Triplet("code_o", program, ["[3, 1, 2]"], ["[3, 2, 1]"]), task_type="code_o")
    i = Problem("c/i", "task", task=Triplet("code_i", program, ["[3, 1, 2]"], ["[3, 2, 1]"]), task_type="code_i")
    answers = [Answer("o1", o, "<think>sort</think><answer>[3, 2, 1]</answer>"),
               Answer("o2", o, "<think>sort</think><answer>[1, 2, 3]</answer>"),
               Answer("i1", i, "<think>any order</think><answer>[1, 2, 3]</answer>"),  # another right input
               Answer("i2", i, "<think>no</think><answer>[1]</answer>"),
               Answer("i3", i, "<think>hack</think><answer>__import__('os')</answer>")]
    outcomes, _ = SCORERS["task"](sandbox, answers, 5.0)
    assert [x.passed for x in outcomes] == [True, False, True, False, False]
    assert outcomes[4].error.startswith("malformed")


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # 1 - C(n-c, k) / C(n, k)
    for n, c, k in [(10, 3, 5), (20, 1, 10), (7, 0, 3), (7, 5, 3)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    assert ks_for(1) == [1] and ks_for(5) == [1, 2, 5] and ks_for(12) == [1, 2, 5, 10, 12]


class _Services:
    def __init__(self, sandbox):
        self.sandbox = sandbox
