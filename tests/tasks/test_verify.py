"""Proposal validation (spec 3, every reason code) and answer checking (spec 2) against the real sandbox."""

from __future__ import annotations

import pytest

from populora.config import TasksConfig
from populora.tasks import REASONS, Attempt, JobResult, Proposal, Triplet, check_answers, validate_proposals
from tests.tasks.test_mathword import CASES as MATH_CASES

SETTINGS = TasksConfig(timeout_s=3.0)  # generous: the machine may be shared


def teacher(program: str, inp: str = "1", think: bool = True) -> str:
    return (("<think>plan</think>" if think else "")
            + f"<answer>```python\n{program}\n```\n```input\n{inp}\n```</answer>")


def code_f_answer(inputs: list[str], message: str | None = "adds one") -> str:
    blocks = "".join(f"```input\n{i}\n```\n" for i in inputs)
    return f"<answer>{blocks}" + (f"```message\n{message}\n```" if message is not None else "") + "</answer>"


CASES = {
    "ok": Proposal("ok", "code_o", teacher("def g(a, b):\n    return sorted(set(a)) * b", "[3, 1, 3], 2")),
    "no_answer": Proposal("no_answer", "code_o", "```python\ndef f(a): return a\n```"),
    "no_program": Proposal("no_program", "code_o", "<answer>```input\n1\n```</answer>"),
    "no_input": Proposal("no_input", "code_i", "<answer>```python\ndef f(a):\n    return a\n```</answer>"),
    "too_few_inputs": Proposal("too_few_inputs", "code_f", code_f_answer(["1"] * 9), "def f(x):\n    return x"),
    "no_message": Proposal("no_message", "code_f", code_f_answer(["1"] * 10, None), "def f(x):\n    return x"),
    "no_given_program": Proposal("no_given_program", "code_f", code_f_answer(["1"] * 10)),
    "syntax_error": Proposal("syntax_error", "code_o", teacher("def f(a:\n    return a")),
    "not_one_def": Proposal("not_one_def", "code_o", teacher("def f(a):\n    return a\ndef g(b):\n    return b")),
    "banned_import": Proposal("banned_import", "code_o", teacher("import random\ndef f(a):\n    return a")),
    "banned_call": Proposal("banned_call", "code_o", teacher("def f(a):\n    return input()")),
    "banned_name": Proposal("banned_name", "code_o", teacher("def f(a):\n    return eval(a)", "'1'")),
    "banned_attribute": Proposal("banned_attribute", "code_o", teacher("def f(a):\n    return a.__class__")),
    "not_restricted": Proposal("not_restricted", "code_o", teacher("def f(a):\n    return a", "len([1])")),
    "timeout": Proposal("timeout", "code_o", teacher("def f(a):\n    while True:\n        a += 1")),
    "memory": Proposal("memory", "code_o", teacher("def f(a):\n    return len('x' * 10**10)")),
    "runtime_error": Proposal("runtime_error", "code_o", teacher("def f(a):\n    return a / 0")),
    "output_limit": Proposal("output_limit", "code_o", teacher("def f(a):\n    print('x' * 10**6)\n    return a")),
    "unsupported_output": Proposal("unsupported_output", "code_o", teacher("def f(a):\n    return print")),
    "output_too_long": Proposal("output_too_long", "code_o", teacher("def f(a):\n    return 'x' * 2000")),
    "output_not_literal": Proposal("output_not_literal", "code_o", teacher("def f(a):\n    return float('inf')")),
    "unknown_task_type": Proposal("unknown_task_type", "code_x", teacher("def f(a):\n    return a")),
}


@pytest.mark.slow
def test_every_reason_code_is_reached(zygote):
    got = {v.proposal_id: v for v in validate_proposals(list(CASES.values()), SETTINGS, zygote.run)}
    for name in CASES:
        assert got[name].reason == name, (name, got[name].reason, got[name].detail)
        assert got[name].valid == (name == "ok")
    stubbed = {"nondeterministic", "killed", "sandbox_error"}  # reached with a crafted runner below
    # math_w's: tests/tasks/test_mathword.py (duplicate in a batch of its own there)
    assert set(REASONS) == set(CASES) | stubbed | set(MATH_CASES) | {"duplicate"}


def test_valid_proposal_becomes_a_task(zygote):
    [v] = validate_proposals([CASES["ok"]], SETTINGS, zygote.run)
    t = v.task
    assert t.task_type == "code_o" and t.outputs == ["[1, 3, 1, 3]"] and t.inputs == ["[3, 1, 3], 2"]
    assert t.program.startswith("def f(a, b)") and t.task_id == "ok"
    assert set(t.complexity) == {"ast_depth", "cyclomatic", "lines_of_code"}


def test_code_f_keeps_the_last_n_inputs_and_computes_outputs(zygote):
    inputs = [str(i) for i in range(12)]
    p = Proposal("cf", "code_f", code_f_answer(inputs), "def add(x):\n    return x + 1", teacher_id="T0")
    [v] = validate_proposals([p], SETTINGS, zygote.run)
    assert v.valid, v.detail
    assert v.task.inputs == inputs[-10:] and v.task.outputs == [str(i + 1) for i in range(2, 12)]
    assert v.task.message == "adds one" and v.task.teacher_id == "T0"


def _runner(results_for):
    def run(jobs):
        return [results_for(j) for j in jobs]
    return run


def test_nondeterminism_killed_and_sandbox_error_map_to_reasons():
    calls = {"n": 0}

    def flip(job):
        calls["n"] += 1
        return JobResult(job.job_id, "ok", values=[calls["n"]], reprs=[str(calls["n"])])

    p = Proposal("p", "code_o", teacher("def f(a):\n    return a"))
    assert validate_proposals([p], SETTINGS, _runner(flip))[0].reason == "nondeterministic"
    for status in ("killed", "sandbox_error"):
        [v] = validate_proposals([p], SETTINGS, _runner(lambda j, s=status: JobResult(j.job_id, s, error="x")))
        assert v.reason == status


TASK = Triplet("code_o", "def f(a):\n    return a % 3", ["5"], ["2"], task_id="t")


def attempt(aid: str, task: Triplet, answer: str, think: bool = True) -> Attempt:
    return Attempt(aid, task, ("<think>t</think>" if think else "") + f"<answer>{answer}</answer>")


def test_checking_all_three_task_types(zygote):
    code_i = Triplet("code_i", TASK.program, ["5"], ["2"])
    code_f = Triplet("code_f", "def f(x):\n    return x * x", [str(i) for i in range(10)],
                     [str(i * i) for i in range(10)], message="squares")
    cases = [
        (attempt("o_right", TASK, "2"), "correct"),
        (attempt("o_float_equal", TASK, "2.0"), "correct"),
        (attempt("o_fenced", TASK, "```\n2\n```"), "correct"),
        (attempt("o_wrong", TASK, "3"), "wrong"),
        (attempt("o_raises", TASK, "1 / 0"), "wrong"),
        (attempt("o_no_think", TASK, "2", think=False), "malformed"),
        (attempt("o_name", TASK, "two"), "malformed"),
        (attempt("o_syntax", TASK, "2 +"), "malformed"),
        (attempt("i_5", code_i, "5"), "correct"),
        (attempt("i_8", code_i, "8"), "correct"),      # several inputs are right
        (attempt("i_neg", code_i, "-1"), "correct"),
        (attempt("i_wrong", code_i, "3"), "wrong"),
        (attempt("i_type_error", code_i, "'a'"), "wrong"),
        (attempt("i_call", code_i, "int('5')"), "correct"),
        (attempt("i_unrestricted", code_i, "abs(5)"), "malformed"),
        (attempt("f_right", code_f, "```python\ndef sq(x):\n    return x ** 2\n```"), "correct"),
        (attempt("f_bare_program", code_f, "def sq(x):\n    return x * x"), "correct"),
        (attempt("f_visible_only", code_f, "```python\ndef f(x):\n    return [0, 1, 4, 9, 16][x]\n```"), "wrong"),
        (attempt("f_banned", code_f, "```python\nimport os\ndef f(x):\n    return x * x\n```"), "malformed"),
        (attempt("f_two_defs", code_f, "```python\ndef f(x):\n    return x\ndef g(x):\n    return x\n```"),
         "malformed"),
        (attempt("f_loops", code_f, "```python\ndef f(x):\n    while True:\n        pass\n```"), "wrong"),
    ]
    got = check_answers([a for a, _ in cases], SETTINGS, zygote.run)
    assert [(c.attempt_id, c.outcome) for c in got] == [(a.attempt_id, want) for a, want in cases]


def test_set_outputs_compare_by_value_whatever_the_order(zygote):
    t = Triplet("code_o", "def f(a):\n    return set(a)", ["'hello'"], ["{'h', 'e', 'l', 'o'}"])
    [c] = check_answers([attempt("s", t, "{'o', 'l', 'e', 'h'}")], SETTINGS, zygote.run)
    assert c.outcome == "correct"


def test_sandbox_failure_is_a_verifier_error_for_expressions_only():
    broken = _runner(lambda j: JobResult(j.job_id, "sandbox_error", error="worker died"))
    code_f = Triplet("code_f", "def f(x):\n    return x", ["1", "2"], ["1", "2"])
    got = check_answers([attempt("o", TASK, "2"), attempt("f", code_f, "def f(x):\n    return x")],
                        SETTINGS, broken)
    assert [c.outcome for c in got] == ["verifier_error", "wrong"]


@pytest.mark.parametrize("restricted, outcome", [(True, "malformed"), (False, "correct")])
def test_restricted_expressions_can_be_switched_off(zygote, restricted, outcome):
    settings = TasksConfig(timeout_s=3.0, restricted_expressions=restricted)
    [c] = check_answers([attempt("x", TASK, "abs(-2)")], settings, zygote.run)
    assert c.outcome == outcome
