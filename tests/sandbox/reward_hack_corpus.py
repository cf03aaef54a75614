"""The reward-hack corpus (tests/sandbox/reward_hacks) and how each case is judged: every case goes through the
production `check_answers` / `validate_proposals`, and none may earn a reward. Shared by the test and by
`bench.sandbox`.

Kinds (the `# kind:` line of each file):
- `code_o_answer`, `code_i_answer`: a student's answer to TASK_IO, under the production rules;
- `code_f_program`: a student's program for TASK_F, under the production rules;
- `code_f_runtime`: the same, with the static rules bypassed (check_answers runs it as written), so the case
  proves what the construction holds without the blocklist;
- `teacher_code_o`: a teacher's code_o proposal for input 21, under the production rules;
- `teacher_runtime`: the same with the static rules bypassed.
A student case earns nothing when judged `wrong` or `malformed`; a teacher case when the proposal is rejected.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from populora.tasks import Attempt, Proposal, Triplet, check_answers, validate_proposals, verify
from populora.tasks.jobs import Runner

HACKS = Path(__file__).with_name("reward_hacks")
STUDENT_KINDS = ("code_o_answer", "code_i_answer", "code_f_program", "code_f_runtime")
TEACHER_KINDS = ("teacher_code_o", "teacher_runtime")
BYPASS_KINDS = ("code_f_runtime", "teacher_runtime")
TASK_IO = {"program": "def f(a):\n    return a * 2", "inputs": ["21"], "outputs": ["42"]}
# code_f: the hidden half (inputs 5..9) is what the student must reproduce
TASK_F = Triplet("code_f", "def f(x):\n    return x + 1", [str(i) for i in range(10)],
                 [str(i + 1) for i in range(10)], message="adds one", task_id="tf")


@dataclass
class Hack:
    name: str
    kind: str
    body: str


@dataclass
class Verdict:
    name: str
    kind: str
    outcome: str  # correct | wrong | malformed | verifier_error for students; valid | <reason> for teachers
    detail: str

    @property
    def blocked(self) -> bool:
        if self.kind in TEACHER_KINDS:
            return self.outcome != "valid"
        return self.outcome in ("wrong", "malformed")


def load_hacks() -> list[Hack]:
    out = []
    for path in sorted([*HACKS.glob("*.py"), *HACKS.glob("*.txt")]):
        text = path.read_text()
        found = re.search(r"^# kind: (\S+)$", text, re.M)
        if not found or found.group(1) not in STUDENT_KINDS + TEACHER_KINDS:
            raise ValueError(f"{path}: needs a '# kind: ...' line naming one of {STUDENT_KINDS + TEACHER_KINDS}")
        body = "\n".join(line for line in text.splitlines() if not line.startswith("# "))
        out.append(Hack(path.stem, found.group(1), body.strip("\n")))
    return out


@contextmanager
def static_rules_bypassed() -> Iterator[None]:
    """check_answers / validate_proposals with `program_violation` answering "no violation" for every program:
    everything else (parsing, jobs, the executor, the comparison on the host) is the production path."""
    with mock.patch.object(verify, "program_violation", lambda program: None):
        yield


def _attempt(h: Hack) -> Attempt:
    if h.kind in ("code_o_answer", "code_i_answer"):
        return Attempt(h.name, Triplet(h.kind[:6], task_id="t_" + h.kind[5], **TASK_IO),
                       f"<think>plan</think><answer>{h.body}</answer>")
    return Attempt(h.name, TASK_F, f"<think>plan</think><answer>```python\n{h.body}\n```</answer>")


def _proposal(h: Hack) -> Proposal:
    return Proposal(h.name, "code_o", f"<answer>```python\n{h.body}\n```\n```input\n21\n```</answer>")


def judge_hacks(hacks: list[Hack], settings, run: Runner) -> list[Verdict]:
    """Every case through the production path (static rules bypassed for the *_runtime kinds), in order."""
    verdicts: dict[str, Verdict] = {}
    for bypass in (False, True):
        group = [h for h in hacks if (h.kind in BYPASS_KINDS) == bypass]
        students = [h for h in group if h.kind in STUDENT_KINDS]
        teachers = [h for h in group if h.kind in TEACHER_KINDS]
        with static_rules_bypassed() if bypass else nullcontext():
            for h, c in zip(students, check_answers([_attempt(h) for h in students], settings, run)):
                verdicts[h.name] = Verdict(h.name, h.kind, c.outcome, c.detail)
            for h, v in zip(teachers, validate_proposals([_proposal(h) for h in teachers], settings, run)):
                verdicts[h.name] = Verdict(h.name, h.kind, "valid" if v.valid else v.reason, v.detail)
    return [verdicts[h.name] for h in hacks]
