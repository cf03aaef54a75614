"""Running a function on EvalPlus inputs in the sandbox: the job's runner, the jobs cut from a run of inputs, and the
outputs read back as plain data (populora.evals.evalplus compares them; nothing here judges one).

- A job calls the function on a run of inputs (a deep copy of each, as EvalPlus does) and returns, per input, a
  status and a payload: `ok` and the value, `raised` and the exception's name, `unplain` and the type of a value
  that is not plain data, `digest` and the sha256 of a value whose canonical text is over DIGEST_CHARS (compared
  exactly: set and dict order do not matter), `timeout` and the input's limit, `skipped` (after a timeout), or
  `deferred` (a reference run that used its time); and the input's CPU seconds (the copy of its arguments, the call
  and the reading of its value).
- A value of a subclass of a plain type (collections.Counter, OrderedDict, a namedtuple, an IntEnum) is read as
  that type with the type's own methods, so nothing the program defines decides what comes back; EvalPlus compares
  with ==, under which a Counter equals the dict of its counts.
- A reference run (the canonical solution, no limits) has the sandbox's longest job time, defers the inputs left
  after DEFER_AFTER_S to another job, and is split in halves where a job still ran out of time. A candidate's run
  has a limit per input, enforced by an alarm around each call (EvalPlus's per-input limit), and a wall-clock time
  of twice the sum of its inputs' limits, packed so that no job needs more than the sandbox allows.
- Times and limits are CPU seconds (time.process_time, ITIMER_PROF) where EvalPlus measures the wall clock: the
  reference is timed once and each candidate later, and on a machine shared with other work the wall clock of the
  same computation moved by more than EvalPlus's factor of 4 between the two (Mbpp/271: 0.64 s, then over 2.5 s),
  where its CPU time does not. A program that waits without computing is ended by its job's wall-clock time.
- A job whose values are over the sandbox's output limit is split in halves and run again.
"""

from __future__ import annotations

import io
import math
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from populora.pb import sandbox_pb2
from populora.tasks.literals import LiteralError, literal_value

RUN_INPUTS = 32  # inputs per job at most
DIGEST_CHARS = 1000
EXECUTE_CHUNK = 512
MAX_JOB_S = 60.0  # the sandbox's longest job (services/sandbox/service.py:MAX_TIMEOUT_S), EvalPlus's cap per task
WALL_PER_CPU = 2.0  # a candidate's job has this many wall-clock seconds per second of its inputs' CPU limits
DEFER_AFTER_S = 20.0  # a reference job starts no input after this long, so a slow reference is not cut off
MEMORY_MB = 4096  # what EvalPlus allows a program (RLIMIT_AS of 4 GiB)
STATUSES = ("ok", "raised", "unplain", "digest", "timeout", "skipped", "deferred")

# Appended after the program: the entry point is looked up by the call, so a program that defines no such function
# fails every input with a NameError. Builtins are looked up as the job runs: a program that rebinds them can only
# spoil its own outputs, which are compared on the host.
RUNNER = '''

def __populora_outputs(__fn, __inputs, __limits=None, __defer_after=None):
    import copy, hashlib, itertools, marshal, signal, time
    scalars = {bool, int, float, complex, str, bytes, type(None)}
    sequences = {list, tuple}

    def flat(x):
        # scalars, or sequences of scalars, at C speed: the common shapes of large outputs need no walk in Python
        kinds = set(map(type, x))
        return kinds <= scalars or (kinds <= sequences and set(map(type, itertools.chain.from_iterable(x))) <= scalars)

    readers = ((int, int.__int__), (float, float.__float__), (str, str.__str__),
               (bytes, lambda x: bytes.__getitem__(x, slice(None))),
               (complex, lambda x: complex(complex.real.__get__(x), complex.imag.__get__(x))),
               (list, lambda x: list(list.__iter__(x))), (tuple, lambda x: tuple(tuple.__iter__(x))),
               (dict, lambda x: dict(dict.items(x))), (frozenset, lambda x: frozenset(frozenset.__iter__(x))),
               (set, lambda x: set(set.__iter__(x))))

    def plain(x, depth):
        t = type(x)
        if t in scalars:
            return x
        if depth > 100:
            raise TypeError("nested deeper than 100")
        if t is list or t is tuple or t is set or t is frozenset:
            if flat(x):
                return x
            items = [plain(v, depth + 1) for v in x]
            return items if t is list else t(items)
        if t is dict:
            if set(map(type, x)) <= scalars and set(map(type, x.values())) <= scalars:
                return x
            return {plain(k, depth + 1): plain(v, depth + 1) for k, v in x.items()}
        for base, read in readers:
            if issubclass(t, base):
                return plain(read(x), depth)
        raise TypeError(t.__name__)

    def utf8(piece):
        return piece if type(piece) is bytes else piece.encode("utf-8", "surrogatepass")

    def text(x, put, depth=0):
        # the value's canonical text, piece by piece: what decides its size and its digest; a subclass of a plain
        # type is read as that type first, as plain() reads it, so both give the same text
        t = type(x)
        if t in scalars:
            try:
                put(t.__name__ + ":" + repr(x))
            except ValueError:  # an int past the int-to-str digit limit
                put("int:" + hex(x))
            return
        if depth > 100:
            raise TypeError("nested deeper than 100")
        if t is list or t is tuple:
            put(t.__name__ + "[")
            for lo in range(0, len(x), 256):
                chunk = x[lo:lo + 256]
                if not flat(chunk):  # subclasses read as their types first, so they give the text their values do
                    chunk = [plain(v, depth + 1) for v in chunk]
                if flat(chunk):  # marshal's format 2 writes exact plain types alike however they were made
                    put(marshal.dumps(list(chunk), 2))
                    continue
                for v in chunk:
                    text(v, put, depth + 1)
                    put(",")
            put("]")
        elif t is set or t is frozenset or t is dict:  # members in their texts' order: equal ones may iterate apart
            parts = []
            for member in (x.items() if t is dict else x):
                piece = []
                if t is dict:
                    text(member[0], piece.append, depth + 1)
                    piece.append(":")
                    member = member[1]
                text(member, piece.append, depth + 1)
                parts.append(b"".join(map(utf8, piece)))
            parts.sort()
            put(t.__name__ + "{")
            put(b",".join(parts))
            put("}")
        else:
            for base, read in readers:
                if issubclass(t, base):
                    return text(read(x), put, depth)
            raise TypeError(t.__name__)

    class Late(BaseException):
        pass

    def ring(signum, frame):
        raise Late()

    out = []
    start = time.perf_counter()
    for k, args in enumerate(__inputs):
        if __defer_after is not None and out and time.perf_counter() - start > __defer_after:
            out.extend(("deferred", None, 0.0) for _ in __inputs[k:])
            break
        t0 = time.process_time()
        args = copy.deepcopy(args)
        limit = __limits[k] if __limits else None
        try:
            try:
                if limit:
                    signal.signal(signal.SIGPROF, ring)
                    signal.setitimer(signal.ITIMER_PROF, limit)
                value = __fn(*args)
            finally:
                if limit:
                    signal.setitimer(signal.ITIMER_PROF, 0)
        except Late:
            out.append(("timeout", limit, time.process_time() - t0))
            out.extend(("skipped", None, 0.0) for _ in __inputs[k + 1:])
            break
        except BaseException as e:
            out.append(("raised", type(e).__name__, time.process_time() - t0))
            continue
        try:
            digest, size = hashlib.sha256(), [0]

            def put(piece):
                size[0] += len(piece)
                digest.update(utf8(piece))

            text(value, put)
            item = ("ok", plain(value, 0)) if size[0] <= DIGEST_CHARS else ("digest", digest.hexdigest())
        except (TypeError, RecursionError, ValueError) as e:
            item = ("unplain", str(e)[:80])
        out.append((*item, time.process_time() - t0))
    return out
'''.replace("DIGEST_CHARS", str(DIGEST_CHARS))


@dataclass(frozen=True)
class Output:
    """One call's result: status (STATUSES, or `failed`: the whole job failed and `text` says why), the value's
    repr (ok), the exception or type name, the digest or the limit; the input's seconds (kept for the canonical
    solution's outputs: its time is what the candidates' limits come from)."""

    status: str
    text: str
    seconds: float = 0.0


@dataclass(frozen=True)
class Run:
    """A function on a run of inputs: `limits` the seconds each input may take (a candidate's run: an alarm around
    its call, and the sum for the job), or () for the reference's own run (no limits; its times are measured)."""

    key: str
    program: str
    entry_point: str
    inputs: tuple
    limits: tuple = ()


# ------------------------------------------------------------------------------------------------ inputs as code
def python_literal(value: Any) -> str:
    """Python source for an input value: the JSON types, and the tuples, sets and complex numbers MBPP+ rebuilds
    (populora.evals.mbppplus); non-finite floats as float('inf')."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({repr(value)!r})"
    if isinstance(value, complex):
        return f"complex({python_literal(value.real)}, {python_literal(value.imag)})"
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(python_literal(v) + ", " for v in value) + ")"
    if isinstance(value, set | frozenset):
        body = "{" + ", ".join(python_literal(v) for v in value) + "}" if value else "()"
        return f"{type(value).__name__}({body})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def runner_job(job_id: str, program: str, entry_point: str, inputs: list, timeout_s: float,
               limits: list | None = None, defer_after: float | None = None) -> sandbox_pb2.ExecJob:
    code = f"{program}\n{RUNNER}\n__populora_inputs = {python_literal(list(inputs))}\n"
    call = f"__populora_outputs({entry_point}, __populora_inputs, {limits!r}, {defer_after!r})"
    return sandbox_pb2.ExecJob(job_id=job_id, program=code, call=call, timeout_s=timeout_s, memory_mb=MEMORY_MB)


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


def _well_formed(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 3 and x[0] in STATUSES and type(x[2]) is float and math.isfinite(x[2])


def _outputs(result: sandbox_pb2.ExecResult, n: int, reference: bool) -> list[Output] | None:
    """The per-input outputs of one job; None when it must be split and run again (its values were over the output
    limit, or a reference job ran out of time)."""
    if n > 1 and (result.status == "output_limit" or (reference and result.status == "timeout")):
        return None
    if result.status != "ok":
        why = f"{result.status}: {result.error.strip().splitlines()[-1] if result.error.strip() else ''}"
        return [Output("failed", why.strip(": "))] * n
    try:
        items = rebuild(result.value_repr)
        ok = isinstance(items, list) and len(items) == n and all(_well_formed(x) for x in items)
    except LiteralError:
        ok = False
    if not ok:
        return [Output("failed", "the run's report of its outputs is malformed")] * n
    return [Output(s, repr(v) if s == "ok" else "" if v is None else str(v), seconds) for s, v, seconds in items]


def _spans(run: Run) -> list[tuple[int, int]]:
    """Consecutive inputs for one job each: at most RUN_INPUTS, and for a candidate limits that fit the sandbox's
    longest job together (an input whose limit alone does not has a job of its own)."""
    out, lo, total = [], 0, 0.0
    for k in range(len(run.inputs)):
        limit = run.limits[k] if run.limits else 0.0
        if k > lo and (k - lo >= RUN_INPUTS or _wall(total + limit) > MAX_JOB_S):
            out.append((lo, k))
            lo, total = k, 0.0
        total += limit
    return out + [(lo, len(run.inputs))] if run.inputs else out


def run_inputs(sandbox: Any, runs: list[Run], progress: Callable[[int, int], None] | None = None
               ) -> tuple[dict[str, list[Output]], int]:
    """Outputs of each run, one per input, and the jobs run; `progress(jobs done, jobs known)` after each Execute
    call."""
    pending = [(run, lo, hi) for run in runs for lo, hi in _spans(run)]
    got: dict[str, dict[int, list[Output]]] = {run.key: {} for run in runs}
    jobs = 0
    while pending:
        retry = []
        for lo_chunk in range(0, len(pending), EXECUTE_CHUNK):
            chunk = pending[lo_chunk:lo_chunk + EXECUTE_CHUNK]
            request = sandbox_pb2.ExecuteRequest(jobs=[_job(str(k), run, lo, hi) for k, (run, lo, hi) in
                                                       enumerate(chunk)])
            results = {r.job_id: r for r in sandbox.Execute(request).results}
            jobs += len(chunk)
            for k, (run, lo, hi) in enumerate(chunk):
                r = results.get(str(k))
                outs = _outputs(r, hi - lo, not run.limits) if r is not None else [
                    Output("failed", "sandbox_error: no result")] * (hi - lo)
                if outs is None:
                    mid = (lo + hi) // 2
                    retry += [(run, lo, mid), (run, mid, hi)]
                    continue
                done = next((j for j, o in enumerate(outs) if o.status == "deferred"), len(outs))
                got[run.key][lo] = outs[:done]
                if done < len(outs):
                    retry.append((run, lo + done, hi))
            if progress is not None:
                progress(jobs, jobs + len(pending) - lo_chunk - len(chunk) + len(retry))
        pending = retry
    return {key: [o for _, outs in sorted(parts.items()) for o in outs] for key, parts in got.items()}, jobs


def _job(job_id: str, run: Run, lo: int, hi: int) -> sandbox_pb2.ExecJob:
    if not run.limits:
        return runner_job(job_id, run.program, run.entry_point, run.inputs[lo:hi], MAX_JOB_S,
                          defer_after=DEFER_AFTER_S)
    limits = [round(x, 3) for x in run.limits[lo:hi]]
    return runner_job(job_id, run.program, run.entry_point, run.inputs[lo:hi], min(MAX_JOB_S, _wall(sum(limits))),
                      limits=limits)


def _wall(cpu_limits: float) -> float:
    """A candidate job's wall-clock time for inputs whose CPU limits add up to `cpu_limits` (1 s to start)."""
    return 1.0 + WALL_PER_CPU * cpu_limits
