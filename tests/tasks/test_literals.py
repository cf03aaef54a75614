"""The host's trusted evaluator of gold outputs (populora/tasks/literals.py): every repr the verifier produces
comes back as the same value of the same exact types; anything else is a LiteralError, never an evaluation."""

from __future__ import annotations

import pytest

from populora.tasks.literals import LiteralError, literal_value

VALUES = [0, -1, 10 ** 300, 0x7fffffff, 1.5, -0.0, 1e-310, 1e300, 2j, -1j, 1 + 2j, complex(-0.0, -1.0), "",
          "a'b\"c", "\x00\n\t\u00e9\U0001f600", "\udc80", b"", b"\x00\xff", True, False, None, [], (), (1,),
          {}, set(), frozenset(), {1, 2}, frozenset({"a", ("b",)}), {1: [2, (3, {4})], "k": {"n": None}},
          [[[[]]]], ((), [()], {(): frozenset()})]


def _types(value):
    if isinstance(value, dict):
        return (dict, [(_types(k), _types(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_types(v) for v in value])
    if isinstance(value, set | frozenset):
        return (type(value), sorted(repr(_types(v)) for v in value))
    return type(value)


# ids by position: a set's repr depends on the hash seed, and every test worker must collect the same ids
@pytest.mark.parametrize("value", VALUES, ids=[f"{i}-{type(v).__name__}" for i, v in enumerate(VALUES)])
def test_every_repr_comes_back_equal_and_of_the_same_types(value):
    back = literal_value(repr(value))
    # the same repr as Python's own evaluation gives (a complex's zero real part loses its sign in both)
    assert back == value and _types(back) == _types(value) and repr(back) == repr(eval(repr(value)))  # noqa: S307


@pytest.mark.parametrize("text", ["set()", "frozenset({1})", "dict(a=1)", "list('ab')", "tuple([1])", "int('7')",
                                  "float('1.5')", "complex(1, 2)", "str(b'x', 'utf-8')", "bytes([1, 2])",
                                  "bool(1)", "-(1)", "+2", "1 - 2j"])
def test_constructor_calls_of_spec_3_4(text):
    assert literal_value(text) == eval(text)  # noqa: S307 - comparing with Python's own answer


@pytest.mark.parametrize("text", [
    "__import__('os')", "x", "f(1)", "(1).real", "[i for i in []]", "lambda: 1", "9 ** 9 ** 9", "'a' * 10**9",
    "bytes(10**12)", "range(10)", "list(range(10**9))", "1 << 10**9", "[*a]", "{**a}", "dict(**a)", "...",
    "'a' + 'b'", "not 1", "1 if 1 else 2", "int('9' * 5000)", "float(10**400)", "{[1]: 2}", "set([[1]])",
    "print(1)", "", "(1", "'\x00'", "[" * 300 + "]" * 300, "+".join(["1"] * 5000), "'\udc80'",
])
def test_everything_else_is_refused_without_evaluating_it(text):
    with pytest.raises(LiteralError):
        literal_value(text)


def test_bounded_size():
    with pytest.raises(LiteralError, match="at most"):
        literal_value("1" + " " * 2_000_000)
