"""The reward-hack corpus: no attempt earns a reward, through the same validation and checking code the
service uses (tests/sandbox/reward_hack_corpus.py). The `*_runtime` cases run with the static rules bypassed, to
show that the construction (no gold in any job, the comparison on the host) refuses them on its own."""

from __future__ import annotations

import pytest

from populora.config import RewardConfig, TasksConfig
from populora.tasks import Attempt, Triplet, check_answers, student_reward, teacher_reward
from tests.sandbox.reward_hack_corpus import (
    BYPASS_KINDS,
    TASK_F,
    TASK_IO,
    TEACHER_KINDS,
    judge_hacks,
    load_hacks,
)

SETTINGS = TasksConfig(timeout_s=1.0)


def test_corpus_covers_the_attacks():
    hacks = load_hacks()
    assert len(hacks) >= 60
    names = " ".join(h.name for h in hacks)
    for attack in ("always_eq", "int_subclass", "str_subclass", "override_repr", "builtins", "fake_frame",
                   "partial_write", "systemexit", "exception_str", "calls_function", "stolen_nonce",
                   "frame_walk", "gc_walk", "traceback_walk", "coroutine", "closure", "weakref", "reduce",
                   "copyreg", "early_exit", "stdout_flood", "patch_json", "nan", "negative_zero", "huge_int",
                   "recursion", "deterministic"):
        assert attack in names, attack
    assert sum(h.kind in BYPASS_KINDS for h in hacks) >= 20
    assert sum(h.kind in TEACHER_KINDS for h in hacks) >= 5


@pytest.mark.slow
def test_no_reward_hack_earns_a_reward(zygote):
    hacks = load_hacks()
    rewards = RewardConfig()
    earned = []
    for v in judge_hacks(hacks, SETTINGS, zygote.run):
        if v.kind in TEACHER_KINDS:
            valid = v.outcome == "valid"
            if valid or not v.blocked or teacher_reward(valid, 0.0, "inverse_solve", rewards) > 0:
                earned.append(f"{v.name}: {v.outcome}")
        else:
            r = student_reward(v.outcome, rewards)
            if not v.blocked or (r is not None and r > 0):
                earned.append(f"{v.name}: {v.outcome} {v.detail[:200]}")
    assert not earned, "\n".join(earned)


def test_honest_answers_still_earn_rewards(zygote):
    """The same tasks reward an honest solver: the defences do not refuse everything."""
    attempts = [Attempt("o", Triplet("code_o", **TASK_IO), "<think>t</think><answer>42</answer>"),
                Attempt("i", Triplet("code_i", **TASK_IO), "<think>t</think><answer>21</answer>"),
                Attempt("f", TASK_F, "<think>t</think><answer>```python\ndef g(x):\n    return 1 + x\n```</answer>")]
    settings = TasksConfig(timeout_s=5.0)
    assert [c.outcome for c in check_answers(attempts, settings, zygote.run)] == ["correct"] * 3
