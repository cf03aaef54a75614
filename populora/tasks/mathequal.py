"""The math checker's worker process (spec 18): one answer and one gold parsed and compared with math-verify, one JSON
line in and one out. populora.tasks.mathcheck starts it and kills it at the time limit.

Run as `python -m populora.tasks.mathequal MEMORY_BYTES CPU_SECONDS`: it caps its own address space, and before each
check its CPU time at CPU_SECONDS more than it has used (the kernel then ends it, should its parent be gone and so
never kill it at the wall-clock limit), loads math-verify, answers
one check to warm its parsers, prints `ready`, then for each request line `{"answer", "gold", "inexact"}` (the boxed
text of a student's answer, the gold as text, whether the gold is a float) prints `{"outcome", "reason"}` with
outcome `correct` or `wrong`. It exits at the end of its input, and after running out of memory (saying so in its
reply, `"exiting": true`), since a process that hit its limit may hold half-built state.

The comparison:
- Both sides are parsed from `\\boxed{...}` by math-verify (LaTeX first, then plain numbers and expressions). A side
  that parses to nothing is wrong (`unparsed`, or `gold_unparsed` for the gold).
- When both are numbers (integers, fractions, decimals): exact equality, unless a side is inexact (a float gold, or a
  decimal written on either side): then the relative tolerance REL_TOL, after rounding the answer to
  SIGNIFICANT_DIGITS when the gold is a float (a float gold stands for every number that rounds to it).
- Otherwise (sets, tuples, intervals, expressions, equations, text): math-verify's `verify`.
math-verify's own signal-based timeouts are off here (they work only in a main thread); the parent's kill is the
limit. Its parsing caches are cleared before each check, so a verdict does not depend on the checks before it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import resource
import sys
from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction
from typing import Any, TextIO

SIGNIFICANT_DIGITS = 6  # a float gold is written with this many significant digits (spec 18)
REL_TOL = Fraction(1, 10**6)  # relative tolerance where a side is inexact (spec 18)
_DECIMAL = re.compile(r"\d\.\d|\.\d|\d\.(?!\.)")  # a number written with a decimal point
WARM_UP = ("\\frac{1}{2}", "0.5")


def _extraction():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


def parsed(text: str, extraction: list) -> list:
    """math-verify's reading of `\\boxed{text}`: [the sympy object, the text it came from], or [] when it reads
    nothing."""
    import math_verify.parser as mp
    from math_verify import parse

    mp.parse_latex_cached.cache_clear()
    mp.parse_expr_cached.cache_clear()
    return parse("\\boxed{" + text + "}", extraction_config=extraction, parsing_timeout=None)


def number(value: Any) -> Fraction | None:
    """An integer, fraction or decimal as an exact Fraction; None for anything else."""
    from sympy import Float, Rational

    if isinstance(value, Float):  # its decimal digits, as written (0.1 is 1/10, not the binary float)
        try:
            return Fraction(str(value))
        except ValueError:
            return Fraction(int(Rational(value).p), int(Rational(value).q))
    if isinstance(value, Rational):  # Integer included
        return Fraction(int(value.p), int(value.q))
    return None


def rounded(x: Fraction, digits: int = SIGNIFICANT_DIGITS) -> Fraction:
    """x rounded to `digits` significant digits (half to even), exactly."""
    if x == 0:
        return x
    return Fraction(Context(prec=digits, rounding=ROUND_HALF_EVEN).divide(Decimal(x.numerator),
                                                                          Decimal(x.denominator)))


def numbers_equal(answer: Fraction, gold: Fraction, inexact: bool, gold_is_float: bool) -> bool:
    if gold_is_float:
        answer = rounded(answer)
    if not inexact:
        return answer == gold
    return abs(answer - gold) <= REL_TOL * max(abs(answer), abs(gold))


def compare(answer: str, gold: str, gold_is_float: bool, extraction: list) -> tuple[str, str]:
    """(outcome, reason) of one boxed answer against one gold (see the module docstring)."""
    from math_verify import verify
    from sympy import Float

    gold_read = parsed(gold, extraction)
    if not gold_read:
        return "wrong", "gold_unparsed: math-verify reads nothing in the gold answer"
    answer_read = parsed(answer, extraction)
    if not answer_read:
        return "wrong", "unparsed: math-verify reads nothing in the boxed answer"
    a, g = number(answer_read[0]), number(gold_read[0])
    if a is not None and g is not None:
        inexact = gold_is_float or any(isinstance(x, Float) for x in (answer_read[0], gold_read[0])) \
            or bool(_DECIMAL.search(answer) or _DECIMAL.search(gold))
        same = numbers_equal(a, g, inexact, gold_is_float)
    else:
        same = verify(gold_read, answer_read, timeout_seconds=None)
    return ("correct", "") if same else ("wrong", "not_equal: the boxed answer differs from the gold")


def readable(text: str, extraction: list) -> tuple[str, str]:
    """("correct", "") when math-verify reads `text` as a sympy expression (a math_w gold written as a string must be
    one, spec 18), else ("wrong", why): nothing read, or only the text itself."""
    from sympy import Basic, MatrixBase

    read = parsed(text, extraction)
    if not read:
        return "wrong", "gold_unparsed: math-verify reads nothing in the answer"
    if not isinstance(read[0], Basic | MatrixBase):
        return "wrong", f"not_math: math-verify reads the answer as {type(read[0]).__name__}, not a sympy expression"
    return "correct", ""


def cap_cpu(seconds: int) -> None:
    """The process may use `seconds` more CPU seconds from now (RLIMIT_CPU: SIGXCPU ends it past them)."""
    if seconds <= 0:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + seconds
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def answer_line(line: str, extraction: list) -> dict[str, Any]:
    """The reply to one request line; any error of the parsers is a wrong answer with its name, never a crash."""
    try:
        request = json.loads(line)
        if request.get("read_only"):
            outcome, reason = readable(str(request["gold"]), extraction)
        else:
            outcome, reason = compare(str(request["answer"]), str(request["gold"]), bool(request.get("inexact")),
                                      extraction)
        return {"outcome": outcome, "reason": reason}
    except MemoryError:
        return {"outcome": "wrong", "reason": "out_of_memory: the check ran out of its memory", "exiting": True}
    except RecursionError:
        return {"outcome": "wrong", "reason": "too_deep: the parser ran out of stack"}
    except Exception as e:  # noqa: BLE001 - a hostile answer may break any parser; it is a wrong answer
        return {"outcome": "wrong", "reason": f"parser_error: {type(e).__name__}"}


def serve(lines: TextIO, out: TextIO, cpu_seconds: int = 0) -> None:
    extraction = _extraction()
    compare(*WARM_UP, False, extraction)
    # from here on nobody reads stderr: a library's warning must not fill a pipe or fail a check on a closed one
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    out.write("ready\n")
    out.flush()
    for line in lines:
        cap_cpu(cpu_seconds)
        reply = answer_line(line, extraction)
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if reply.get("exiting"):
            return


def main(argv: list[str]) -> None:
    memory = int(argv[1]) if len(argv) > 1 else 0
    cpu_seconds = int(argv[2]) if len(argv) > 2 else 0
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a worker ended by SIGXCPU leaves no core file
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # its notes on disabled timeouts and failed parses
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    serve(sys.stdin, sys.stdout, cpu_seconds)


if __name__ == "__main__":
    main(sys.argv)
