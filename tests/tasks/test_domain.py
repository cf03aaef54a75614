"""Rewards (spec 4), buffers (spec 10), complexity (spec 11), prompts and the Triplet's forms."""

from __future__ import annotations

import random

import pytest

from populora.config import CODE_TASK_TYPES, RewardConfig
from populora.tasks import (
    BufferSet,
    Triplet,
    complexity,
    identity_triplet,
    mean_rho,
    student_messages,
    student_reward,
    teacher_messages,
    teacher_reward,
)
from populora.tasks.parsing import extract_answer, fenced_blocks

R = RewardConfig()


def test_student_rewards():
    assert [student_reward(o, R) for o in ("correct", "wrong", "malformed", "verifier_error")] == [1.0, -0.5, -1.0,
                                                                                                  None]
    with pytest.raises(ValueError):
        student_reward("right", R)


def test_mean_rho_excludes_verifier_errors():
    assert mean_rho(["correct", "wrong", "verifier_error", "correct"]) == pytest.approx(2 / 3)
    assert mean_rho(["malformed", "wrong"]) == 0.0
    assert mean_rho(["verifier_error"]) is None and mean_rho([]) is None


@pytest.mark.parametrize("valid, rho, rule, want", [
    (True, 0.25, "inverse_solve", 0.75), (True, 1.0, "inverse_solve", 0.0), (True, 0.0, "inverse_solve", 1.0),
    (True, 0.25, "learnability", 0.75), (True, 0.0, "learnability", 0.0), (True, 1.0, "learnability", 0.0),
    (False, 0.5, "inverse_solve", -1.0), (False, None, "learnability", -1.0), (True, None, "inverse_solve", 0.0)])
def test_teacher_rewards(valid, rho, rule, want):
    assert teacher_reward(valid, rho, rule, R) == pytest.approx(want)


def test_teacher_reward_rejects_unknown_rules_and_bad_rho():
    with pytest.raises(ValueError):
        teacher_reward(True, 0.5, "other", R)
    with pytest.raises(ValueError):
        teacher_reward(True, 1.5, "inverse_solve", R)


def _t(k: int, task_type: str = "code_o") -> Triplet:
    return Triplet(task_type, f"def f(a):\n    return a + {k}", ["1"], [str(1 + k)], task_id=f"t{k}")


def test_buffers_seed_fifo_cap_and_sampling():
    b = BufferSet(cap=4, seed=3)
    assert all(b.size(t) == 1 and b.entries(t)[0].program == "def f(a):\n    return a" for t in CODE_TASK_TYPES)
    assert len(b) == 3 and "math_w" not in b.to_json()["buffers"]  # a math type's buffer only in a run that plays it
    for k in range(6):
        b.add(_t(k))
    assert [t.task_id for t in b.entries("code_o")] == ["t2", "t3", "t4", "t5"]  # the oldest dropped
    s1 = b.sample("code_o", 3, random.Random(7))
    s2 = b.sample("code_o", 3, random.Random(7))
    assert [t.task_id for t in s1] == [t.task_id for t in s2] and len({t.task_id for t in s1}) == 3
    assert len(b.sample("code_o", 99, random.Random(0))) == 4
    assert b.sample("code_i", 0, random.Random(0)) == []
    again = BufferSet.from_json(b.to_json())
    assert again.to_json() == b.to_json() and again.cap == 4


def test_a_math_buffer_in_a_run_that_plays_math():
    b = BufferSet(cap=4, task_types=["code_o", "math_w"])
    assert len(b) == 4 and b.entries("math_w")[0].outputs == ["7"]
    assert BufferSet.from_json(b.to_json()).entries("math_w") == b.entries("math_w")
    with pytest.raises(KeyError, match="no buffer of task type 'math_w'"):
        BufferSet(cap=4).sample("math_w", 1, random.Random(0))


def test_identity_seed():
    t = identity_triplet("code_i")
    assert (t.program, t.inputs, t.outputs) == ("def f(a):\n    return a", ["'Hello world'"], ["'Hello world'"])


def test_complexity_metrics():
    src = ("def f(a):\n    # comment\n    if a and a > 1 or a < -1:\n        return [x for x in range(a) if x]\n"
           "    for i in range(3):\n        while i:\n            i -= 1\n\n    return 0\n")
    c = complexity(src)
    # decisions: if, and/or (2), comprehension, comprehension-if is inside comprehension, for, while
    assert c["cyclomatic"] == 1 + 1 + 2 + 1 + 1 + 1
    assert c["lines_of_code"] == 7
    assert c["ast_depth"] >= 6
    assert complexity("def f(a):\n    return a * 3")["cyclomatic"] == 1
    assert complexity("def f(:") == {"ast_depth": 0, "cyclomatic": 0, "lines_of_code": 1}


def test_triplet_round_trips_and_checks_shape():
    t = Triplet("code_f", "def f(x):\n    return x", ["1", "2"], ["1", "2"], "id", "T1", "task-1",
                {"ast_depth": 3, "cyclomatic": 1, "lines_of_code": 2})
    assert Triplet.from_pb(t.to_pb()) == t and Triplet.from_dict(t.to_dict()) == t
    bare = Triplet("code_o", "p", ["1"], ["1"])
    assert Triplet.from_pb(bare.to_pb()).complexity is None
    with pytest.raises(ValueError):
        Triplet("code_z", "p", [], [])
    with pytest.raises(ValueError):
        Triplet("code_o", "p", ["1"], [])


def test_teacher_prompts_follow_the_contract():
    refs = [_t(k) for k in range(3)]
    msgs = teacher_messages("code_o", refs)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert all(r.program in user for r in refs) and "random" in user and "```python" in user and "```input" in user
    f_user = teacher_messages("code_f", [], given_program="def f(x):\n    return -x", n_inputs=6)[1]["content"]
    assert "return -x" in f_user and "6" in f_user and "```message" in f_user
    with pytest.raises(ValueError):
        teacher_messages("code_f", [])
    with pytest.raises(ValueError):
        teacher_messages("code_q", [])


def test_student_prompts_show_what_each_type_allows():
    o = student_messages(Triplet("code_o", "def f(a):\n    return a", ["7"], ["7"]))[1]["content"]
    assert "```input\n7" in o and "```output" not in o
    i = student_messages(Triplet("code_i", "def f(a):\n    return a", ["7"], ["8"]))[1]["content"]
    assert "```output\n8" in i and "```input" not in i
    t = Triplet("code_f", "def f(a):\n    return a", [str(k) for k in range(10)], [str(k * 11) for k in range(10)],
                message="SECRET-MSG")
    f = student_messages(t)[1]["content"]
    assert "SECRET-MSG" in f and "def f(a)" not in f
    shown = [b.body.strip() for b in fenced_blocks(f) if b.lang == "output"]
    assert shown == ["0", "11", "22", "33", "44"]  # the first N/2 pairs only
    assert extract_answer("<think>x</think><answer>ok</answer>", require_think=True) == "ok"
