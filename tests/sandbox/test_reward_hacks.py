"""The reward-hack corpus: no attempt earns a reward, through the same validation and checking code the
service uses. `code_f_runtime` attempts skip the static rules, to show the runtime layer refuses them alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from populora.config import RewardConfig, TasksConfig
from populora.tasks import Attempt, Proposal, Triplet, check_answers, student_reward, teacher_reward
from populora.tasks.jobs import Job
from populora.tasks.verify import _judge, validate_proposals

HACKS = Path(__file__).with_name("reward_hacks")
SETTINGS = TasksConfig(timeout_s=1.0)
TASK_IO = dict(program="def f(a):\n    return a * 2", inputs=["21"], outputs=["42"])
TASK_F = Triplet("code_f", "def f(x):\n    return x + 1", [str(i) for i in range(10)],
                 [str(i + 1) for i in range(10)], message="adds one", task_id="tf")


def load_hacks() -> list[dict]:
    out = []
    for path in sorted([*HACKS.glob("*.py"), *HACKS.glob("*.txt")]):
        text = path.read_text()
        kind = re.search(r"^# kind: (\S+)$", text, re.M).group(1)
        body = "\n".join(line for line in text.splitlines() if not line.startswith("# ")) + "\n"
        out.append({"name": path.stem, "kind": kind, "body": body.strip("\n")})
    return out


def test_corpus_covers_the_attacks():
    hacks = load_hacks()
    assert len(hacks) >= 20
    names = " ".join(h["name"] for h in hacks)
    for attack in ("always_eq", "int_subclass", "str_subclass", "override_repr", "builtins", "fake_frame",
                   "partial_write", "systemexit", "exception_str", "calls_function"):
        assert attack in names, attack


def _student_attempts(hacks: list[dict]) -> list[Attempt]:
    attempts = []
    for h in hacks:
        if h["kind"] == "code_o_answer":
            task = Triplet("code_o", task_id="to", **TASK_IO)
            text = h["body"]
        elif h["kind"] == "code_i_answer":
            task = Triplet("code_i", task_id="ti", **TASK_IO)
            text = h["body"]
        else:
            task, text = TASK_F, f"```python\n{h['body']}\n```"
        attempts.append(Attempt(h["name"], task, f"<think>plan</think><answer>{text}</answer>"))
    return attempts


@pytest.mark.slow
def test_no_reward_hack_earns_a_reward(zygote):
    hacks = load_hacks()
    rewards = RewardConfig()
    earned = []
    students = [h for h in hacks if h["kind"] in ("code_o_answer", "code_i_answer", "code_f_program")]
    for h, c in zip(students, check_answers(_student_attempts(students), SETTINGS, zygote.run)):
        r = student_reward(c.outcome, rewards)
        if c.outcome == "correct" or (r is not None and r > 0):
            earned.append(f"{h['name']}: {c.outcome} {c.detail}")

    runtime = [h for h in hacks if h["kind"] == "code_f_runtime"]
    half = len(TASK_F.inputs) // 2
    jobs = [Job(h["name"], h["body"], calls=[f"f({i})" for i in TASK_F.inputs[half:]],
                literals=TASK_F.outputs[half:], timeout_s=1.0) for h in runtime]
    for h, r in zip(runtime, zygote.run(jobs)):
        outcome, detail = _judge("code_f", r, len(TASK_F.inputs) - half)
        if outcome == "correct":
            earned.append(f"{h['name']}: correct ({r.status})")

    teachers = [h for h in hacks if h["kind"] == "teacher_code_o"]
    proposals = [Proposal(h["name"], "code_o", f"<answer>```python\n{h['body']}\n```\n```input\n21\n```</answer>")
                 for h in teachers]
    for h, v in zip(teachers, validate_proposals(proposals, SETTINGS, zygote.run)):
        if v.valid or teacher_reward(v.valid, 0.0, "inverse_solve", rewards) > 0:
            earned.append(f"{h['name']}: valid proposal")
    assert len(students) + len(runtime) + len(teachers) == len(hacks)
    assert not earned, "\n".join(earned)


def test_honest_answers_still_earn_rewards(zygote):
    """The same tasks reward an honest solver: the defences do not refuse everything."""
    attempts = [Attempt("o", Triplet("code_o", **TASK_IO), "<think>t</think><answer>42</answer>"),
                Attempt("i", Triplet("code_i", **TASK_IO), "<think>t</think><answer>21</answer>"),
                Attempt("f", TASK_F, "<think>t</think><answer>```python\ndef g(x):\n    return 1 + x\n```</answer>")]
    settings = TasksConfig(timeout_s=5.0)
    assert [c.outcome for c in check_answers(attempts, settings, zygote.run)] == ["correct"] * 3
