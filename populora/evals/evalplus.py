"""EvalPlus scoring (spec 15): a program is called on every base and plus input of its problem in the sandbox, and its
outputs are compared on this host with the canonical solution's outputs on the same inputs (`atol` for floats), as
EvalPlus compares them.

- The canonical solution runs once per file (its outputs cached under the populora cache by the file's sha256) in a
  job of its own; the outputs come back as plain data and never enter a job that runs model-written code.
- A job calls the function on a run of inputs (a deep copy of each, as EvalPlus does) and returns, per input,
  `("ok", value)`, `("raised", exception name)`, `("unplain", type name)` for a value that is not plain data, or
  `("digest", sha256)` for a value whose canonical text is over DIGEST_CHARS (compared exactly, by digest: set and
  dict order do not matter). A run whose values are over the sandbox's output limit is split in halves and run again.
- Comparison (EvalPlus's `unsafe_execute`): equal values pass; otherwise, where `atol` is given or the expected value
  is a float or a sequence of floats (then atol 1e-6), values of the same type and length pass when every number is
  within atol + 1e-7 * |expected|. `find_zero` (HumanEval/32) is judged as EvalPlus judges it: |poly(xs, x)| <= atol.
  An input on which the canonical solution raised passes when the program raises too.
- `base` passes when every base input passes; `plus` when every base and every plus input passes (EvalPlus's
  "base + extra").
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from populora.evals.problem import Problem
from populora.pb import sandbox_pb2
from populora.tasks.literals import LiteralError, literal_value

SPLITS = ("base", "plus")
RUN_INPUTS = 32  # inputs per job at first (one timeout covers them all); halved where the values are over the
# sandbox's output limit
DIGEST_CHARS = 1000
EXECUTE_CHUNK = 512
CACHE_FORMAT = 1
FLOAT_ATOL = 1e-6  # EvalPlus's atol for float outputs when the problem gives none
RTOL = 1e-7  # numpy.allclose's rtol as EvalPlus sets it

# Appended after the program: the entry point is looked up by the call, so a program that defines no such function
# fails every input with a NameError.
RUNNER = '''

def __populora_outputs(__fn, __inputs):
    import copy as __copy
    import hashlib as __hashlib
    __plain = (bool, int, float, complex, str, bytes, type(None))

    def __canon(x, depth=0):
        t = type(x)
        if depth > 100:
            raise TypeError("nested deeper than 100")
        if t in __plain:
            return t.__name__ + ":" + repr(x)
        if t is list or t is tuple:
            return t.__name__ + "[" + ",".join(__canon(v, depth + 1) for v in x) + "]"
        if t is set or t is frozenset:
            return t.__name__ + "{" + ",".join(sorted(__canon(v, depth + 1) for v in x)) + "}"
        if t is dict:
            return "dict{" + ",".join(sorted(__canon(k, depth + 1) + ":" + __canon(v, depth + 1)
                                             for k, v in x.items())) + "}"
        raise TypeError(t.__name__)

    out = []
    for args in __inputs:
        try:
            value = __fn(*__copy.deepcopy(args))
        except BaseException as e:
            out.append(("raised", type(e).__name__))
            continue
        try:
            text = __canon(value)
        except (TypeError, RecursionError) as e:
            out.append(("unplain", str(e)[:80]))
            continue
        if len(text) > DIGEST_CHARS:
            out.append(("digest", __hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()))
        else:
            out.append(("ok", value))
    return out
'''.replace("DIGEST_CHARS", str(DIGEST_CHARS))


class EvalPlusError(RuntimeError):
    """A canonical solution whose outputs could not be computed (the message names the problem and why)."""


@dataclass(frozen=True)
class Output:
    """One call's result: status ok | raised | unplain | digest | failed (the whole job failed: `text` says why),
    and the value's repr (ok), the exception or type name, or the digest."""

    status: str
    text: str


# ------------------------------------------------------------------------------------------------ inputs as code
def python_literal(value: Any) -> str:
    """Python source for a JSON value (EvalPlus stores inputs as JSON): non-finite floats as float('inf')."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({repr(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def runner_job(job_id: str, program: str, entry_point: str, inputs: list, timeout_s: float) -> sandbox_pb2.ExecJob:
    code = f"{program}\n{RUNNER}\n__populora_inputs = {python_literal(list(inputs))}\n"
    return sandbox_pb2.ExecJob(job_id=job_id, program=code, call=f"__populora_outputs({entry_point}, "
                                                                  "__populora_inputs)", timeout_s=timeout_s)


# ------------------------------------------------------------------------------------------------ values
def rebuild(text: str) -> Any:
    """A value from its repr, made on this host from plain data (populora.tasks.literals), with the non-finite
    floats a repr writes as names (inf, nan) read back as floats."""
    try:
        return literal_value(text)
    except LiteralError:
        pass
    tokens = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and tok.string in ("inf", "nan"):
                tokens.append((tokenize.NAME, f"float('{tok.string}')"))
            else:
                tokens.append((tok.type, tok.string))
    except (tokenize.TokenError, SyntaxError) as e:
        raise LiteralError(f"does not parse: {e}") from None
    return literal_value(tokenize.untokenize(tokens))


def _outputs(result: sandbox_pb2.ExecResult, n: int) -> list[Output] | None:
    """The per-input outputs of one job; None when its values were over the output limit (split and rerun)."""
    if result.status == "output_limit" and n > 1:
        return None
    if result.status != "ok":
        why = f"{result.status}: {result.error.strip().splitlines()[-1] if result.error.strip() else ''}"
        return [Output("failed", why.strip(": "))] * n
    try:
        items = rebuild(result.value_repr)
        ok = isinstance(items, list) and len(items) == n and all(
            isinstance(x, tuple) and len(x) == 2 and x[0] in ("ok", "raised", "unplain", "digest") for x in items)
    except LiteralError:
        ok = False
    if not ok:
        return [Output("failed", "the run's report of its outputs is malformed")] * n
    return [Output(s, repr(v) if s == "ok" else str(v)) for s, v in items]


def run_inputs(sandbox: Any, runs: list[tuple[str, str, str, list]], timeout_s: float
               ) -> tuple[dict[str, list[Output]], int]:
    """Outputs of each (key, program, entry point, inputs), RUN_INPUTS inputs a job, a job whose values are over the
    sandbox's output limit split and run again: ({key: one Output per input}, the jobs run)."""
    pending = [(key, lo, min(lo + RUN_INPUTS, len(inputs)), program, entry, inputs)
               for key, program, entry, inputs in runs for lo in range(0, len(inputs), RUN_INPUTS)]
    got: dict[str, dict[int, list[Output]]] = {key: {} for key, _, _, _ in runs}
    jobs = 0
    while pending:
        retry = []
        for lo_chunk in range(0, len(pending), EXECUTE_CHUNK):
            chunk = pending[lo_chunk:lo_chunk + EXECUTE_CHUNK]
            request = sandbox_pb2.ExecuteRequest(jobs=[
                runner_job(str(k), program, entry, inputs[lo:hi], timeout_s)
                for k, (_, lo, hi, program, entry, inputs) in enumerate(chunk)])
            results = {r.job_id: r for r in sandbox.Execute(request).results}
            jobs += len(chunk)
            for k, (key, lo, hi, program, entry, inputs) in enumerate(chunk):
                r = results.get(str(k))
                outs = _outputs(r, hi - lo) if r is not None else [Output("failed", "sandbox_error: no result")] * (
                    hi - lo)
                if outs is None:
                    mid = (lo + hi) // 2
                    retry += [(key, lo, mid, program, entry, inputs), (key, mid, hi, program, entry, inputs)]
                else:
                    got[key][lo] = outs
        pending = retry
    return {key: [o for _, outs in sorted(parts.items()) for o in outs] for key, parts in got.items()}, jobs


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


def same_output(got: Output, want: Output, atol: float, entry_point: str = "", args: list | None = None) -> bool:
    """Whether one call's output matches the canonical solution's (the module docstring gives the rules)."""
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
    if type(out) is type(exp) and out == exp:
        return True
    if atol == 0 and _is_floats(exp):
        atol = FLOAT_ATOL
    return atol != 0 and type(out) is type(exp) and _close(out, exp, atol)


def first_mismatch(problem: Problem, split: str, got: list[Output]) -> str:
    """"" when every input of `split` matches the expected outputs, else one line saying where it first did not."""
    inputs = problem.base_input if split == "base" else problem.plus_input
    want = problem.expected[split]
    for k, (g, w) in enumerate(zip(got, want)):
        if not same_output(g, w, problem.atol, problem.entry_point, inputs[k]):
            shown = {"ok": f"returned {g.text[:120]}", "raised": f"raised {g.text}", "failed": g.text,
                     "unplain": f"returned a value that is not plain data ({g.text})",
                     "digest": "returned a large value that differs"}[g.status]
            wanted = {"ok": w.text[:120], "raised": f"an exception ({w.text})"}.get(w.status, "another value")
            return f"{split} input {k}: {shown}, expected {wanted}"
    return ""


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


def with_expected(sandbox: Any, problems: list[Problem], timeout_s: float, cache: Path | None) -> list[Problem]:
    """The EvalPlus problems with `expected` filled: the canonical solution's outputs on every base and plus input,
    read from the cache of the problem's file when there, else computed in the sandbox and cached."""
    todo = [p for p in problems if p.kind == "evalplus" and p.expected is None]
    if not todo:
        return problems
    cached: dict[str, dict] = {}
    for digest in {p.digest for p in todo}:
        cached[digest] = _read_cache(_cache_file(cache, digest))
    missing = [p for p in todo if p.id not in cached[p.digest]]
    runs = [(f"{p.id}\0{split}", canonical_program(p), p.entry_point,
             list(p.base_input if split == "base" else p.plus_input)) for p in missing for split in SPLITS]
    outputs, _ = run_inputs(sandbox, runs, timeout_s)
    for p in missing:
        cached[p.digest][p.id] = {split: [[o.status, o.text] for o in outputs[f"{p.id}\0{split}"]]
                                  for split in SPLITS}
    for digest in {p.digest for p in missing}:
        path = _cache_file(cache, digest)
        if path is not None:
            _write_cache(path, cached[digest])
    out = []
    for p in problems:
        if p.kind == "evalplus" and p.expected is None:
            entry = cached[p.digest][p.id]
            p = replace(p, expected={split: tuple(Output(s, t) for s, t in entry[split]) for split in SPLITS})
        out.append(p)
    return out


def canonical_program(problem: Problem) -> str:
    """The benchmark's reference solution as a program (it continues the prompt)."""
    return problem.prompt + problem.canonical


def reference_failure(problem: Problem) -> str:
    """Why a problem's canonical solution cannot stand as the reference ("" when it can): an input on which it
    raised, a value that is not plain data, or a run that failed (timeout, memory, ...)."""
    for split in SPLITS:
        for k, o in enumerate(problem.expected[split]):
            if o.status == "raised":
                return f"{split} input {k}: the canonical solution raised {o.text}"
            if o.status in ("unplain", "failed"):
                what = f"returned a value that is not plain data ({o.text})" if o.status == "unplain" else o.text
                return f"{split} input {k}: the canonical solution {what}"
    return ""


@dataclass(frozen=True)
class PlusOutcome:
    base: bool
    plus: bool
    error: str


def score_programs(sandbox: Any, items: list[tuple[str, Problem, str]], timeout_s: float
                   ) -> tuple[list[PlusOutcome], int]:
    """Each (key, problem, program) run on its problem's base and plus inputs; the outcomes and the jobs run."""
    runs = [(f"{key}\0{split}", program, p.entry_point, list(p.base_input if split == "base" else p.plus_input))
            for key, p, program in items for split in SPLITS]
    outputs, jobs = run_inputs(sandbox, runs, timeout_s)
    out = []
    for key, p, _ in items:
        base = first_mismatch(p, "base", outputs[f"{key}\0base"])
        plus = first_mismatch(p, "plus", outputs[f"{key}\0plus"])
        out.append(PlusOutcome(not base, not base and not plus, base or plus))
    return out, jobs
