"""Parsers (spec 3.1-3.2) and static rules (spec 3.3-3.4) on good and malformed model outputs."""

from __future__ import annotations

import pytest

from populora.tasks import parsing
from populora.tasks.parsing import ParseError
from populora.tasks.rules import arguments_violation, expression_violation, program_violation


def test_last_answer_wins_and_think_is_required_for_students():
    text = "<think>a</think><answer>1</answer> more <answer> 2 </answer>"
    assert parsing.extract_answer(text) == "2"
    assert parsing.extract_answer(text, require_think=True) == "2"
    with pytest.raises(ParseError) as e:
        parsing.extract_answer("<answer>1</answer>", require_think=True)
    assert e.value.reason == "no_think"
    with pytest.raises(ParseError) as e:
        parsing.extract_answer("<think>only thinking</think>")
    assert e.value.reason == "no_answer"
    with pytest.raises(ParseError):
        parsing.extract_answer("<answer>unclosed")


def test_fenced_blocks_and_program():
    text = "```python\ndef f(a):\n    return a\n```\n```input\n1, 2\n```\n```Message\nhi\n```"
    blocks = parsing.fenced_blocks(text)
    assert [b.lang for b in blocks] == ["python", "input", "message"]
    assert parsing.python_program(blocks).startswith("def f(a)")
    assert parsing.strip_fence("```\n[1, 2]\n```") == "[1, 2]"
    assert parsing.strip_fence(" 42 ") == "42"
    with pytest.raises(ParseError) as e:
        parsing.python_program(parsing.fenced_blocks("```input\n1\n```"))
    assert e.value.reason == "no_program"
    assert parsing.python_program([], fallback="def f(): pass") == "def f(): pass"


def test_rename_entry_renames_the_one_def_and_its_recursion():
    src = "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)"
    out = parsing.rename_entry(src)
    scope: dict = {}
    exec(compile(out, "<t>", "exec"), scope)  # trusted test code, not model output
    assert "fact" not in out and scope["f"](5) == 120
    assert parsing.rename_entry("def f(a):\n    return a") == "def f(a):\n    return a"


@pytest.mark.parametrize("src, reason", [
    ("x = 1", "not_one_def"),
    ("def f(): pass\ndef g(): pass", "not_one_def"),
    ("async def f(): pass", "not_one_def"),
    ("def f(:\n pass", "syntax_error"),
])
def test_rename_entry_rejections(src, reason):
    with pytest.raises(ParseError) as e:
        parsing.rename_entry(src)
    assert e.value.reason == reason


@pytest.mark.parametrize("src, reason", [
    ("import random\ndef f(): return 1", "banned_import"),
    ("from os import path\ndef f(): return 1", "banned_import"),
    ("import os.path\ndef f(): return 1", "banned_import"),
    ("from collections import *\ndef f(): return 1", "banned_import"),
    ("from . import x\ndef f(): return 1", "banned_import"),
    ("import time as t\ndef f(): return 1", "banned_import"),
    ("def f(): return sys.exit(0)", "banned_call"),
    ("def f(): return os.environ", "banned_call"),
    ("def f(): return input()", "banned_call"),
    ("def f(): return eval('1')", "banned_name"),
    ("def f(): return open('x')", "banned_name"),
    ("def f(): return __import__('os')", "banned_name"),
    ("def f(): return globals()", "banned_name"),
    ("def f(): return getattr(1, 'real')", "banned_name"),
    ("def f(): return __builtins__", "banned_name"),
    ("class A:\n    def __eq__(s, o): return True\ndef f(): return A()", "banned_name"),
    ("def f(): return {'__class__': 1}", "banned_name"),
    ("def f(x): return x.__class__", "banned_attribute"),
    ("def f(x): return (i for i in x).gi_frame", "banned_attribute"),
    ("def f(x):\n    try:\n        1/0\n    except Exception as e:\n        return e.__traceback__.tb_frame",
     "banned_attribute"),
    ("def f(:", "syntax_error"),
])
def test_program_violations(src, reason):
    bad = program_violation(src)
    assert bad is not None and bad.reason == reason, bad


def test_allowed_programs_pass():
    for src in ("import collections, re, math, itertools, heapq, fractions\ndef f(a):\n    return sorted(a)",
                "from collections import Counter\ndef f(s):\n    return Counter(s).most_common(1)",
                "def f(a):\n    return '{} {}'.format(a, len(a))",
                # no false alarms on underscores that name no special attribute
                "def f(a):\n    return a + '_____' + '__' + '_'",
                "def f(a):\n    sep = '-' * 3 + '____'\n    return sep.join(a)",
                "def f(a):\n    _ = len(a)\n    __ = [_ for _ in range(3)]\n    return _, __",
                "def f(_):\n    return _",
                "def f(a, ___=2):\n    return a * ___"):
        assert program_violation(src) is None, src
    # a real dunder among underscores is still refused
    assert program_violation("def f(a):\n    return '_____' + a.__class__.__name__").reason == "banned_attribute"
    assert program_violation("def f(a):\n    return '__class__'").reason == "banned_name"


@pytest.mark.parametrize("text", ["42", "-1.5", "'a' + 'b'", "[1, (2, 3), {4: {5}}]", "set()", "frozenset({1})",
                                  "dict(a=1)", "range(3)", "complex(1, 2)", "b'x' * 2", "not True", "1 < 2",
                                  "True and None", "(1+2j)", "list(range(3))"])
def test_restricted_expressions_accepted(text):
    assert expression_violation(text) is None


@pytest.mark.parametrize("text", ["f(1)", "x", "int", "(1).real", "[i for i in []]", "lambda: 1", "a[0]",
                                  "print(1)", "f'{1}'", "(x := 1)", "__import__('os')", "type('E', (), {})()",
                                  "1 if True else 2", "list(**{})", "open('x')", "*a"])
def test_restricted_expressions_rejected(text):
    bad = expression_violation(text)
    assert bad is not None and bad.reason in ("not_restricted", "syntax_error")


def test_argument_lists():
    assert arguments_violation("'Lab', 'retest', 'gnelloH'") is None
    assert arguments_violation("[1, 2], {'a': 3}") is None
    assert arguments_violation("1, k=2") is None
    assert arguments_violation("*[1, 2]") is None
    assert arguments_violation("f(1)").reason == "not_restricted"
    assert arguments_violation("**{'a': 1}").reason == "not_restricted"
    assert arguments_violation("1) + (2").reason in ("not_restricted", "syntax_error")
    assert arguments_violation("1, x").reason == "not_restricted"


def test_rename_entry_refuses_a_tree_too_deep_to_write_back():
    """The parser accepts chains of a few hundred operators that are too deep to unparse: a clear syntax_error,
    never a crash of the verifier."""
    with pytest.raises(ParseError) as e:
        parsing.rename_entry("def g(a):\n    return " + "+".join(["a"] * 600))
    assert e.value.reason == "syntax_error"
