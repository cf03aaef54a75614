"""The math answer checker (spec 18, populora.tasks.mathcheck): right, wrong and malformed answers in the forms
students write them, and hostile answers (huge numbers, deep nesting, parser bombs, enormous or junk text), each of
which gets a clear outcome within the time limit, from any thread, without harming the checks after it."""

from __future__ import annotations

import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from populora.tasks.mathcheck import (
    MAX_ANSWER_CHARS,
    MAX_NESTING,
    MAX_RESPONSE_CHARS,
    OUTCOMES,
    TIMEOUT_S,
    Gold,
    MathCheck,
    MathChecker,
    gold_of,
    last_boxed,
    nesting,
    read_answer,
)
from populora.tasks.mathequal import answer_line, rounded

# A check that follows a killed worker waits for its replacement to start (about 1 s here, more on a loaded machine)
START_MARGIN_S = 4.0


@pytest.fixture(scope="module")
def checker():
    with MathChecker(workers=2) as c:
        yield c.start()


# ------------------------------------------------------------------------------------------------ reading the box
@pytest.mark.parametrize("response, boxed", [
    ("so \\boxed{18}.", "18"),
    ("first \\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed {42}", "42"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are the set's, not the box's
    ("\\boxed{\\boxed{5}}", "\\boxed{5}"),  # the box that closes last
    ("\\boxed{3} and then \\boxed{4", "3"),  # a box left open (the answer ran out of tokens) is not read
    ("no box here", None),
    ("\\boxed 5", None),
    ("\\boxed{unclosed", None),
    ("}}}} \\boxed{7} }}", "7"),
])
def test_the_last_complete_box_is_read(response, boxed):
    assert last_boxed(response) == boxed


def test_reading_is_one_pass_even_over_many_open_boxes():
    response = "\\boxed{" * 25_000  # 175,000 characters, no box closes
    start = time.perf_counter()
    assert last_boxed(response) is None
    assert time.perf_counter() - start < 2.0
    assert read_answer(response).outcome == "malformed"


def test_nesting_counts_every_kind_of_bracket():
    assert nesting("1") == 0
    assert nesting("\\frac{1}{\\sqrt{(2)}}") == 3
    assert nesting("[(]") == 2


# ------------------------------------------------------------------------------------------------ the gold
@pytest.mark.parametrize("value, text, is_float", [
    (18, "18", False),
    (-3, "-3", False),
    (Fraction(7, 2), "\\frac{7}{2}", False),
    (Fraction(-1, 3), "-\\frac{1}{3}", False),
    (Fraction(4, 2), "2", False),
    (0.5, "0.5", True),
    (1 / 3, "0.333333", True),
    (1234567.0, "1234570", True),
    (1e-7, "0.0000001", True),
    (-2.5e10, "-25000000000", True),
    ("  \\frac{\\pi}{2} ", "\\frac{\\pi}{2}", False),
])
def test_a_gold_is_written_as_the_worker_reads_it(value, text, is_float):
    assert gold_of(value) == Gold(text, is_float)


@pytest.mark.parametrize("value, words", [
    (True, "not a bool"),
    (float("nan"), "finite"),
    (float("inf"), "finite"),
    pytest.param(10**5000, "4,300 digits", id="int-of-5001-digits"),
    ("", "empty"),
    ("1" * (MAX_ANSWER_CHARS + 1), "at most"),
    ([1, 2], "not list"),
])
def test_a_gold_that_cannot_be_checked_is_the_callers_error(value, words):
    with pytest.raises(ValueError, match=words):
        gold_of(value)


def test_rounding_to_six_significant_digits_is_exact():
    assert rounded(Fraction(1, 3)) == Fraction("0.333333")
    assert rounded(Fraction(12345678)) == 12345700
    assert rounded(Fraction(-1000005, 10**12)) == Fraction("-0.00000100000")  # half to even
    assert rounded(Fraction(0)) == 0


# ------------------------------------------------------------------------------------------------ verdicts
RIGHT = [
    ("The answer is \\boxed{18}.", 18),
    ("\\boxed{18}", "18"),
    ("\\boxed{-3}", -3),
    ("\\boxed{\\frac{7}{2}}", Fraction(7, 2)),
    ("\\boxed{\\dfrac{7}{2}}", "\\frac{7}{2}"),
    ("\\boxed{7/2}", Fraction(7, 2)),
    ("\\boxed{3.5}", Fraction(7, 2)),
    ("\\boxed{-\\frac{1}{2}}", -0.5),
    ("\\boxed{1,000}", 1000),
    ("\\boxed{1{,}000}", 1000),
    ("\\boxed{2,125}", "2125"),
    ("\\boxed{1000.0}", 1000),
    ("\\boxed{0.333333}", Fraction(1, 3)),  # a decimal answer: within the relative tolerance
    ("\\boxed{\\frac{1}{3}}", 1 / 3),  # a float gold: the answer rounded to its 6 significant digits
    ("\\boxed{3.14159265}", 3.14159265358979),
    ("\\boxed{1234567}", 1234567.0),
    ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}"),
    ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{1,-2}", "-2, 1"),
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}"),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
    ("\\boxed{x=5}", "5"),
    ("\\boxed{50\\%}", "50\\%"),
]
WRONG = [
    ("\\boxed{17}", 18),
    ("\\boxed{-18}", 18),
    ("\\boxed{\\frac{7}{3}}", Fraction(7, 2)),
    ("\\boxed{0.33}", Fraction(1, 3)),  # outside the relative tolerance
    ("\\boxed{3.1416}", 3.14159265358979),  # rounded to fewer digits than the gold
    ("\\boxed{1234500}", 1234567.0),
    ("\\boxed{1000001}", 1000000),  # integers are exact: no tolerance
    ("\\boxed{\\{1, 3\\}}", "\\{2, 1\\}"),
    ("\\boxed{(1, 2, 3)}", "(1, 2)"),
    ("\\boxed{\\text{Ann}}", "\\text{Evelyn}"),
]


@pytest.mark.parametrize("response, gold", RIGHT)
def test_right_answers_are_correct(checker, response, gold):
    got = checker.check(response, gold)
    assert got.outcome == "correct", got


@pytest.mark.parametrize("response, gold", WRONG)
def test_wrong_answers_are_wrong(checker, response, gold):
    got = checker.check(response, gold)
    assert got.outcome == "wrong" and got.reason.startswith("not_equal"), got


@pytest.mark.parametrize("response, reason", [
    ("18", "no_boxed"),
    ("The answer is 18.", "no_boxed"),
    ("\\boxed{18", "no_boxed"),
    ("\\fbox{18}", "no_boxed"),
    (b"\\boxed{18}", "not_text"),
    ("x" * (MAX_RESPONSE_CHARS + 1) + "\\boxed{18}", "too_long"),
])
def test_an_answer_without_a_complete_box_is_malformed(checker, response, reason):
    got = checker.check(response, 18)
    assert got.outcome == "malformed" and got.reason.startswith(reason), got


@pytest.mark.parametrize("response, reason", [
    ("\\boxed{}", "empty"),
    ("\\boxed{   }", "empty"),
    ("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}", "too_long"),
    ("\\boxed{" + "\\frac{1}{" * (MAX_NESTING + 1) + "2" + "}" * (MAX_NESTING + 1) + "}", "too_deep"),
    ("\\boxed{" + "(" * 1000 + "1" + ")" * 1000 + "}", "too_long"),
    ("\\boxed{\\text{eighteen}}", "not_equal"),
])
def test_a_box_that_holds_no_right_answer_is_wrong(checker, response, reason):
    got = checker.check(response, 18)
    assert got.outcome == "wrong" and got.reason.startswith(reason), got


# ------------------------------------------------------------------------------------------------ hostile answers
PWNED = Path("/tmp/populora-mathcheck-pwned")
HOSTILE = {
    "a tower of powers": "\\boxed{10^{10^{10}}}",
    "powers written flat": "\\boxed{9^9^9^9}",
    "Python's power": "\\boxed{10**10**10}",
    "a power of a power": "\\boxed{2^{2^{40}}}",
    "a chain of 200 powers": "\\boxed{" + "2^" * 200 + "2}",
    "a huge factorial": "\\boxed{(10^{100})!}",
    "a huge sum": "\\boxed{\\sum_{k=1}^{10^{12}} k^{k}}",
    "an integral": "\\boxed{\\int_0^{10^{10}} x^{x^x} dx}",
    "a matrix of towers": "\\boxed{\\begin{pmatrix}" + "&".join(["10^{10^{10}}"] * 10) + "\\end{pmatrix}}",
    "499 digits": "\\boxed{" + "9" * 499 + "}",
    "a sum of 250 terms": "\\boxed{" + "1+" * 249 + "1}",
    "fractions nested to the bound": "\\boxed{" + "\\frac{1}{" * MAX_NESTING + "2" + "}" * MAX_NESTING + "}",
    "fractions nested 10,000 deep": "\\boxed{" + "\\frac{1}{" * 10_000 + "2" + "}" * 10_000 + "}",
    "a recursive macro": "\\boxed{\\def\\x{\\x\\x}\\x}",
    "code": f"\\boxed{{__import__('os').system('touch {PWNED}')}}",
    "unicode junk": "\\boxed{\u202e\u0301\U0001F600\ud800\x00\ufffe五}",
    "an enormous response": "junk " * 2_000_000 + "\\boxed{5}",
    "an equation to solve": "\\boxed{x^{100}+x^{99}+1=0}",
}


@pytest.mark.slow
def test_every_hostile_answer_gets_a_clear_outcome_within_the_limit(checker):
    """All at once on both workers (so from threads other than the main one): none is correct, each has its outcome
    and reason within the limit (plus, after a kill, the replacement worker's start), and a plain answer is still
    judged right afterwards."""
    PWNED.unlink(missing_ok=True)
    names = list(HOSTILE)
    got = dict(zip(names, checker.check_many([(HOSTILE[n], 5) for n in names])))
    for name, check in got.items():
        assert check.outcome in OUTCOMES and check.outcome != "correct", (name, check)
        assert check.reason, (name, check)
        assert check.seconds < TIMEOUT_S + START_MARGIN_S, (name, check)
    assert got["a tower of powers"].outcome == "timeout"
    assert got["fractions nested 10,000 deep"].reason.startswith("too_long")
    assert got["an enormous response"].outcome == "malformed"
    assert not PWNED.exists()
    assert checker.check("\\boxed{5}", 5).correct


def test_the_limit_holds_in_any_thread():
    """math-verify's own timeout (signal.alarm) works only in the main thread; the worker's kill works in any."""
    out: list[MathCheck] = []
    with MathChecker(workers=1, timeout_s=1.0) as c:
        thread = threading.Thread(target=lambda: out.append(c.check("\\boxed{10^{10^{10}}}", 5)))
        thread.start()
        thread.join(timeout=1.0 + START_MARGIN_S + 60)  # the worker's first start is inside this check
        assert not thread.is_alive()
        (check,) = out
        assert check.outcome == "timeout" and check.reason == "time_limit: no verdict within 1 s"
        assert c.check("\\boxed{\\frac{10}{4}}", Fraction(5, 2)).correct  # on the replacement worker


def test_a_closed_checker_ends_its_workers():
    c = MathChecker(workers=2).start()
    procs = [w.proc for w in c._live]
    assert len(procs) == 2 and all(p.poll() is None for p in procs)
    c.close()
    assert all(p.poll() is not None for p in procs)


def test_a_request_the_worker_cannot_read_is_a_wrong_answer_not_a_crash():
    assert answer_line("not json", [])["reason"].startswith("parser_error")


def test_a_worker_ends_itself_past_its_cpu_time_when_nobody_kills_it():
    """The kernel's CPU limit (SIGXCPU) ends a worker that hangs, should the wall-clock kill never come (its parent
    gone); the answer it was on is wrong, and the next check gets a new worker."""
    with MathChecker(workers=1, timeout_s=60.0, cpu_s=1) as c:
        c.start()
        start = time.perf_counter()
        check = c.check("\\boxed{10^{10^{10}}}", 5)
        assert check.outcome == "wrong" and check.reason.endswith("(ended by SIGXCPU)"), check
        assert time.perf_counter() - start < 30
        assert c.check("\\boxed{5}", 5).correct
