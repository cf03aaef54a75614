"""The interference corpus: every hostile program (tests/sandbox/hostile) as a student's code_f answer, each in one
batch with honest attempts, through the production check_answers; the honest verdicts must be the same as when
the honest attempts run alone. Shared by the tests and by `bench.sandbox` (which also compares the honest jobs'
latency beside the hostile programs with their latency alone)."""

from __future__ import annotations

from dataclasses import dataclass, field

from populora.config import TasksConfig
from populora.tasks import Attempt, Triplet, check_answers
from tests.sandbox.hostile_corpus import load_corpus
from tests.sandbox.reward_hack_corpus import TASK_F, TASK_IO, static_rules_bypassed

SETTINGS = TasksConfig(timeout_s=2.0)
HONEST_PER_HOSTILE = 2
# (task, answer, the verdict it earns): right and wrong answers of each task type
HONEST = [
    (TASK_F, "```python\ndef f(x):\n    return x + 1\n```", "correct"),
    (TASK_F, "```python\ndef f(x):\n    return x * 2 - 3\n```", "wrong"),
    (Triplet("code_o", task_id="t_o", **TASK_IO), "42", "correct"),
    (Triplet("code_o", task_id="t_o", **TASK_IO), "41", "wrong"),
    (Triplet("code_i", task_id="t_i", **TASK_IO), "21", "correct"),
    (Triplet("code_i", task_id="t_i", **TASK_IO), "20", "wrong"),
]


@dataclass
class Interference:
    alone: dict[str, str]  # honest attempt id -> outcome, run alone
    beside: dict[str, str]  # the same beside the hostile programs
    seconds_alone: list[float] = field(default_factory=list)  # each honest job's time in the sandbox
    seconds_beside: list[float] = field(default_factory=list)
    hostile: dict[str, str] = field(default_factory=dict)  # hostile attempt id -> its own verdict and detail

    @property
    def changed(self) -> list[str]:
        return [f"{k}: {self.alone[k]} alone, {self.beside.get(k)} beside a hostile job"
                for k in self.alone if self.beside.get(k) != self.alone[k]]


def _honest(k: int) -> Attempt:
    task, answer, _ = HONEST[k % len(HONEST)]
    return Attempt(f"honest-{k}", task, f"<think>t</think><answer>{answer}</answer>")


def expected(attempt_id: str) -> str:
    return HONEST[int(attempt_id.split("-")[1]) % len(HONEST)][2]


def hostile_answer(program: str) -> str:
    """A code_f answer that runs a hostile program as written (a module of its own) and then has the one def the
    verifier needs; the static rules are bypassed for it."""
    return (f"<think>t</think><answer>```python\nexec(compile({program!r}, '<hostile>', 'exec'), "
            "{'__name__': '__main__'})\n\n\ndef f(x):\n    return x\n```</answer>")


def run_interference(run, per_hostile: int = HONEST_PER_HOSTILE) -> Interference:
    """The honest attempts alone, then the same interleaved with every hostile program (one batch). The honest
    jobs' seconds in the sandbox are recorded from the results `run` returns."""
    hostile = [Attempt(f"hostile-{c.name}", TASK_F, hostile_answer(c.program)) for c in load_corpus()]
    honest = [_honest(k) for k in range(per_hostile * len(hostile))]
    seen: dict[str, float] = {}

    def recording(jobs):
        results = run(jobs)
        for job, r in zip(jobs, results):
            seen[job.job_id.split("#")[0]] = r.seconds
        return results

    alone = {c.attempt_id: c.outcome for c in check_answers(honest, SETTINGS, recording)}
    seconds_alone = [seen[a.attempt_id] for a in honest]
    batch = []
    for k, h in enumerate(hostile):
        batch += [h, *honest[k * per_hostile:(k + 1) * per_hostile]]
    seen.clear()
    with static_rules_bypassed():
        checks = check_answers(batch, SETTINGS, recording)
    beside = {c.attempt_id: c.outcome for c in checks if c.attempt_id.startswith("honest-")}
    hostile_outcomes = {c.attempt_id: f"{c.outcome} {c.detail[:80]}" for c in checks if c.attempt_id.startswith("hostile-")}
    return Interference(alone, beside, seconds_alone, [seen[a.attempt_id] for a in honest], hostile_outcomes)
