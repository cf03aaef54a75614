"""Proposal validation (spec 3) and answer checking (spec 2), batched over one executor call each.

Everything model-written is run through a `Runner` (the sandbox); this module only parses, applies the static
rules, builds the jobs and judges plain-data results.

Gold never meets model code (docs/sandbox.md, "Reward integrity"): no job carries a gold value. A gold output is
a repr this verifier produced, rebuilt here on the host by the trusted evaluator `literals.literal_value`; a
student's answer runs in a job of its own (a code_o prediction in a job that runs nothing else, a code_i input
through the task's program, a code_f program on the hidden inputs), and the comparison happens here, on values
rebuilt by exact type from the job's report. Whatever a program reaches inside its process (frames, tracebacks,
generators, the nonce, the epilogue) can change nothing but its own values. In validation each of the
`deterministic_runs` is its own process, and the runs are compared here: a run judges only itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from populora.tasks.complexity import complexity
from populora.tasks.jobs import Job, JobResult, Runner
from populora.tasks.literals import LiteralError, literal_value
from populora.tasks.mathcheck import MathChecker, gold_of
from populora.tasks.mathword import (
    MATH_CALL,
    answer_in_statement,
    answer_shown,
    gold_text,
    gold_value,
    math_parts,
    statement_key,
)
from populora.tasks.parsing import (
    ParseError,
    extract_answer,
    fenced_blocks,
    python_program,
    rename_entry,
    strip_fence,
)
from populora.tasks.rules import Violation, arguments_violation, expression_violation, program_violation
from populora.tasks.triplet import TASK_TYPES, Triplet

# Executor statuses -> proposal rejection reasons (spec 3.5).
_RUN_REASONS = {"timeout": "timeout", "memory": "memory", "error": "runtime_error", "output_limit": "output_limit",
                "killed": "killed", "sandbox_error": "sandbox_error"}
REASONS = ("ok", "no_answer", "no_program", "no_input", "too_few_inputs", "no_message", "no_given_program",
           "syntax_error", "not_one_def", "banned_import", "banned_call", "banned_name", "banned_attribute",
           "not_restricted", "timeout", "memory", "runtime_error", "output_limit", "killed", "sandbox_error",
           "unsupported_output", "nondeterministic", "output_too_long", "output_not_literal", "unknown_task_type",
           # math_w (spec 18)
           "no_problem", "problem_too_long", "problem_has_code", "takes_arguments", "answer_in_problem",
           "unparsed_answer", "duplicate")


class ValidationSettings(Protocol):
    """The fields of `TasksConfig` validation reads."""

    timeout_s: float
    deterministic_runs: int
    max_output_repr: int
    restricted_expressions: bool
    code_f_inputs: int


@dataclass
class Proposal:
    proposal_id: str
    task_type: str
    response_text: str
    given_program: str = ""
    teacher_id: str = ""


@dataclass
class Validation:
    """The verdict on one proposal: `reason` is "ok" or the code of the first failed check (spec 3)."""

    proposal_id: str
    valid: bool
    reason: str
    detail: str = ""
    task: Triplet | None = None


@dataclass
class Attempt:
    attempt_id: str
    task: Triplet
    response_text: str


@dataclass
class Check:
    """The verdict on one student attempt: correct | wrong | malformed | verifier_error."""

    attempt_id: str
    outcome: str
    detail: str = ""
    verifier: str = "sandbox"


@dataclass
class _Parsed:
    proposal: Proposal
    program: str
    inputs: list[str]
    message: str = ""
    jobs: list[Job] = field(default_factory=list)


class _Reject(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _static_program(program: str) -> str:
    program = rename_entry(program)
    bad = program_violation(program)
    if bad:
        raise _Reject(bad.reason, bad.detail)
    return program


def _restricted_input(text: str, settings: ValidationSettings, what: str) -> None:
    bad = arguments_violation(text, what)
    if bad and (settings.restricted_expressions or bad.reason == "syntax_error"):
        raise _Reject(bad.reason, bad.detail)


def _parse_proposal(p: Proposal, settings: ValidationSettings) -> _Parsed:
    """Spec 3.1-3.4: format, blocks, one def renamed to f, static rules, restricted inputs."""
    if p.task_type not in TASK_TYPES:
        raise _Reject("unknown_task_type", f"task type {p.task_type!r} is not one of {list(TASK_TYPES)}")
    answer = extract_answer(p.response_text)
    blocks = fenced_blocks(answer)
    if p.task_type == "math_w":
        statement, source = math_parts(blocks)
        bad = program_violation(source)
        if bad:
            raise _Reject(bad.reason, bad.detail)
        return _Parsed(p, source, [], statement)
    inputs = [b.body.strip() for b in blocks if b.lang == "input"]
    if p.task_type == "code_f":
        if not p.given_program.strip():
            raise _Reject("no_given_program", "a code_f proposal needs the program the teacher was given")
        n = settings.code_f_inputs
        if len(inputs) < n:
            raise _Reject("too_few_inputs", f"{len(inputs)} ```input blocks; code_f needs at least {n}")
        inputs = inputs[-n:]
        messages = [b.body.strip() for b in blocks if b.lang == "message"]
        if not messages or not messages[-1]:
            raise _Reject("no_message", "no ```message block describing the function")
        program = _static_program(p.given_program)
        message = messages[-1]
    else:
        source = python_program(blocks)
        if not inputs:
            raise _Reject("no_input", "no ```input block in the answer")
        program = _static_program(source)
        inputs, message = inputs[:1], ""
    for k, text in enumerate(inputs):
        _restricted_input(text, settings, f"input {k + 1}")
    return _Parsed(p, program, inputs, message)


def _runs_agree(results: list[JobResult], differ: str) -> JobResult:
    """The first of the fresh runs, once every one ran ok (else its reason) and all gave the same reprs (else
    `nondeterministic`, said as `differ`)."""
    for r in results:
        if r.status != "ok":
            reason = _RUN_REASONS.get(r.status, "sandbox_error")
            if r.status == "error" and r.error.startswith("UnsupportedOutput"):
                reason = "unsupported_output"
            raise _Reject(reason, r.error or r.status)
        if r.reprs != results[0].reprs:
            raise _Reject("nondeterministic", differ)
    return results[0]


def _gold(parsed: _Parsed, results: list[JobResult], settings: ValidationSettings) -> list[str]:
    """Spec 3.5-3.7: every run ok, the same reprs in every fresh process, each output short and a literal."""
    first = _runs_agree(results, "two fresh runs gave different outputs")
    for text in first.reprs:
        if len(text) > settings.max_output_repr:
            raise _Reject("output_too_long", f"output repr has {len(text)} characters; at most "
                                             f"{settings.max_output_repr}")
        if expression_violation(text, "output") is not None:
            raise _Reject("output_not_literal", f"output {text[:80]!r} cannot be written back as a literal")
        try:
            literal_value(text)
        except LiteralError as e:
            raise _Reject("output_not_literal", f"output {text[:80]!r} cannot be rebuilt as a literal: {e}") from None
    return list(first.reprs)


def _math_gold(parsed: _Parsed, results: list[JobResult], math: MathChecker | None) -> str:
    """Spec 18: every run ok and the same answer, an answer a math_w task may have, readable by the checker (a text
    answer: read as a sympy expression, and its own box judged equal to it in time), and not written out in the statement."""
    _runs_agree(results, "two fresh runs of solution() gave different answers")
    if len(results[0].values) != 1:
        raise _Reject("sandbox_error", f"expected one value, got {len(results[0].values)}")
    gold = gold_text(results[0].values[0])
    value = gold_value(gold)
    if isinstance(value, str):
        if math is None:
            raise _Reject("unparsed_answer", "a text answer needs the math checker to read it, and none is running")
        verdict = math.reads(value)
        if not verdict.correct:
            raise _Reject("unparsed_answer", f"the checker cannot read the answer {value[:80]!r} "
                                             f"({verdict.outcome}: {verdict.reason})")
        verdict = math.check(f"\\boxed{{{value}}}", value)  # one that hangs its own check could never be solved
        if not verdict.correct:
            raise _Reject("unparsed_answer", f"the answer {value[:80]!r} is not judged equal to itself "
                                             f"({verdict.outcome}: {verdict.reason})")
    written = answer_in_statement(parsed.message, gold)
    if written is not None:
        raise _Reject("answer_in_problem", f"the problem writes out its answer {answer_shown(gold)[:80]!r} "
                                           f"(as {written[:80]!r})")
    return gold


def validate_proposals(proposals: list[Proposal], settings: ValidationSettings, runner: Runner,
                       math: MathChecker | None = None) -> list[Validation]:
    """Validate a batch of teacher proposals (spec 3) with ONE runner call: each parsed proposal is run
    `deterministic_runs` times, each run a fresh process. Valid ones come back with a Triplet whose outputs are
    the verifier's reprs and whose complexity is filled in (spec 11).

    math_w proposals (spec 18) run `solution()` the same way; their gold is the answer it returns, a text answer
    read by `math` (the math checker); a statement that repeats an earlier valid one of the batch is a duplicate."""
    verdicts: dict[int, Validation] = {}
    parsed: dict[int, _Parsed] = {}
    jobs: list[Job] = []
    for idx, p in enumerate(proposals):
        try:
            item = _parse_proposal(p, settings)
        except (ParseError, _Reject) as e:
            verdicts[idx] = Validation(p.proposal_id, False, e.reason, e.detail)
            continue
        calls = [MATH_CALL] if p.task_type == "math_w" else [f"f({text})" for text in item.inputs]
        item.jobs = [Job(f"{p.proposal_id}#run{k}", item.program, calls=calls, timeout_s=settings.timeout_s)
                     for k in range(settings.deterministic_runs)]
        parsed[idx] = item
        jobs.extend(item.jobs)
    results = runner(jobs) if jobs else []
    cursor = 0
    statements: set[str] = set()
    for idx, item in parsed.items():
        mine = results[cursor:cursor + len(item.jobs)]
        cursor += len(item.jobs)
        p = item.proposal
        try:
            if p.task_type == "math_w":
                outputs = [_math_gold(item, mine, math)]
                if statement_key(item.message) in statements:
                    raise _Reject("duplicate", "the same problem as an earlier proposal of this step")
                statements.add(statement_key(item.message))
            else:
                outputs = _gold(item, mine, settings)
        except (_Reject, ParseError) as e:
            verdicts[idx] = Validation(p.proposal_id, False, e.reason, e.detail)
            continue
        task = Triplet(task_type=p.task_type, program=item.program, inputs=item.inputs, outputs=outputs,
                       message=item.message, teacher_id=p.teacher_id, task_id=p.proposal_id,
                       complexity=complexity(item.program))
        verdicts[idx] = Validation(p.proposal_id, True, "ok", "", task)
    return [verdicts[i] for i in range(len(proposals))]


def _gold_values(texts: list[str]) -> list[Any]:
    """The gold outputs rebuilt on the host from their reprs (never in a job); _Reject(verifier_error) when a
    task's output is not a literal the verifier can rebuild (a task that did not come from validate_proposals)."""
    values = []
    for k, text in enumerate(texts):
        try:
            values.append(literal_value(text))
        except LiteralError as e:
            raise _Reject("verifier_error", f"gold output {k + 1} {text[:80]!r}: {e}") from None
    return values


def _prediction(answer: str, rule: Callable[[str, str], Violation | None], what: str,
                settings: ValidationSettings) -> str:
    """A student's predicted output or input, unfenced; _Reject(malformed) when it breaks `rule` (only a syntax
    error counts when restricted expressions are off by config)."""
    pred = strip_fence(answer)
    bad = rule(pred, what)
    if bad and (settings.restricted_expressions or bad.reason == "syntax_error"):
        raise _Reject("malformed", f"{bad.reason}: {bad.detail}")
    return pred


def _attempt_job(a: Attempt, settings: ValidationSettings) -> tuple[Job, list[Any], list[str]]:
    """The job that runs one attempt, with the gold values (and their texts) its values are compared with;
    raises _Reject(malformed) for an answer that breaks the rules, _Reject(verifier_error) for a bad task."""
    t = a.task
    answer = extract_answer(a.response_text, require_think=True)
    job_id = f"{a.attempt_id}#check"
    if t.task_type == "code_o":
        pred = _prediction(answer, expression_violation, "predicted output", settings)
        gold = t.outputs[:1]
        if settings.restricted_expressions:
            # the prediction is model-written: evaluated in a job of its own that runs nothing else (spec 2)
            return Job(job_id, "", literals=[pred], timeout_s=settings.timeout_s), _gold_values(gold), gold
        # unrestricted (off by config): the prediction may use any builtin, so it is evaluated as a call
        return Job(job_id, "", calls=[pred], timeout_s=settings.timeout_s), _gold_values(gold), gold
    if t.task_type == "code_i":
        pred = _prediction(answer, arguments_violation, "predicted input", settings)
        gold = t.outputs[:1]
        return Job(job_id, t.program, calls=[f"f({pred})"], timeout_s=settings.timeout_s), _gold_values(gold), gold
    half = len(t.inputs) // 2
    hidden_in, hidden_out = t.inputs[half:], t.outputs[half:]
    try:
        program = _static_program(python_program(fenced_blocks(answer), fallback=answer))
    except (ParseError, _Reject) as e:
        raise _Reject("malformed", f"{e.reason}: {e.detail}") from None
    return (Job(job_id, program, calls=[f"f({i})" for i in hidden_in], timeout_s=settings.timeout_s),
            _gold_values(hidden_out), list(hidden_out))


def _judge(task_type: str, r: JobResult, gold: list[Any], gold_texts: list[str]) -> tuple[str, str]:
    """The outcome of one attempt's run, compared here with the gold values rebuilt on the host."""
    if r.status == "sandbox_error" and task_type != "code_f":
        return "verifier_error", r.error or "sandbox_error"
    if r.status != "ok":
        return "wrong", f"{r.status}: {r.error}".strip(": ")
    if len(r.values) != len(gold):
        # a code_f program ran as the student wrote it, so a report of the wrong length is its own doing
        outcome = "wrong" if task_type == "code_f" else "verifier_error"
        return outcome, f"expected {len(gold)} values, got {len(r.values)}"
    for k, (x, y) in enumerate(zip(r.values, gold)):
        if not x == y:  # both sides are exact builtin types rebuilt by trusted code on this host
            return "wrong", f"pair {k + 1}: got {r.reprs[k][:200]}, expected {gold_texts[k][:200]}"
    return "correct", ""


def check_math(attempts: list[Attempt], math: MathChecker | None) -> list[Check]:
    """math_w attempts (spec 18): the student's last `\\boxed{}` against the task's gold by the math checker; no box is
    malformed, a check that times out is wrong. Nothing in an answer is run."""
    out: list[Check | None] = [None] * len(attempts)
    items, where = [], []
    for k, a in enumerate(attempts):
        try:  # a task sent from elsewhere may hold any text: a gold the checker cannot take is not judged
            gold = gold_of(gold_value(a.task.outputs[0]))
        except ValueError as e:
            out[k] = Check(a.attempt_id, "verifier_error", str(e))
            continue
        if math is None:
            out[k] = Check(a.attempt_id, "verifier_error", "no math checker is running")
            continue
        items.append((a.response_text, gold))
        where.append(k)
    for k, verdict in zip(where, math.check_many(items) if items else [], strict=True):
        outcome = "wrong" if verdict.outcome == "timeout" else verdict.outcome
        reason = f"timeout: {verdict.reason}" if verdict.outcome == "timeout" else verdict.reason
        out[k] = Check(attempts[k].attempt_id, outcome, reason)
    return out  # type: ignore[return-value]


def check_answers(attempts: list[Attempt], settings: ValidationSettings, runner: Runner,
                  math: MathChecker | None = None) -> list[Check]:
    """Check a batch of student attempts (spec 2) with ONE runner call.

    code_o: the predicted expression's value == the gold output's value. code_i: f(predicted input) == gold
    (any input that gives it is right). code_f: the student's program reproduces every hidden pair (the last
    N/2). Malformed: no `<think>` then `<answer>`, or an answer that breaks the static rules. math_w (spec 18):
    `check_math` with the math checker `math`, no job.
    """
    verdicts: dict[int, Check] = {}
    pending: list[tuple[int, list[Any], list[str]]] = []
    jobs: list[Job] = []
    maths = [idx for idx, a in enumerate(attempts) if a.task.task_type == "math_w"]
    if maths:
        verdicts.update(zip(maths, check_math([attempts[i] for i in maths], math), strict=True))
    for idx, a in enumerate(attempts):
        if idx in verdicts:
            continue
        try:
            job, gold, gold_texts = _attempt_job(a, settings)
        except ParseError as e:
            verdicts[idx] = Check(a.attempt_id, "malformed", f"{e.reason}: {e.detail}")
            continue
        except _Reject as e:
            verdicts[idx] = Check(a.attempt_id, "verifier_error" if e.reason == "verifier_error" else "malformed",
                                  e.detail)
            continue
        pending.append((idx, gold, gold_texts))
        jobs.append(job)
    results = runner(jobs) if jobs else []
    for (idx, gold, gold_texts), r in zip(pending, results):
        outcome, detail = _judge(attempts[idx].task.task_type, r, gold, gold_texts)
        verdicts[idx] = Check(attempts[idx].attempt_id, outcome, detail)
    return [verdicts[i] for i in range(len(attempts))]
