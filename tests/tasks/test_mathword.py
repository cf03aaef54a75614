"""math_w (spec 18): the proposal's parts, each rejection against the real sandbox and checker, hostile programs, the
student's check, and the rewards."""

from __future__ import annotations

from fractions import Fraction

import pytest

from populora.config import RewardConfig, TasksConfig
from populora.tasks import Attempt, Proposal, Triplet, check_answers, validate_proposals
from populora.tasks.mathcheck import MathChecker
from populora.tasks.mathword import answer_in_statement, gold_text, gold_value
from populora.tasks.prompts import student_messages, teacher_messages
from populora.tasks.rewards import student_reward, teacher_reward
from populora.tasks.triplet import identity_triplet

SETTINGS = TasksConfig(timeout_s=3.0, task_types=["math_w"])
WORDS = "Tom has 12 marbles and gives away 5 of them. How many marbles does he have left?"


def proposal(statement: str, program: str, pid: str = "p") -> Proposal:
    return Proposal(pid, "math_w", f"<think>plan</think><answer>\n```problem\n{statement}\n```\n```python\n{program}\n"
                                   "```\n</answer>")


def body(expr: str, head: str = "") -> str:
    return f"{head}def solution():\n    return {expr}"


@pytest.fixture(scope="module")
def checker():
    with MathChecker(workers=2) as c:
        yield c.start()


CASES = {
    "ok": proposal(WORDS, body("12 - 5")),
    "no_answer": Proposal("no_answer", "math_w", "```problem\nTwo and two?\n```"),
    "no_problem": Proposal("no_problem", "math_w", "<answer>```python\ndef solution():\n    return 4\n```</answer>"),
    "problem_too_long": proposal("How many? " + "A box holds some apples. " * 60, body("3")),
    "problem_has_code": proposal("What does this give?\ndef g():\n    return 3", body("3")),
    "no_program": Proposal("no_program", "math_w", "<answer>```problem\nHow many legs have 3 cats?\n```</answer>"),
    "not_one_def": proposal(WORDS, "def a():\n    return 1\ndef b():\n    return 2"),
    "takes_arguments": proposal(WORDS, "def solution(n):\n    return n"),
    "banned_import": proposal(WORDS, body("7", "import random\n")),
    "timeout": proposal(WORDS, "def solution():\n    while True:\n        pass"),
    "memory": proposal(WORDS, body("len('x' * 10**10)")),
    "runtime_error": proposal(WORDS, body("1 / 0")),
    "output_limit": proposal(WORDS, "def solution():\n    print('x' * 10**6)\n    return 7"),
    "unsupported_output": proposal(WORDS, body("[7]")),
    "output_too_long": proposal(WORDS, body("10 ** 2000")),
    "nondeterministic": proposal("Name a file.", body("tempfile.mktemp()", "import tempfile\n")),
    "answer_in_problem": proposal("Tom has 12 marbles and gives away 5, so 7 are left. How many are left?",
                                  body("12 - 5")),
    "unparsed_answer": proposal("Write the answer.", body("'x +* )('")),
}


@pytest.mark.slow
def test_every_math_reason_is_reached(zygote, checker):
    got = {v.proposal_id: v for v in validate_proposals(
        [Proposal(name, p.task_type, p.response_text) for name, p in CASES.items()], SETTINGS, zygote.run, checker)}
    for name in CASES:
        assert got[name].reason == name, (name, got[name].reason, got[name].detail)
        assert got[name].valid == (name == "ok")


def test_valid_math_proposals_become_tasks(zygote, checker):
    ps = [proposal(WORDS, "def count():\n    left = 12 - 5\n    return left", "int"),
          proposal("Seven pies are shared by two children equally. How much pie does each child get?",
                   body("Fraction(7, 2)", "from fractions import Fraction\n"), "fraction"),
          proposal("One pie is cut into three equal parts. What part of the pie is one piece, as a decimal?",
                   body("1 / 3"), "float"),
          proposal("Add a number to itself and then add one. Write the result in terms of the number x.",
                   body("'2*x + 1'"), "text"),
          proposal(WORDS.upper(), body("12 - 5"), "duplicate")]
    got = {v.proposal_id: v for v in validate_proposals(ps, SETTINGS, zygote.run, checker)}
    assert [got[k].task.outputs for k in ("int", "fraction", "float", "text")] == [
        ["7"], ["Fraction(7, 2)"], ["0.333333"], ["'2*x + 1'"]]
    t = got["int"].task
    assert t.task_type == "math_w" and t.inputs == [] and t.message == WORDS
    assert t.program.startswith("def solution():") and t.complexity["lines_of_code"] == 3
    assert (got["duplicate"].valid, got["duplicate"].reason) == (False, "duplicate")  # case and spacing aside


def test_a_text_answer_needs_the_checker(zygote, checker):
    [v] = validate_proposals([proposal("Write it with x.", body("'x + 1'"))], SETTINGS, zygote.run)
    assert v.reason == "unparsed_answer"
    [v] = validate_proposals([proposal("Write it with symbols.", body("'@@ )('"))], SETTINGS, zygote.run, checker)
    assert v.reason == "unparsed_answer" and "not_math" in v.detail  # read as nothing but the text itself


def test_gold_texts_and_values():
    assert [gold_text(v) for v in (7, -3, 2 / 3, ("Fraction", 7, 2), " x + 1 ")] == [
        "7", "-3", "0.666667", "Fraction(7, 2)", "'x + 1'"]
    assert [gold_value(t) for t in ("7", "0.666667", "Fraction(7, 2)", "'x + 1'")] == [
        7, 0.666667, Fraction(7, 2), "x + 1"]
    for bad in (True, None, [1], {1: 2}, float("nan"), ("Fraction", 1, 0), ""):
        with pytest.raises(ValueError):
            gold_text(bad)
    with pytest.raises(ValueError):
        gold_value("[1]")


def test_answer_written_in_the_statement():
    assert answer_in_statement("He paid 1,250 dollars.", "1250") == "1,250"
    assert answer_in_statement("Each gets 7/2 pies.", "Fraction(7, 2)") == "7/2"
    assert answer_in_statement("It is 0.333333 of it.", "0.333333") == "0.333333"
    assert answer_in_statement("Tom has 12 marbles and 5 cars.", "7") is None
    assert answer_in_statement("There are 17 boxes and 3.7 kg.", "7") is None  # 7 only inside other numbers
    assert answer_in_statement("Write it with x, then add one.", "'x + 1'") is None
    assert answer_in_statement("Show that it is x + 1.", "'x + 1'") == "x + 1"


def test_prompts():
    seed = identity_triplet("math_w")
    user = teacher_messages("math_w", [seed])[1]["content"]
    assert "```problem\n" + seed.message in user and "def solution():\n    return 3 + 4" in user
    assert "Answer: 7" in user and "```python\ndef solution():" in user
    [msg] = student_messages(seed)
    assert msg["role"] == "user" and msg["content"].startswith(seed.message) and "\\boxed{}" in msg["content"]
    assert "def solution" not in msg["content"]  # the student sees the statement only


def test_the_check(checker):
    seven = Triplet(task_type="math_w", program=body("7"), inputs=[], outputs=["7"], message="How many?")
    half = Triplet(task_type="math_w", program=body("0.5"), inputs=[], outputs=["Fraction(7, 2)"], message="?")
    attempts = [Attempt("right", seven, "12 - 5 = 7, so \\boxed{7}"),
                Attempt("wrong", seven, "\\boxed{8}"),
                Attempt("malformed", seven, "The answer is 7."),
                Attempt("fraction", half, "\\boxed{\\frac{7}{2}}"),
                Attempt("decimal", half, "\\boxed{3.5}"),
                Attempt("hostile", seven, "\\boxed{10^{10^{10}}}")]
    code = Triplet(task_type="code_o", program="def f(a):\n    return a", inputs=["1"], outputs=["1"])

    def no_jobs(jobs):  # a math answer runs nothing
        assert not jobs
        return []

    got = {c.attempt_id: c for c in check_answers(attempts, SETTINGS, no_jobs, checker)}
    assert {k: c.outcome for k, c in got.items()} == {
        "right": "correct", "wrong": "wrong", "malformed": "malformed", "fraction": "correct", "decimal": "correct",
        "hostile": "wrong"}
    assert got["hostile"].detail.startswith("timeout")
    [c] = check_answers([Attempt("x", seven, "\\boxed{7}")], SETTINGS, no_jobs)
    assert c.outcome == "verifier_error"  # no checker: not judged, left out of rho
    huge = Triplet(task_type="math_w", program=body("7"), inputs=[], outputs=["9" * 600], message="?")
    [c] = check_answers([Attempt("x", huge, "\\boxed{7}")], SETTINGS, no_jobs, checker)
    assert c.outcome == "verifier_error" and "characters" in c.detail  # a gold no checker can take
    with pytest.raises(ValueError):
        Triplet(task_type="math_w", program=body("7"), inputs=["1"], outputs=["7"])
    assert code.task_type == "code_o"


def test_rewards():
    r = RewardConfig()
    assert teacher_reward(False, None, "inverse_solve", r, "math_w") == 0.0  # spec 18: an invalid proposal earns 0
    assert teacher_reward(False, None, "inverse_solve", r, "code_o") == r.malformed
    assert teacher_reward(True, 0.25, "inverse_solve", r, "math_w") == 0.75
    assert teacher_reward(True, 1.0, "learnability", r, "math_w") == 0.0
    assert [student_reward(o, r) for o in ("correct", "wrong", "malformed")] == [1.0, -0.5, -1.0]
