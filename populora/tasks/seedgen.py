"""The project's own generator of small deterministic seed programs (spec 13), each with inputs, from the templates of
`populora.tasks.seed_templates` (strings, lists, dicts, loops, recursion, comprehensions and one-line programs a
small model can trace), split once and for all into warm-start and held-out templates.

The generator writes programs and inputs only. Outputs are computed by the verifier: `verify_programs` sends every
program through proposal validation (spec 3, the sandbox), exactly as a teacher's proposal would go, and keeps the
outputs the sandbox reports. Same seed, same programs and inputs, in any process (nothing here hashes strings or
iterates over sets).

    programs = generate_programs(24, seed=0, split="warm")       # never a held-out template
    triplets = verify_programs(programs, "code_o", runner, cfg.tasks)
    eval_set = heldout_tasks(50, seed=1, runner=runner, settings=cfg.tasks)   # never seen by the warm start
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from populora.tasks.jobs import Runner
from populora.tasks.mathword import answer_in_statement, answer_shown
from populora.tasks.prompts import student_messages, teacher_messages
from populora.tasks.seed_templates import (
    CONSTRUCTS,
    HELDOUT_TEMPLATES,
    LETTERS,
    SPLITS,
    TEMPLATES,
    WARM_TEMPLATES,
    WORDS,
    Draft,
    Template,
    templates_of,
)
from populora.tasks.seed_templates.words import WORD_TEMPLATES
from populora.tasks.triplet import CODE_TASK_TYPES, TASK_TYPES, Triplet
from populora.tasks.verify import Proposal, ValidationSettings, validate_proposals

__all__ = ["CONSTRUCTS", "HELDOUT_TEMPLATES", "LETTERS", "SPLITS", "TEMPLATES", "WARM_TEMPLATES", "WORDS", "Draft",
           "FormatExample", "GeneratorError", "SeedProgram", "Template", "format_examples", "generate_programs",
           "heldout_programs", "heldout_tasks", "proposal_text", "seed_proposals", "solution_text", "templates_of",
           "triplets_from_verdicts", "verify_programs", "generate_word_problems"]


class GeneratorError(RuntimeError):
    """A generated program the verifier rejected: a bug in a template (the message names it and the reason)."""


@dataclass(frozen=True)
class SeedProgram:
    """One generated program: its template, source (entry function `f`), argument-list texts to call it with, and a
    one-sentence description (the code_f message and the reasoning line of warm-start examples). A math_w problem
    (spec 18) has its `statement`, a program with entry `solution` and no inputs, and its working as the message."""

    template: str
    program: str
    inputs: tuple[str, ...]
    message: str
    statement: str = ""


# ---------------------------------------------------------------- programs

def generate_programs(n: int, seed: int, split: str = "warm", n_inputs: int = 1, stream: str = "") -> list[SeedProgram]:
    """`n` programs of the split's templates, round-robin over the templates (each `weight` times) in a seeded order,
    each with `n_inputs` distinct inputs (code_f needs N). Deterministic in (n, seed, split, n_inputs, stream);
    `stream` names an independent sequence (one per task type, say)."""
    if n < 0 or n_inputs < 1:
        raise ValueError(f"need n >= 0 and n_inputs >= 1 (got n={n}, n_inputs={n_inputs})")
    names = [name for name in templates_of(split) for _ in range(TEMPLATES[name].weight)]
    rng = random.Random(f"populora-seedgen/{split}/{seed}/{stream}")
    rng.shuffle(names)
    out = []
    for k in range(n):
        template = TEMPLATES[names[k % len(names)]]
        draft = template.draw(rng)
        out.append(SeedProgram(template.name, draft.program, _distinct_inputs(draft, rng, n_inputs, template.name),
                               draft.message))
    return out


def generate_word_problems(n: int, seed: int, stream: str = "math_w") -> list[SeedProgram]:
    """`n` math word problems with their programs (spec 18), round-robin over the word templates (each `weight` times)
    in a seeded order;
    a draw whose statement writes out its answer, or repeats an earlier one, is drawn again. Deterministic in (n, seed, stream)."""
    if n < 0:
        raise ValueError(f"need n >= 0 (got n={n})")
    names = [name for name, t in WORD_TEMPLATES.items() for _ in range(t.weight)]
    rng = random.Random(f"populora-seedgen/words/{seed}/{stream}")
    rng.shuffle(names)
    out, seen = [], set()
    for k in range(n):
        template = WORD_TEMPLATES[names[k % len(names)]]
        for _ in range(100):
            d = template.draw(rng)
            if d.statement not in seen and answer_in_statement(d.statement, repr(d.answer)) is None:
                break
        else:
            raise GeneratorError(f"word template {template.name!r} kept writing its answer in the statement or "
                                 "drawing a problem it drew before")
        seen.add(d.statement)
        out.append(SeedProgram(template.name, d.program, (), d.working, d.statement))
    return out


def _distinct_inputs(draft: Draft, rng: random.Random, n: int, name: str) -> tuple[str, ...]:
    inputs: list[str] = []
    for _ in range(50 * n):
        text = draft.draw_input(rng)
        if text not in inputs:
            inputs.append(text)
            if len(inputs) == n:
                return tuple(inputs)
    raise GeneratorError(f"template {name!r} could not draw {n} distinct inputs")


# ---------------------------------------------------------------- the answer formats (what the parsers read back)

def proposal_text(program: SeedProgram, task_type: str) -> str:
    """A teacher's answer in the exact proposal format (spec 3.1-3.2) that proposes `program`: a python block and an
    input block (code_o, code_i), or the inputs and a message block for the given program (code_f)."""
    _check_type(task_type)
    think = f"<think>{program.message}</think>\n"
    if task_type == "math_w":
        return (f"{think}<answer>\n```problem\n{program.statement}\n```\n```python\n{program.program}\n```\n"
                "</answer>")
    if task_type == "code_f":
        blocks = "".join(f"```input\n{i}\n```\n" for i in program.inputs) + f"```message\n{program.message}\n```"
        return f"{think}<answer>\n{blocks}\n</answer>"
    return f"{think}<answer>\n```python\n{program.program}\n```\n```input\n{program.inputs[0]}\n```\n</answer>"


def solution_text(task: Triplet, message: str) -> str:
    """A student's correct answer in the exact attempt format (spec 4): the gold output (code_o), the task's own
    input (code_i) or the program (code_f) inside <answer>, after a short <think>. math_w (spec 18): the working,
    then the verifier's answer in `\\boxed{}`."""
    _check_type(task.task_type)
    if task.task_type == "math_w":
        return f"{message} The answer is \\boxed{{{answer_shown(task.outputs[0])}}}."
    if task.task_type == "code_o":
        answer = task.outputs[0]
    elif task.task_type == "code_i":
        answer = task.inputs[0]
    else:
        answer = f"```python\n{task.program}\n```"
    return f"<think>{message}</think>\n<answer>{answer}</answer>"


def _check_type(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; allowed: {list(TASK_TYPES)}")


# ---------------------------------------------------------------- outputs from the verifier

def seed_proposals(programs: list[SeedProgram], task_type: str) -> list[Proposal]:
    """Each program as the teacher proposal that proposes it (what the verifier validates)."""
    return [Proposal(f"seedgen/{k}/{p.template}", task_type, proposal_text(p, task_type),
                     given_program=p.program if task_type == "code_f" else "")
            for k, p in enumerate(programs)]


def verify_programs(programs: list[SeedProgram], task_type: str, runner: Runner,
                    settings: ValidationSettings) -> list[Triplet]:
    """Each program as a validated task (spec 3): its proposal text goes through `validate_proposals` with the
    sandbox `runner`, so its outputs are the ones the verifier computed. A program the verifier rejects is a bug in
    its template: GeneratorError names it."""
    verdicts = validate_proposals(seed_proposals(programs, task_type), settings, runner)
    return triplets_from_verdicts(programs, task_type, [(v.valid, v.reason, v.detail, v.task) for v in verdicts])


def triplets_from_verdicts(programs: list[SeedProgram], task_type: str,
                           verdicts: list[tuple[bool, str, str, Triplet | None]]) -> list[Triplet]:
    """Triplets from the verifier's (valid, reason, detail, task) verdicts on `proposal_text` of each program (the
    same verdicts whether the sandbox ran in this process or behind its service)."""
    if len(verdicts) != len(programs):
        raise GeneratorError(f"{len(programs)} programs but {len(verdicts)} verdicts")
    out = []
    for k, (p, (valid, reason, detail, task)) in enumerate(zip(programs, verdicts, strict=True)):
        if not valid or task is None:
            raise GeneratorError(f"generated program {k} (template {p.template!r}, {task_type}) was rejected by the "
                                 f"verifier: {reason}: {detail}\n{p.program}")
        task.task_id = f"seedgen-{p.template}-{k}"
        task.teacher_id = ""
        out.append(task)
    return out


def heldout_programs(n: int, seed: int, code_f_inputs: int = 10,
                     task_types: tuple[str, ...] = CODE_TASK_TYPES) -> list[tuple[str, SeedProgram]]:
    """`n` (task type, program) pairs from the held-out templates only (spec 13), task types in turn, each type from a
    stream of its own, so the first k pairs are the same for any n >= k. code_f programs carry `code_f_inputs`
    inputs. Deterministic in (n, seed, code_f_inputs, task_types)."""
    for tt in task_types:
        if tt not in CODE_TASK_TYPES:
            raise ValueError(f"held-out programs are of the code types {list(CODE_TASK_TYPES)}, not {tt!r} (the "
                             "math held-out sets are the published benchmarks)")
    if not task_types:
        raise ValueError("heldout programs need at least one task type")
    counts = {tt: len(range(i, n, len(task_types))) for i, tt in enumerate(task_types)}
    by_type = {tt: generate_programs(count, seed, split="heldout", n_inputs=code_f_inputs if tt == "code_f" else 1,
                                     stream=tt) for tt, count in counts.items()}
    return [(task_types[i % len(task_types)], by_type[task_types[i % len(task_types)]][i // len(task_types)])
            for i in range(n)]


def heldout_tasks(n: int, seed: int, runner: Runner, settings: ValidationSettings,
                  task_types: tuple[str, ...] = CODE_TASK_TYPES) -> list[Triplet]:
    """`n` tasks from the held-out templates only (spec 13), task types in turn, outputs computed by the verifier.

    The warm start never uses these templates, so an evaluation on them (population vs baseline) measures what
    training taught. Deterministic in (n, seed, task_types, settings.code_f_inputs)."""
    pairs = heldout_programs(n, seed, settings.code_f_inputs, task_types)
    by_type: dict[str, list[Triplet]] = {}
    for tt in dict.fromkeys(task_types):
        programs = [p for t, p in pairs if t == tt]
        by_type[tt] = verify_programs(programs, tt, runner, settings) if programs else []
    cursor = dict.fromkeys(by_type, 0)
    out = []
    for tt, _ in pairs:
        out.append(by_type[tt][cursor[tt]])
        cursor[tt] += 1
    return out


# ---------------------------------------------------------------- warm-start examples (spec 13)

@dataclass(frozen=True)
class FormatExample:
    """One supervised example of the warm start: the chat prompt the role sees in the run and the answer taught."""

    messages: tuple[tuple[str, str], ...]  # (role, content) turns
    response: str
    task_type: str
    role: str  # "teacher" | "student"


def format_examples(tasks: dict[str, list[tuple[SeedProgram, Triplet]]], n: int, seed: int, n_references: int,
                    teacher_fraction: float, n_inputs: int) -> list[FormatExample]:
    """`n` examples in the exact teacher and student formats, from verified warm-start tasks per task type.

    A `teacher_fraction` of them are proposals (the prompt a teacher gets in the run, with `n_references` other
    tasks of that type as references, or the program for code_f; the answer proposes the example's program); the
    rest are student answers to the task (the verifier's output for code_o, the task's input for code_i, the
    program for code_f). Roles interleave evenly and task types take turns within each role."""
    types = [tt for tt in TASK_TYPES if tasks.get(tt)]
    if not types:
        raise ValueError("format_examples needs verified tasks of at least one task type")
    if not 0 <= teacher_fraction <= 1:
        raise ValueError(f"teacher_fraction must lie in [0, 1], got {teacher_fraction}")
    rng = random.Random(f"populora-format-examples/{seed}")
    cursor: dict[tuple[str, str], int] = {}
    turn = {"teacher": 0, "student": 0}
    out = []
    for k in range(n):
        role = "teacher" if int((k + 1) * teacher_fraction) > int(k * teacher_fraction) else "student"
        tt = types[turn[role] % len(types)]
        turn[role] += 1
        pool = tasks[tt]
        i = cursor.get((role, tt), 0)
        cursor[(role, tt)] = i + 1
        program, task = pool[i % len(pool)]
        if role == "student":
            msgs, response = student_messages(task), solution_text(task, program.message)
        elif tt == "code_f":
            msgs = teacher_messages(tt, [], given_program=program.program, n_inputs=n_inputs)
            response = proposal_text(program, tt)
        else:
            others = [t for j, (_, t) in enumerate(pool) if j != i % len(pool)]
            refs = rng.sample(others, min(n_references, len(others)))
            msgs, response = teacher_messages(tt, refs), proposal_text(program, tt)
        out.append(FormatExample(tuple((m["role"], m["content"]) for m in msgs), response, tt, role))
    return out
