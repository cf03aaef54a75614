"""EvalPlus scoring (spec 15): a program is called on every base and plus input of its problem in the sandbox, and its
outputs are compared on this host with the canonical solution's outputs on the same inputs (`atol` for floats), as
EvalPlus compares them.

- The canonical solution runs once per file (its outputs and its time on each input cached under the populora cache
  by the file's sha256) in jobs of its own; the outputs come back as plain data and never enter a job that runs
  model-written code (the jobs and what they return: populora.evals.plusruns).
- Time limits are EvalPlus's: an input may take LIMIT_FACTOR times the canonical solution's time on it, at least
  MIN_LIMIT_S, counted in CPU seconds (populora.evals.plusruns says why); a program that runs past it fails there
  (its later inputs in the job are not run).
- Comparison (EvalPlus's `unsafe_execute`): equal values pass; otherwise, where `atol` is given or the expected value
  is a float or a sequence of floats (then atol 1e-6), values of the same type and length pass when every number is
  within atol + 1e-7 * |expected|. `find_zero` (HumanEval/32) is judged as EvalPlus judges it: |poly(xs, x)| <= atol.
  MBPP+'s tasks with an oracle of their own are judged by it (populora.evals.mbppplus): whether the output is None,
  set equality, and four tasks that accept a second answer. An input on which the canonical solution raised passes
  when the program raises too.
- `base` passes when every base input passes; `plus` when every base and every plus input passes (EvalPlus's
  "base + extra").
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from populora.evals import mbppplus
from populora.evals.plusruns import Output, Run, rebuild, run_inputs
from populora.evals.problem import Problem
from populora.tasks.literals import LiteralError

__all__ = ["Output", "PlusOutcome", "canonical_program", "first_mismatch", "limits_of", "rebuild",
           "reference_failure", "same_output", "score_programs", "with_expected"]

SPLITS = ("base", "plus")
CACHE_FORMAT = 2  # 2: each expected output carries the canonical solution's seconds; MBPP+ inputs typed
FLOAT_ATOL = 1e-6  # EvalPlus's atol for float outputs when the problem gives none
RTOL = 1e-7  # numpy.allclose's rtol as EvalPlus sets it
MIN_LIMIT_S = 1.0  # EvalPlus's DEFAULT_MIN_TIME_LIMIT: no input is given less
LIMIT_FACTOR = 4.0  # EvalPlus's DEFAULT_GT_TIME_LIMIT_FACTOR: an input may take this many times the reference's


class EvalPlusError(RuntimeError):
    """A canonical solution whose outputs could not be computed (the message names the problem and why)."""


# ------------------------------------------------------------------------------------------------ comparison
def _is_floats(x: Any) -> bool:
    return type(x) is float or (type(x) in (list, tuple) and len(x) > 0 and all(type(v) is float for v in x))


def _close(out: Any, exp: Any, atol: float) -> bool:
    numbers = (int, float, bool)
    if type(out) in numbers and type(exp) in numbers:
        return abs(out - exp) <= atol + RTOL * abs(exp)
    if type(out) in (list, tuple) and type(out) is type(exp):
        return len(out) == len(exp) and all(_close(o, e, atol) for o, e in zip(out, exp))
    return out == exp


def _poly(xs: list, x: float) -> float:
    return sum(c * x ** i for i, c in enumerate(xs))


def _not_none(o: Output, candidate: bool) -> Output:
    """An output of a task that returns a re.Match or None (mbppplus.NOT_NONE) as EvalPlus reads it: whether it is
    not None, where a candidate's bool is taken as that answer."""
    if o.status not in ("ok", "unplain", "digest"):
        return o
    if candidate and o.status == "ok" and o.text in ("True", "False"):
        return o
    return Output("ok", repr(not (o.status == "ok" and o.text == "None")), o.seconds)


def same_output(got: Output, want: Output, atol: float, entry_point: str = "", args: list | None = None,
                dataset: str = "") -> bool:
    """Whether one call's output matches the canonical solution's (the module docstring gives the rules)."""
    if dataset == "mbpp" and entry_point in mbppplus.NOT_NONE:
        got, want = _not_none(got, candidate=True), _not_none(want, candidate=False)
    if want.status == "raised":
        return got.status == "raised"
    if want.status == "failed" or got.status != want.status:
        return False
    if want.status != "ok":
        return got.text == want.text
    try:
        out, exp = rebuild(got.text), rebuild(want.text)
    except LiteralError:
        return False
    if entry_point == "find_zero" and args and type(out) in (int, float):
        try:
            return abs(_poly(args[0], out)) <= (atol or FLOAT_ATOL)
        except (TypeError, OverflowError):
            return False
    equal = type(out) is type(exp) and out == exp
    if dataset == "mbpp":
        equal = mbppplus.exact_match(entry_point, out, exp, list(args or ()), atol, equal)
    if equal:
        return True
    if atol == 0 and _is_floats(exp):
        atol = FLOAT_ATOL
    return atol != 0 and type(out) is type(exp) and _close(out, exp, atol)


def first_mismatch(problem: Problem, split: str, got: list[Output]) -> str:
    """"" when every input of `split` matches the expected outputs, else one line saying where it first did not."""
    inputs = problem.base_input if split == "base" else problem.plus_input
    want = problem.expected[split]
    for k, (g, w) in enumerate(zip(got, want)):
        if not same_output(g, w, problem.atol, problem.entry_point, inputs[k], problem.dataset):
            shown = {"ok": f"returned {g.text[:120]}", "raised": f"raised {g.text}", "failed": g.text,
                     "unplain": f"returned a value that is not plain data ({g.text})",
                     "digest": "returned a large value that differs",
                     "timeout": f"ran past its limit of {g.text} CPU s ({LIMIT_FACTOR:g} times the canonical "
                                f"solution's time, at least {MIN_LIMIT_S:g} s, as EvalPlus sets it)",
                     "skipped": "was not run"}.get(g.status, g.status)
            wanted = {"ok": w.text[:120], "raised": f"an exception ({w.text})"}.get(w.status, "another value")
            return f"{split} input {k}: {shown}, expected {wanted}"
    return ""


def limits_of(problem: Problem, split: str) -> tuple[float, ...]:
    """Each input's time limit in CPU seconds, as EvalPlus sets it: LIMIT_FACTOR times the canonical solution's time
    on it, at least MIN_LIMIT_S."""
    return tuple(max(MIN_LIMIT_S, LIMIT_FACTOR * o.seconds) for o in problem.expected[split])


# ------------------------------------------------------------------------------------------------ expected outputs
def _cache_file(cache: Path | None, digest: str) -> Path | None:
    return cache / "evals" / "expected" / f"{digest}.json" if cache is not None and digest else None


def _read_cache(path: Path | None) -> dict:
    if path is None or not path.is_file():
        return {}
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return body.get("problems", {}) if body.get("format") == CACHE_FORMAT else {}


def _write_cache(path: Path, problems: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".expected-", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump({"format": CACHE_FORMAT, "problems": problems}, fh)
    os.replace(tmp, path)


def with_expected(sandbox: Any, problems: list[Problem], cache: Path | None,
                  progress: Callable[[int, int], None] | None = None) -> list[Problem]:
    """The EvalPlus problems with `expected` filled: the canonical solution's outputs on every base and plus input,
    with its time on each, read from the cache of the problem's file when there, else computed in the sandbox (no
    time limit but the sandbox's longest job: populora.evals.plusruns) and cached. `progress(jobs done, jobs known)`
    as the sandbox's jobs come back."""
    todo = [p for p in problems if p.kind == "evalplus" and p.expected is None]
    if not todo:
        return problems
    cached: dict[str, dict] = {}
    for digest in {p.digest for p in todo}:
        cached[digest] = _read_cache(_cache_file(cache, digest))
    missing = [p for p in todo if p.id not in cached[p.digest]]
    runs = [Run(f"{p.id}\0{split}", canonical_program(p), p.entry_point,
                tuple(p.base_input if split == "base" else p.plus_input)) for p in missing for split in SPLITS]
    outputs, _ = run_inputs(sandbox, runs, progress)
    for p in missing:
        cached[p.digest][p.id] = {split: [[o.status, o.text, round(o.seconds, 6)]
                                          for o in outputs[f"{p.id}\0{split}"]] for split in SPLITS}
    for digest in {p.digest for p in missing}:
        path = _cache_file(cache, digest)
        if path is not None:
            _write_cache(path, cached[digest])
    out = []
    for p in problems:
        if p.kind == "evalplus" and p.expected is None:
            entry = cached[p.digest][p.id]
            p = replace(p, expected={split: tuple(Output(s, t, sec) for s, t, sec in entry[split]) for split in SPLITS})
        out.append(p)
    return out


def canonical_program(problem: Problem) -> str:
    """The benchmark's reference solution as a program (it continues the prompt)."""
    return problem.prompt + problem.canonical


def reference_failure(problem: Problem) -> str:
    """Why a problem's canonical solution cannot stand as the reference ("" when it can): an input on which it
    raised, a value that is not plain data (where the task does not judge only whether it is None), or a run that
    failed (the sandbox's longest job, memory, ...)."""
    not_none = problem.dataset == "mbpp" and problem.entry_point in mbppplus.NOT_NONE
    for split in SPLITS:
        for k, o in enumerate(problem.expected[split]):
            if o.status == "raised":
                return f"{split} input {k}: the canonical solution raised {o.text}"
            if o.status == "failed" or (o.status == "unplain" and not not_none):
                what = f"returned a value that is not plain data ({o.text})" if o.status == "unplain" else o.text
                return f"{split} input {k}: the canonical solution {what}"
    return ""


@dataclass(frozen=True)
class PlusOutcome:
    base: bool
    plus: bool
    error: str


def score_programs(sandbox: Any, items: list[tuple[str, Problem, str]],
                   progress: Callable[[int, int], None] | None = None) -> tuple[list[PlusOutcome], int]:
    """Each (key, problem, program) run on its problem's base and plus inputs, each input under its EvalPlus time
    limit (limits_of); the outcomes and the jobs run. `progress(jobs done, jobs known)` as jobs come back."""
    runs = [Run(f"{key}\0{split}", program, p.entry_point, tuple(p.base_input if split == "base" else p.plus_input),
                limits_of(p, split)) for key, p, program in items for split in SPLITS]
    outputs, jobs = run_inputs(sandbox, runs, progress)
    out = []
    for key, p, _ in items:
        base = first_mismatch(p, "base", outputs[f"{key}\0base"])
        plus = first_mismatch(p, "plus", outputs[f"{key}\0plus"])
        out.append(PlusOutcome(not base, not base and not plus, base or plus))
    return out, jobs
