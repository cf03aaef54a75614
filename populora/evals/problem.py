"""What a benchmark is made of: its problems, what a loader is given, and the error a malformed benchmark raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from populora.tasks.mathcheck import Gold
from populora.tasks.triplet import Triplet

HELDOUT_SEED = 0  # the fixed seed of `heldout`: every arm of an experiment sees the same problems


class BenchmarkError(ValueError):
    """A benchmark that cannot be loaded: unknown name, missing file, malformed line (the message names it)."""


@dataclass(frozen=True)
class Problem:
    """One problem of a benchmark.

    program: `prompt` is the function signature and docstring the model completes (or, for MBPP+, the docstring
    describing it), `entry_point` the function's name, `test` code that defines `check(candidate)` and raises when
    the candidate is wrong, `canonical` a reference solution that continues `prompt` ("" when the file has none).
    evalplus: `prompt`, `entry_point` and `canonical` as above; `base_input` and `plus_input` the argument lists the
    function is called with (for MBPP+, with the types EvalPlus gives them: populora.evals.mbppplus), `atol` the
    tolerance for float outputs; `expected` the canonical solution's outputs on them, with its time on each, filled
    by populora.evals.evalplus.with_expected before scoring (never sent where model code runs); `dataset` "mbpp" for
    MBPP+, whose tasks EvalPlus judges by rules of their own.
    task: `task` is the student task with its gold output(s); `heldout` problems carry instead the teacher proposal
    (`proposal`, `given_program`) whose validation in the sandbox makes the task, exactly as training makes tasks.
    math: `prompt` is the question in words, `gold` its answer as the math checker reads it (populora.tasks.mathcheck:
    compared with the last `\\boxed{...}` of an answer).
    `style` names the benchmark's own prompt protocol ("cruxeval"; "" = the training format), `where` the file and
    line the problem came from, `digest` the data file's sha256 (the key of cached expected outputs), `set_apart`
    why no allowed answer can be judged right ("" = scored).
    """

    id: str
    kind: str  # "program" | "evalplus" | "task" | "math"
    prompt: str = ""
    entry_point: str = ""
    test: str = ""
    canonical: str = ""
    task: Triplet | None = None
    task_type: str = ""
    proposal: str = ""
    given_program: str = ""
    base_input: tuple = ()
    plus_input: tuple = ()
    atol: float = 0.0
    expected: dict[str, tuple] | None = field(default=None, compare=False)
    style: str = ""
    where: str = ""
    digest: str = ""
    set_apart: str = ""
    dataset: str = ""
    gold: Gold | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadSpec:
    """What every loader is given: the data file (`--data`), the limit (a generated benchmark makes only that many),
    the seed, and the code_f input count (heldout)."""

    data: str | None = None
    limit: int | None = None
    seed: int = HELDOUT_SEED
    code_f_inputs: int = 10


Loader = Callable[[LoadSpec], list[Problem]]


@dataclass(frozen=True)
class Benchmark:
    name: str
    kind: str  # the scorer: "program" | "task" | "math"
    load: Loader
    needs_data: bool
    description: str
