"""Scoring: one scorer per kind of problem, all with the same signature, and pass@k.

Every program a model wrote, and every benchmark's test code, runs only in the sandbox service (spec 2: all
evaluation of model-written text happens in the sandbox): a `program` answer runs with the benchmark's tests as one
`Execute` job (`check(<entry point>)` after the program and the test code); a `task` answer goes through
`CheckAnswers`, the verification path of training (populora.tasks.verify.check_answers: restricted expressions, the
gold value rebuilt on the host, plain-data comparison). A job that times out, runs out of memory or floods its
output is a wrong answer with that status as its error, never a crash of the evaluation.

The scorers take the sandbox as an object with the RPC methods of proto/sandbox.proto (the in-process service or
its gRPC client alike), so this package imports no service.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from populora.evals.benchmarks import Problem
from populora.evals.prompts import extract_program
from populora.pb import sandbox_pb2

EXECUTE_CHUNK = 512  # jobs per Execute call: far under the sandbox's batch limit and the gRPC message size
DEFAULT_TIMEOUT_S = 10.0  # per program with its tests (HumanEval's own harness allows 3 s per problem)
ERROR_CHARS = 300


@dataclass(frozen=True)
class Answer:
    """One sample's text for one problem; `key` is unique within a scoring call."""

    key: str
    problem: Problem
    text: str


@dataclass(frozen=True)
class Outcome:
    passed: bool
    error: str = ""  # one line: why it failed ("" when it passed)


Scorer = Callable[[Any, list[Answer], bool, float], tuple[list[Outcome], int]]
"""(sandbox, answers, chat, timeout_s) -> (one outcome per answer, sandbox jobs run)."""


def one_line(text: str) -> str:
    """The last non-empty line of an error (the exception's own line), shortened."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:ERROR_CHARS]


def with_tests(program: str, problem: Problem) -> str:
    """The candidate program followed by the benchmark's test code (which defines check(candidate))."""
    return f"{program}\n\n{problem.test}\n"


def canonical_program(problem: Problem) -> str:
    """The benchmark's reference solution as a program (it continues the prompt)."""
    return problem.prompt + problem.canonical


def run_programs(sandbox: Any, programs: list[tuple[str, Problem, str]], timeout_s: float) -> list[Outcome]:
    """Run each (job id, problem, program) with the problem's tests in the sandbox: passed iff check() returns."""
    outcomes: list[Outcome] = []
    for lo in range(0, len(programs), EXECUTE_CHUNK):
        chunk = programs[lo:lo + EXECUTE_CHUNK]
        request = sandbox_pb2.ExecuteRequest(jobs=[
            sandbox_pb2.ExecJob(job_id=key, program=with_tests(program, problem),
                                call=f"check({problem.entry_point})", timeout_s=timeout_s)
            for key, problem, program in chunk])
        results = {r.job_id: r for r in sandbox.Execute(request).results}
        for key, _, _ in chunk:
            r = results.get(key)
            if r is None:
                outcomes.append(Outcome(False, "sandbox_error: no result for this job"))
            elif r.status == "ok":
                outcomes.append(Outcome(True))
            else:
                detail = one_line(r.error)
                outcomes.append(Outcome(False, f"{r.status}: {detail}" if detail else r.status))
    return outcomes


def score_programs(sandbox: Any, answers: list[Answer], chat: bool, timeout_s: float) -> tuple[list[Outcome], int]:
    """Program problems: the program extracted from each answer (populora.evals.prompts) run against the tests."""
    programs = [(a.key, a.problem, extract_program(a.problem, a.text, chat)) for a in answers]
    return run_programs(sandbox, programs, timeout_s), len(programs)


def score_tasks(sandbox: Any, answers: list[Answer], chat: bool, timeout_s: float) -> tuple[list[Outcome], int]:
    """Task problems: each answer checked by the sandbox's CheckAnswers, exactly as a student's attempt in training
    (the prompt format does not depend on the model kind, so `chat` plays no part)."""
    if not answers:
        return [], 0
    request = sandbox_pb2.CheckAnswersRequest(attempts=[
        sandbox_pb2.Attempt(attempt_id=a.key, task=a.problem.task.to_pb(), response_text=a.text) for a in answers])
    resp = sandbox.CheckAnswers(request)
    by_id = {r.attempt_id: r for r in resp.results}
    outcomes = []
    for a in answers:
        r = by_id.get(a.key)
        if r is None:
            outcomes.append(Outcome(False, "verifier_error: no result for this attempt"))
        elif r.outcome == "correct":
            outcomes.append(Outcome(True))
        else:
            detail = one_line(r.detail)
            outcomes.append(Outcome(False, f"{r.outcome}: {detail}" if detail else r.outcome))
    return outcomes, int(resp.jobs)


SCORERS: dict[str, Scorer] = {"program": score_programs, "task": score_tasks}


# ------------------------------------------------------------------------------------------------ pass@k
def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c passed (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k), computed as a product for stability."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def ks_for(samples: int) -> list[int]:
    """The k reported for `samples` samples per problem: 1, 2, 5, 10, 20, 50, 100 up to samples, and samples."""
    ks = [k for k in (1, 2, 5, 10, 20, 50, 100) if k <= samples]
    return ks if samples in ks else [*ks, samples]
