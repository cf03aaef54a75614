"""The cross-job corpus: one pair of programs per kind of state (services/sandbox/state_kinds.py), run through the
production validate_proposals / check_answers, one after the other on the same worker.

The first is a teacher's code_f program: it computes x * s + 7 for a secret s and, as it runs during validation,
leaves s behind by one kind of state. The second is a student's answer to the task that validation made of it: a
program that computes nothing, returning x * s + 7 for the s it finds by that kind (else -1). It is judged
`correct` only when the state crossed from one job to the next; contained, it is `wrong`. The static rules are
bypassed for both (they ban ctypes, os, socket...), so the pairs test the sandbox, not the blocklist. Shared by
the tests and by `bench.sandbox`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from populora.config import TasksConfig
from populora.tasks import Attempt, Proposal, check_answers, validate_proposals
from populora.tasks.jobs import Job
from services.sandbox.state_kinds import KINDS, Kind
from services.sandbox.state_programs import reader_program, writer_program
from tests.sandbox.reward_hack_corpus import static_rules_bypassed

SETTINGS = TasksConfig(timeout_s=5.0)


@dataclass
class Pair:
    kind: str
    secret: int
    validation: str  # "valid" or the writer's rejection reason
    outcome: str  # the reader's verdict: correct (leaked) or wrong (contained)
    detail: str

    @property
    def contained(self) -> bool:
        return self.validation == "valid" and self.outcome == "wrong"

    @property
    def leaked(self) -> bool:
        return self.outcome == "correct"


def _proposal(kind: Kind, secret: int) -> Proposal:
    inputs = "".join(f"```input\n{i}\n```\n" for i in range(SETTINGS.code_f_inputs))
    return Proposal(f"writer-{kind.name}", "code_f",
                    f"<answer>{inputs}```message\nscales and shifts\n```</answer>", writer_program(kind, secret))


def run_pairs(run, kinds: tuple[Kind, ...] = KINDS, seed: int = 0) -> list[Pair]:
    """Every pair in turn through `run` (an executor's run; one worker, or the pair may land on two). A writer
    whose proposal is not valid, or a reader that is neither correct nor wrong, is reported as it came, never as
    contained."""
    rng = random.Random(seed)
    out = []
    with static_rules_bypassed():
        for kind in kinds:
            # what the reader finds before any writer ran is the machine's own (a CPU set of one core, `nice`):
            # the secret is drawn among the other values, so only what the writer left can make the answer right
            [base] = run([Job(f"baseline-{kind.name}", reader_program(kind), calls=["f(1)"], timeout_s=5.0)])
            found = base.values[0] - 7 if base.status == "ok" and base.values and base.values[0] != -1 else None
            secret = rng.choice([s for s in kind.secrets if s != found])
            [v] = validate_proposals([_proposal(kind, secret)], SETTINGS, run)
            if not v.valid:
                out.append(Pair(kind.name, secret, v.reason, "", v.detail))
                continue
            answer = f"<think>look around</think><answer>```python\n{reader_program(kind)}\n```</answer>"
            [c] = check_answers([Attempt(f"reader-{kind.name}", v.task, answer)], SETTINGS, run)
            out.append(Pair(kind.name, secret, "valid", c.outcome, c.detail))
    return out


def not_contained(pairs: list[Pair]) -> list[str]:
    return [f"{p.kind}: writer {p.validation}, reader {p.outcome or '-'} ({p.detail[:160]})"
            for p in pairs if not p.contained]
