"""The math answer checker (spec 18): a student's last `\\boxed{...}` against a gold answer, parsed and compared by
math-verify in worker processes that are killed at the time limit, so no answer can hang or crash the caller.

    with MathChecker(workers=2) as checker:
        checker.check("... so the answer is \\\\boxed{\\\\frac{7}{2}}", Fraction(7, 2))  # MathCheck("correct", ...)
        checker.check_many([(response, gold), ...])

Every answer gets one of OUTCOMES, with a short reason (`code: words`):
- `malformed`: no complete `\\boxed{...}` (braces balanced; an escaped `\\{` or `\\}` does not count), or a response
  over MAX_RESPONSE_CHARS, which is not read at all;
- `wrong`: the boxed text is empty, over MAX_ANSWER_CHARS, or nested over MAX_NESTING brackets deep (refused here,
  before any parser sees it: math-verify took 0.4 s to parse 50 nested `\\frac`s and 12 s for 1,000 parentheses), or
  it does not parse, or it differs from the gold, or the parser failed on it or ran out of memory
  (MEMORY_BYTES per worker);
- `timeout`: no verdict within the limit (TIMEOUT_S = 3 s from the moment the worker gets it; `10^{10^{10}}` parses
  at once and then hangs the comparison): the worker is killed, and a new one starts for the next check. A timeout
  counts as wrong. A worker also caps its own CPU time at CPU_S a check, so one whose parent is gone never runs on;
- `correct`.
The limit holds in any thread, unlike math-verify's own (signal.alarm, main thread only), and each worker is one
process used by one check at a time. The comparison itself is populora.tasks.mathequal.

A gold is an int, a Fraction, a float (written with 6 significant digits; answers are rounded the same way before
the comparison) or a string (LaTeX or a plain expression); anything else, or a gold too long or not finite, is the
caller's error (ValueError), not an outcome.
"""

from __future__ import annotations

import json
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from populora.tasks.mathequal import SIGNIFICANT_DIGITS

OUTCOMES = ("correct", "wrong", "malformed", "timeout")
TIMEOUT_S = 3.0  # per check (spec 18)
MAX_RESPONSE_CHARS = 200_000  # a response longer than this is not read (malformed)
MAX_ANSWER_CHARS = 500  # the boxed text (MATH-500's longest gold is 53 characters)
MAX_NESTING = 12  # brackets ({[ nested in the boxed text
MEMORY_BYTES = 1 << 30  # each worker's address space
CPU_S = 10  # CPU seconds a worker may use on one check: the kernel's limit, should the wall-clock kill never come
STARTUP_S = 60.0  # a worker's start (loading sympy and math-verify: about 1 s here)
ANSWER_KEPT = 200  # characters of the boxed text kept in a MathCheck
_TOKEN = re.compile(r"\\[{}]|\\boxed\s*\{|[{}]")
_OPEN, _CLOSE = "{([", "})]"


class MathCheckerError(RuntimeError):
    """The checker cannot run at all (its worker does not start): an installation problem, not an answer's outcome."""


@dataclass(frozen=True)
class Gold:
    """A gold answer as the worker reads it: its text, and whether it is a float (answers are then rounded to its
    significant digits before the comparison)."""

    text: str
    is_float: bool = False


@dataclass(frozen=True)
class MathCheck:
    """One answer's verdict: `outcome` one of OUTCOMES, `reason` a short `code: words` ("" when correct), `answer`
    the boxed text (its first ANSWER_KEPT characters), `seconds` the check's wall time."""

    outcome: str
    reason: str = ""
    answer: str = ""
    seconds: float = 0.0

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"


def gold_of(value: int | Fraction | float | str | Gold) -> Gold:
    """The gold as the worker reads it (see the module docstring for what a gold may be)."""
    if isinstance(value, Gold):
        return value
    if isinstance(value, bool):
        raise ValueError(f"a gold answer is an int, a Fraction, a float or a string, not a bool ({value})")
    if isinstance(value, int | Fraction):
        frac = Fraction(value)
        try:
            p, q = str(abs(frac.numerator)), str(frac.denominator)
        except ValueError:  # over Python's digit limit for int -> str
            raise ValueError("a gold answer with more than 4,300 digits cannot be checked") from None
        sign = "-" if frac < 0 else ""
        return _bounded(Gold(sign + p if q == "1" else f"{sign}\\frac{{{p}}}{{{q}}}"))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"a float gold answer must be finite, not {value}")
        text = format(Decimal(format(value, f".{SIGNIFICANT_DIGITS}g")), "f")  # no exponent: LaTeX does not read one
        return _bounded(Gold(text, is_float=True))
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("a gold answer is empty")
        return _bounded(Gold(value.strip()))
    raise ValueError(f"a gold answer is an int, a Fraction, a float or a string, not {type(value).__name__}")


def _bounded(gold: Gold) -> Gold:
    if len(gold.text) > MAX_ANSWER_CHARS:
        raise ValueError(f"a gold answer of {len(gold.text)} characters; at most {MAX_ANSWER_CHARS}")
    return gold


def last_boxed(response: str) -> str | None:
    """The text inside the response's last complete `\\boxed{...}` (the one that closes last, so an outer box wins
    over one inside it), or None. One pass over the response."""
    stack: list[int | None] = []  # for each open brace: where a box's text starts, or None for a plain brace
    found = None
    for m in _TOKEN.finditer(response):
        token = m.group()
        if token.startswith("\\boxed"):
            stack.append(m.end())
        elif token == "{":
            stack.append(None)
        elif token == "}" and stack:
            start = stack.pop()
            if start is not None:
                found = (start, m.start())
    return None if found is None else response[found[0]:found[1]]


def nesting(text: str) -> int:
    """How deep brackets ({[ nest in `text` (unbalanced closers ignored)."""
    depth = deepest = 0
    for ch in text:
        if ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE and depth:
            depth -= 1
    return deepest


def read_answer(response: str) -> str | MathCheck:
    """The boxed text to compare, or the verdict when the response is refused before any parser sees it."""
    if not isinstance(response, str):
        return MathCheck("malformed", f"not_text: the response is {type(response).__name__}, not text")
    if len(response) > MAX_RESPONSE_CHARS:
        return MathCheck("malformed", f"too_long: a response of {len(response)} characters; at most "
                                      f"{MAX_RESPONSE_CHARS} are read")
    boxed = last_boxed(response)
    if boxed is None:
        return MathCheck("malformed", "no_boxed: no \\boxed{...} with balanced braces")
    answer = boxed.strip()
    kept = answer[:ANSWER_KEPT]
    if not answer:
        return MathCheck("wrong", "empty: \\boxed{} holds nothing", kept)
    if len(answer) > MAX_ANSWER_CHARS:
        return MathCheck("wrong", f"too_long: a boxed answer of {len(answer)} characters; at most "
                                  f"{MAX_ANSWER_CHARS}", kept)
    if (depth := nesting(answer)) > MAX_NESTING:
        return MathCheck("wrong", f"too_deep: brackets nested {depth} deep; at most {MAX_NESTING}", kept)
    return answer


class _Worker:
    """One worker process (python -m populora.tasks.mathequal) and the bytes it has written but not yet been read."""

    def __init__(self, memory_bytes: int, cpu_s: int):
        root = str(Path(__file__).resolve().parents[2])  # the project, importable whatever the caller's directory
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "populora.tasks.mathequal", str(memory_bytes),
                                          str(cpu_s)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=env)
        except OSError as e:
            raise MathCheckerError(f"the math checker's worker did not start: {e}") from None
        self._buffer = b""
        line = self._line(STARTUP_S)
        if line != b"ready":
            self.kill()
            err = self.proc.stderr.read().decode(errors="replace").strip().splitlines() if self.proc.stderr else []
            raise MathCheckerError("the math checker's worker did not start"
                                   + (f": {err[-1]}" if err else f" within {STARTUP_S:.0f} s")
                                   + " (install the project's dependencies: pip install -c constraints.txt -e .)")
        self.proc.stderr.close()  # nothing more is read from it; a worker that writes there gets EPIPE, not a block

    def _line(self, timeout_s: float) -> bytes | None:
        """The next line the worker writes, without its newline; None at the deadline or when the worker is gone."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def ask(self, answer: str, gold: Gold, timeout_s: float, read_only: bool = False) -> dict | None:
        """The worker's reply to one check (with `read_only`, whether it reads the gold at all); None when it gave
        none in time (or died), and it is then killed."""
        request = json.dumps({"answer": answer, "gold": gold.text, "inexact": gold.is_float,
                              "read_only": read_only}) + "\n"
        try:
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            return None
        line = self._line(timeout_s)
        if line is None:
            self.kill()
            return None
        try:
            reply = json.loads(line)
        except ValueError:
            self.kill()
            return None
        if reply.get("exiting"):
            self.kill()
        return reply

    def exit_text(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"ended by {signal.Signals(-code).name}"
            except ValueError:
                return f"ended by signal {-code}"
        return f"exit status {code}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class MathChecker:
    """A pool of `workers` checker processes, started as they are needed; `check` may be called from any thread
    (each check takes one idle worker). A worker killed at the limit is replaced at once, in the background, so the
    next check does not wait for a whole start. Close it, or use it as a context manager, to end the workers."""

    def __init__(self, workers: int = 1, timeout_s: float = TIMEOUT_S, memory_bytes: int = MEMORY_BYTES,
                 cpu_s: int = CPU_S):
        if workers < 1:
            raise ValueError(f"a math checker needs at least one worker (got {workers})")
        self.workers, self.timeout_s, self.memory_bytes, self.cpu_s = workers, timeout_s, memory_bytes, cpu_s
        self._slots = threading.BoundedSemaphore(workers)
        self._idle: queue.SimpleQueue[_Worker | MathCheckerError] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live: set[_Worker] = set()
        self._starting = 0  # workers being started in the background, each bound for the idle queue
        self._closed = False

    def start(self) -> MathChecker:
        """Start every worker now (else each starts at its first check)."""
        with self._lock:
            missing = self.workers - len(self._live) - self._starting
        with ThreadPoolExecutor(max(1, missing)) as pool:
            for worker in pool.map(lambda _: self._new(), range(missing)):
                self._idle.put(worker)
        return self

    def _new(self) -> _Worker:
        worker = _Worker(self.memory_bytes, self.cpu_s)
        with self._lock:
            if self._closed:
                worker.kill()
                raise MathCheckerError("the math checker is closed")
            self._live.add(worker)
        return worker

    def _replace(self) -> None:
        """A new worker for the idle queue (or the error of its start, for the check that waits on it)."""
        try:
            self._idle.put(self._new())
        except MathCheckerError as e:
            self._idle.put(e)
        finally:
            with self._lock:
                self._starting -= 1

    def _take(self) -> _Worker:
        while True:
            try:
                got = self._idle.get_nowait()
            except queue.Empty:
                with self._lock:
                    room = len(self._live) + self._starting < self.workers
                if room:
                    return self._new()
                # every worker is in use by the other slots' checks or on its way here: one is being started
                got = self._idle.get()
            if isinstance(got, MathCheckerError):
                raise got
            if got.alive:
                return got
            self._drop(got)

    def _drop(self, worker: _Worker, replace: bool = False) -> None:
        worker.kill()
        with self._lock:
            self._live.discard(worker)
            replace = replace and not self._closed
            if replace:
                self._starting += 1
        if replace:
            threading.Thread(target=self._replace, name="math-checker-start", daemon=True).start()

    def check(self, response: str, gold: int | Fraction | float | str | Gold) -> MathCheck:
        """One response's verdict against `gold` (see the module docstring)."""
        start = time.perf_counter()
        gold = gold_of(gold)
        found = read_answer(response)
        if isinstance(found, MathCheck):
            return MathCheck(found.outcome, found.reason, found.answer, time.perf_counter() - start)
        return self._ask(found, gold, start)

    def reads(self, text: str) -> MathCheck:
        """Whether math-verify reads `text` as a sympy expression (`correct`), within the same limits as a check: a
        math_w answer written as a string must be one (spec 18)."""
        start = time.perf_counter()
        gold = gold_of(text)
        found = read_answer(f"\\boxed{{{gold.text}}}")
        if isinstance(found, MathCheck):
            return MathCheck(found.outcome, found.reason, found.answer, time.perf_counter() - start)
        return self._ask(found, gold, start, read_only=True)

    def _ask(self, found: str, gold: Gold, start: float, read_only: bool = False) -> MathCheck:
        kept = found[:ANSWER_KEPT]
        with self._slots:
            if self._closed:
                raise MathCheckerError("the math checker is closed")
            worker = self._take()
            asked = time.perf_counter()
            reply = worker.ask(found, gold, self.timeout_s, read_only)
            waited = time.perf_counter() - asked
            if reply is None or not worker.alive:
                self._drop(worker, replace=True)
            else:
                self._idle.put(worker)
        if reply is None:
            if waited >= self.timeout_s:
                return MathCheck("timeout", f"time_limit: no verdict within {self.timeout_s:g} s", kept,
                                 time.perf_counter() - start)
            return MathCheck("wrong", f"checker_died: the worker ended on this answer ({worker.exit_text()})", kept,
                             time.perf_counter() - start)
        outcome = reply.get("outcome") if reply.get("outcome") in ("correct", "wrong") else "wrong"
        return MathCheck(outcome, str(reply.get("reason", ""))[:200], kept, time.perf_counter() - start)

    def check_many(self, items: list[tuple[str, int | Fraction | float | str | Gold]]) -> list[MathCheck]:
        """The verdicts of (response, gold) pairs, in order, on every worker at once."""
        if not items:
            return []
        with ThreadPoolExecutor(min(self.workers, len(items))) as pool:
            return list(pool.map(lambda item: self.check(*item), items))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            live, self._live = list(self._live), set()
        for worker in live:
            worker.kill()

    def __enter__(self) -> MathChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
