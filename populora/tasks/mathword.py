"""The math_w task type (spec 18): a word problem and `def solution():` that computes its answer. The proposal's
parts, the statement's rules, the answer the program returns as a gold, and the gold back for the math checker.

A math_w proposal, inside `<answer>`, is a ```problem block (the statement in words) and a ```python block with one
top-level function, renamed `solution`. The sandbox runs `solution()` (MATH_CALL) like any program; what it returns
becomes the gold here, on the host, from the plain data the job reported:

    int                      -> "42"
    float                    -> "0.333333"  (rounded to 6 significant digits; finite)
    fractions.Fraction       -> "Fraction(7, 2)"
    str (sympy must read it) -> "'x + 1'"

Every rejection is a ParseError with its reason code (populora.tasks.verify lists them in REASONS).
"""

from __future__ import annotations

import ast
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from populora.tasks.literals import LiteralError, literal_value
from populora.tasks.mathcheck import MAX_ANSWER_CHARS
from populora.tasks.mathequal import SIGNIFICANT_DIGITS
from populora.tasks.parsing import Block, ParseError, first_block, rename_entry

ENTRY = "solution"
STATEMENT_MAX_CHARS = 1200  # spec 18
# The sandbox can carry only plain data back, so a Fraction comes home as a tagged tuple; the call runs in the
# program's own namespace and decides only the program's own answer (a program returning the same tuple means the
# same number).
MATH_CALL = "(lambda v: ('Fraction', v.numerator, v.denominator) if type(v).__name__ == 'Fraction' else v)(solution())"
_FRACTION = re.compile(r"Fraction\((-?\d+), (\d+)\)")
# Lines a program has and a word problem does not; a fence or a call of the solution anywhere.
_CODE_LINE = re.compile(r"^\s*(def |class |import |from \S+ import |return\b|print\(|lambda\b|for \w+ in .*:\s*$"
                        r"|while .*:\s*$|if .*:\s*$|elif .*:\s*$|else:\s*$)", re.M)
_CODE_ANYWHERE = re.compile(r"```|\bsolution\s*\(|\bdef\s+\w+\s*\(")
# A number as a statement writes it: 1,250 / -3 / 2.5 / 7/2 (not part of a word or of a longer number).
_NUMBER = re.compile(r"(?<![\w.,/])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?(?![\w/]|[.,]\d)")


def math_parts(blocks: list[Block]) -> tuple[str, str]:
    """(statement, program) of a math_w answer: the last ```problem block and the first ```python block, the program
    renamed to `solution` (one top-level function taking no argument)."""
    statements = [b.body.strip() for b in blocks if b.lang == "problem"]
    if not statements or not statements[-1]:
        raise ParseError("no_problem", "no ```problem block with the word problem")
    statement = statements[-1]
    check_statement(statement)
    source = first_block(blocks, "python") or first_block(blocks, "py")
    if source is None or not source.strip():
        raise ParseError("no_program", "no ```python block with def solution():")
    program = rename_entry(source.strip("\n"), ENTRY)
    fn = next(n for n in ast.parse(program).body if isinstance(n, ast.FunctionDef))
    a = fn.args
    if a.posonlyargs or a.args or a.vararg or a.kwonlyargs or a.kwarg:
        raise ParseError("takes_arguments", "solution() must take no arguments: the problem holds every number")
    return statement, program


def check_statement(statement: str) -> None:
    """A statement of 1-STATEMENT_MAX_CHARS characters, in words: no fence, no definition, no program lines."""
    if len(statement) > STATEMENT_MAX_CHARS:
        raise ParseError("problem_too_long", f"the problem has {len(statement)} characters; at most "
                                             f"{STATEMENT_MAX_CHARS}")
    m = _CODE_ANYWHERE.search(statement) or _CODE_LINE.search(statement)
    if m:
        raise ParseError("problem_has_code", f"the problem holds code ({m.group().strip()[:40]!r}); write it in words")


def gold_text(value: object) -> str:
    """The gold of a math_w task from the value `MATH_CALL` returned (plain data), as kept in the task's outputs;
    ParseError `unsupported_output` for any other value, `output_too_long` for one the checker cannot read."""
    if type(value) is int:
        gold = value
    elif type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ParseError("unsupported_output", f"solution() returned {value}; a float answer must be finite")
        gold = float(format(value, f".{SIGNIFICANT_DIGITS}g"))
    elif (type(value) is tuple and len(value) == 3 and value[0] == "Fraction" and type(value[1]) is int
          and type(value[2]) is int and value[2] > 0):
        gold = Fraction(value[1], value[2])
    elif type(value) is str:
        if not value.strip():
            raise ParseError("unsupported_output", "solution() returned an empty string")
        gold = value.strip()
    else:
        raise ParseError("unsupported_output", f"solution() returned a {type(value).__name__}; a math_w answer is an "
                                               "int, a Fraction, a float or a string sympy can read")
    try:
        text = repr(gold)
    except ValueError:  # an int over Python's digit limit
        raise ParseError("output_too_long", "solution() returned a number too long to write out") from None
    shown = answer_shown(text)
    if len(shown) > MAX_ANSWER_CHARS or len(text) > 2 * MAX_ANSWER_CHARS:
        raise ParseError("output_too_long", f"the answer has {len(shown)} characters; at most {MAX_ANSWER_CHARS} "
                                            "(a longer one cannot be checked)")
    return text


def gold_value(text: str) -> int | float | Fraction | str:
    """The gold kept in a task's outputs, as the math checker takes it; ValueError for a text `gold_text` did not
    write."""
    m = _FRACTION.fullmatch(text)
    if m:
        return Fraction(int(m.group(1)), int(m.group(2)))
    try:
        value = literal_value(text)
    except LiteralError as e:
        raise ValueError(f"gold {text[:80]!r} is not a math_w answer: {e}") from None
    if type(value) not in (int, float, str):
        raise ValueError(f"gold {text[:80]!r} is a {type(value).__name__}, not a math_w answer")
    return value


def answer_shown(text: str) -> str:
    """A gold as a reader writes it: 42, 0.333333, 7/2, x + 1."""
    value = gold_value(text)
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    return str(value)


def _number(token: str) -> Fraction | None:
    try:
        if "/" in token:
            p, q = token.split("/")
            return Fraction(int(p.replace(",", "")), int(q)) if int(q) else None
        return Fraction(Decimal(token.replace(",", "")))
    except (ValueError, InvalidOperation, ZeroDivisionError):
        return None


def answer_in_statement(statement: str, gold: str) -> str | None:
    """The place where `statement` writes out the answer `gold` (a number equal to it, or the text answer as a whole
    word), or None."""
    value = gold_value(gold)
    if isinstance(value, str):
        m = re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", statement, re.I)
        return m.group() if m else None
    want = Fraction(value) if not isinstance(value, float) else None
    for m in _NUMBER.finditer(statement):
        got = _number(m.group())
        if got is None:
            continue
        if want is not None and got == want:
            return m.group()
        if want is None and abs(float(got) - value) <= 1e-6 * max(1.0, abs(value)):
            return m.group()
    return None


def statement_key(statement: str) -> str:
    """What two statements share when one duplicates the other: case and spacing aside."""
    return " ".join(statement.lower().split())
