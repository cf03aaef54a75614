"""Scoring: one scorer per kind of problem, all with the same signature, the check of a benchmark's own reference
solutions, and pass@k.

Every program a model wrote, and every benchmark's test code, runs only in the sandbox service (spec 2: all
evaluation of model-written text happens in the sandbox): a `program` answer runs with the benchmark's tests as one
`Execute` job (the test code executed in a copy of the program's namespace, so a test's `check` never replaces a
function of the same name, then its `check(candidate)`); an `evalplus` answer runs on the problem's base and plus
inputs (populora.evals.evalplus); a `task` answer goes through `CheckAnswers`, the verification path of training
(populora.tasks.verify.check_answers: restricted expressions, the gold value rebuilt on the host, plain-data
comparison), an answer in a benchmark's own format read first (populora.evals.prompts.read_task_answer). A job that
times out, runs out of memory, floods its output or exits is a wrong answer with that status as its error, never a
crash of the evaluation. A `math` answer runs nothing: its last `\\boxed{...}` is text, parsed and compared with the
gold by the math checker (spec 18, populora.tasks.mathcheck) in worker processes of its own, killed at its 3 s limit.

The scorers take the sandbox as an object with the RPC methods of proto/sandbox.proto (the in-process service or
its gRPC client alike), so this package imports no service.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import populora.evals.evalplus as evalplus
from populora.evals.evalplus import canonical_program  # noqa: F401 - the reference program, used by bench.eval
from populora.evals.problem import Problem
from populora.evals.progress import Pace
from populora.evals.prompts import extract_program, read_task_answer
from populora.pb import sandbox_pb2
from populora.tasks.literals import LiteralError
from populora.tasks.mathcheck import MathChecker
from populora.tasks.seedgen import solution_text

MATH_WORKERS = max(1, min(4, os.cpu_count() or 1))  # the math checker's processes while an evaluation scores
MATH_CHUNK = 64  # math answers between two progress reports
EXECUTE_CHUNK = 512  # jobs per Execute call: far under the sandbox's batch limit and the gRPC message size
DEFAULT_TIMEOUT_S = 10.0  # per program with its tests (HumanEval's own harness allows 3 s per problem)
ERROR_CHARS = 300


@dataclass(frozen=True)
class Answer:
    """One sample's text for one problem; `key` is unique within a scoring call; `form` how the problem was put
    to the model and so how the answer is read (populora.evals.prompts.FORMS)."""

    key: str
    problem: Problem
    text: str
    form: str = "completion"


@dataclass(frozen=True)
class Outcome:
    passed: bool
    error: str = ""  # one line: why it failed ("" when it passed)
    base: bool | None = None  # evalplus: whether every base input passed (`passed` is base + plus)


JobProgress = Callable[[int, int], None]
Scorer = Callable[[Any, list[Answer], float, JobProgress | None], tuple[list[Outcome], int]]
"""(sandbox, answers, timeout_s, progress) -> (one outcome per answer, sandbox jobs run); `progress(jobs done, jobs
known)` as the sandbox's answers come back. EvalPlus problems take their time limits from the canonical solution's
times (populora.evals.evalplus), not from timeout_s."""

# Appended after a candidate program: the benchmark's test code runs in a copy of the program's namespace, so a test
# that defines check(candidate) never replaces a candidate function named `check`.
CHECK_RUNNER = '''

def __populora_check(__candidate, __test):
    __scope = dict(globals())
    exec(compile(__test, "<benchmark test>", "exec"), __scope)
    __scope["check"](__candidate)
    return True
'''


def one_line(text: str) -> str:
    """The last non-empty line of an error (the exception's own line), shortened."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:ERROR_CHARS]


def test_job(key: str, program: str, problem: Problem, timeout_s: float) -> sandbox_pb2.ExecJob:
    """The job that runs a candidate program against the benchmark's test code (which defines check(candidate))."""
    return sandbox_pb2.ExecJob(job_id=key, program=f"{program}\n{CHECK_RUNNER}",
                               call=f"__populora_check({problem.entry_point}, {problem.test!r})", timeout_s=timeout_s)


def execute(sandbox: Any, jobs: list[sandbox_pb2.ExecJob], progress: JobProgress | None = None
            ) -> list[sandbox_pb2.ExecResult | None]:
    """Each job's result from the sandbox, in order (None: no result came back for it), in Execute calls of at most
    EXECUTE_CHUNK jobs; job ids need only be unique within a call of EXECUTE_CHUNK."""
    out: list[sandbox_pb2.ExecResult | None] = []
    for lo in range(0, len(jobs), EXECUTE_CHUNK):
        chunk = jobs[lo:lo + EXECUTE_CHUNK]
        results = {r.job_id: r for r in sandbox.Execute(sandbox_pb2.ExecuteRequest(jobs=chunk)).results}
        out.extend(results.get(job.job_id) for job in chunk)
        if progress is not None:
            progress(len(out), len(jobs))
    return out


def run_programs(sandbox: Any, programs: list[tuple[str, Problem, str]], timeout_s: float,
                 progress: JobProgress | None = None) -> list[Outcome]:
    """Run each (job id, problem, program) with the problem's tests in the sandbox: passed iff check() returns."""
    outcomes: list[Outcome] = []
    jobs = [test_job(key, program, problem, timeout_s) for key, problem, program in programs]
    for r in execute(sandbox, jobs, progress):
        if r is None:
            outcomes.append(Outcome(False, "sandbox_error: no result for this job"))
        elif r.status == "ok":
            outcomes.append(Outcome(True))
        else:
            detail = one_line(r.error)
            outcomes.append(Outcome(False, f"{r.status}: {detail}" if detail else r.status))
    return outcomes


def score_programs(sandbox: Any, answers: list[Answer], timeout_s: float, progress: JobProgress | None = None
                   ) -> tuple[list[Outcome], int]:
    """Program problems: the program extracted from each answer (populora.evals.prompts) run against the tests."""
    programs = [(a.key, a.problem, extract_program(a.problem, a.text, a.form)) for a in answers]
    return run_programs(sandbox, programs, timeout_s, progress), len(programs)


def score_evalplus(sandbox: Any, answers: list[Answer], timeout_s: float, progress: JobProgress | None = None
                   ) -> tuple[list[Outcome], int]:
    """EvalPlus problems: the program extracted from each answer run on the base and plus inputs, its outputs
    compared with the canonical solution's (the problems carry them: populora.evals.evalplus.with_expected), each
    input under EvalPlus's time limit from the canonical solution's time (timeout_s does not apply)."""
    items = [(a.key, a.problem, extract_program(a.problem, a.text, a.form)) for a in answers]
    got, jobs = evalplus.score_programs(sandbox, items, progress)
    return [Outcome(o.plus, o.error[:ERROR_CHARS], o.base) for o in got], jobs


def score_tasks(sandbox: Any, answers: list[Answer], timeout_s: float, progress: JobProgress | None = None
                ) -> tuple[list[Outcome], int]:
    """Task problems: each answer checked by the sandbox's CheckAnswers, exactly as a student's attempt in training
    (one call: no progress to report within it); an answer in a benchmark's own format is read first and put to the
    verifier as that answer."""
    outcomes: dict[int, Outcome] = {}
    attempts = []
    for k, a in enumerate(answers):
        response = read_task_answer(a.problem, a.text, a.form)
        if response is None:
            outcomes[k] = Outcome(False, "malformed: no_answer: no `assert f(...) == ...` line before [/ANSWER]")
            continue
        attempts.append((k, sandbox_pb2.Attempt(attempt_id=a.key, task=a.problem.task.to_pb(),
                                                response_text=response)))
    jobs = 0
    if attempts:
        resp = sandbox.CheckAnswers(sandbox_pb2.CheckAnswersRequest(attempts=[x for _, x in attempts]))
        jobs = int(resp.jobs)
        by_id = {r.attempt_id: r for r in resp.results}
        for k, attempt in attempts:
            r = by_id.get(attempt.attempt_id)
            if r is None:
                outcomes[k] = Outcome(False, "verifier_error: no result for this attempt")
            elif r.outcome == "correct":
                outcomes[k] = Outcome(True)
            else:
                detail = one_line(r.detail)
                outcomes[k] = Outcome(False, f"{r.outcome}: {detail}" if detail else r.outcome)
    return [outcomes[k] for k in range(len(answers))], jobs


def score_math(sandbox: Any, answers: list[Answer], timeout_s: float, progress: JobProgress | None = None
               ) -> tuple[list[Outcome], int]:
    """Math problems: each answer's last `\\boxed{...}` against the problem's gold, by the math checker (spec 18) under
    its own 3 s limit (timeout_s is for programs); no sandbox job. The error is `outcome: reason` (`malformed:
    no_boxed: ...`, `timeout: time_limit: ...`)."""
    outcomes: list[Outcome] = []
    with MathChecker(workers=min(MATH_WORKERS, max(1, len(answers)))) as checker:
        for lo in range(0, len(answers), MATH_CHUNK):
            part = answers[lo:lo + MATH_CHUNK]
            for check in checker.check_many([(a.text, a.problem.gold) for a in part]):
                outcomes.append(Outcome(True) if check.correct
                                else Outcome(False, f"{check.outcome}: {check.reason}"[:ERROR_CHARS]))
            if progress is not None:
                progress(len(outcomes), len(answers))
    return outcomes, 0


SCORERS: dict[str, Scorer] = {"program": score_programs, "evalplus": score_evalplus, "task": score_tasks,
                              "math": score_math}


# ------------------------------------------------------------------------------------------------ references
@dataclass(frozen=True)
class ReferenceCheck:
    """A benchmark's own reference answer scored as a model's would be. status: passed | failed | none (the file
    gives no reference) | set_apart (no allowed answer can be judged right: `reason` says why)."""

    id: str
    status: str
    reason: str = ""
    where: str = ""


def reference_answer(problem: Problem) -> Answer | None:
    """The problem's reference as an answer: the canonical solution (program problems, in completion form: it
    continues the prompt), the task's gold answer in the training format (the output for code_o, the reference
    input for code_i, the program for code_f), or a math problem's gold in a box; None when the file gives none."""
    if problem.kind == "math":
        return Answer(problem.id, problem, f"\\boxed{{{problem.gold.text}}}", "math_chat")
    if problem.kind == "task":
        return Answer(problem.id, problem, solution_text(problem.task, "reference"), "training")
    if not problem.canonical.strip():
        return None
    return Answer(problem.id, problem, problem.canonical, "completion")


def check_references(sandbox: Any, problems: list[Problem], timeout_s: float,
                     progress: Callable[[str, dict], None] | None = None) -> tuple[list[ReferenceCheck], int]:
    """Every problem's reference answer scored by the problem's own scorer (the problems ready to score:
    populora.evals.harness.materialise); for EvalPlus problems, an input on which the canonical solution raised or
    returned something that is not plain data fails it too. Returns the checks, in order, and the sandbox jobs;
    `progress` gets "scoring" events (populora.evals.progress) as the jobs come back."""
    checks: dict[str, ReferenceCheck] = {}
    answers: list[Answer] = []
    for p in problems:
        if p.set_apart:
            checks[p.id] = ReferenceCheck(p.id, "set_apart", p.set_apart, p.where)
            continue
        if p.kind == "evalplus" and evalplus.reference_failure(p):
            checks[p.id] = ReferenceCheck(p.id, "failed", evalplus.reference_failure(p), p.where)
            continue
        answer = reference_answer(p)
        if answer is None:
            checks[p.id] = ReferenceCheck(p.id, "none", "the file gives no reference solution", p.where)
        else:
            answers.append(answer)
    # CRUXEval: the reference is the row itself, f(input) == output, run as written (a lambda input included)
    crux = [a.problem for a in answers if a.problem.style == "cruxeval"]
    answers = [a for a in answers if a.problem.style != "cruxeval"]
    jobs = len(crux)
    for p, reason in zip(crux, _run_rows(sandbox, crux, timeout_s)):
        checks[p.id] = ReferenceCheck(p.id, "failed" if reason else "passed", reason, p.where)
    for kind in sorted({a.problem.kind for a in answers}):
        group = [a for a in answers if a.problem.kind == kind]
        got, n = SCORERS[kind](sandbox, group, timeout_s, None if progress is None else Pace(progress, "scoring"))
        jobs += n
        for a, o in zip(group, got):
            checks[a.problem.id] = ReferenceCheck(a.problem.id, "passed" if o.passed else "failed", o.error,
                                                  a.problem.where)
    return [checks[p.id] for p in problems], jobs


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


def _run_rows(sandbox: Any, problems: list[Problem], timeout_s: float) -> list[str]:
    """Why each CRUXEval row's f(input) does not give its output ("" when it does), the value compared on this
    host."""
    reasons = []
    # ids count from 0 in each Execute call: they need only tell apart the jobs of one call
    jobs = [sandbox_pb2.ExecJob(job_id=str(k % EXECUTE_CHUNK), program=p.task.program,
                                call=f"f({p.task.inputs[0]})", timeout_s=timeout_s) for k, p in enumerate(problems)]
    for p, r in zip(problems, execute(sandbox, jobs), strict=True):
        if r is None or r.status != "ok":
            reasons.append(f"f({p.task.inputs[0][:80]}) " + (f"{r.status}: {one_line(r.error)}" if r is not None
                                                             else "got no result"))
            continue
        try:
            same = evalplus.rebuild(r.value_repr) == evalplus.rebuild(p.task.outputs[0])
        except LiteralError:
            same = False
        reasons.append("" if same else f"f({p.task.inputs[0][:80]}) returns {r.value_repr[:120]}, the row says "
                                       f"{p.task.outputs[0][:120]}")
    return reasons
