"""The trusted evaluator of restricted literal expressions (spec 3.4), run on the host: it rebuilds gold outputs
from the reprs the verifier produced, so no gold value is ever evaluated where model-written code runs.

It evaluates the AST itself (no `eval`), with the host's own builtins, and only what cannot blow up: constants,
tuples, lists, sets, dicts, unary `+`/`-` and binary `+`/`-` on numbers (the complex literal `(1+2j)`), and calls
of the constructors that cannot allocate more than their argument holds (`set()`, `frozenset({1})`, `int('7')`,
...; never `range`, never `bytes(n)`, never `*` or `**`). Every value that comes out has an exact builtin type.
"""

from __future__ import annotations

import ast
from typing import Any

MAX_LITERAL_CHARS = 1_000_000
MAX_DEPTH = 200
_CONSTANT_TYPES = (int, float, complex, str, bytes, bool, type(None))
_NUMBER_TYPES = (int, float, complex)
_CONSTRUCTORS = {"dict": dict, "set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "int": int,
                 "float": float, "complex": complex, "str": str, "bytes": bytes, "bool": bool}


class LiteralError(ValueError):
    """A text that is not a restricted literal expression the host can rebuild; the message says why."""


def literal_value(text: str) -> Any:
    """The value of one restricted literal expression, e.g. `[1, (2+3j), frozenset({'a'})]`; LiteralError
    (naming what is not allowed) for anything else."""
    if not isinstance(text, str):
        raise LiteralError(f"a literal must be text, not {type(text).__name__}")
    if len(text) > MAX_LITERAL_CHARS:
        raise LiteralError(f"a literal of {len(text)} characters; at most {MAX_LITERAL_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise LiteralError(f"does not parse as an expression: {e}") from None
    try:
        return _value(tree.body, 0)
    except (TypeError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        if isinstance(e, LiteralError):
            raise
        raise LiteralError(f"cannot be built: {type(e).__name__}: {e}") from None


def _value(node: ast.AST, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise LiteralError(f"nested deeper than {MAX_DEPTH}")
    if isinstance(node, ast.Constant):
        if type(node.value) not in _CONSTANT_TYPES:
            raise LiteralError(f"the constant {node.value!r} is not allowed")
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise LiteralError("* unpacking is not allowed")
        items = [_value(e, depth + 1) for e in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise LiteralError("** unpacking is not allowed")
        return {_value(k, depth + 1): _value(v, depth + 1) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _number(_value(node.operand, depth + 1))
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        left, right = _number(_value(node.left, depth + 1)), _number(_value(node.right, depth + 1))
        return left + right if isinstance(node.op, ast.Add) else left - right
    if isinstance(node, ast.Call):
        return _call(node, depth)
    raise LiteralError(f"{type(node).__name__} is not allowed in a literal")


def _number(value: Any) -> int | float | complex:
    if type(value) not in _NUMBER_TYPES and type(value) is not bool:
        raise LiteralError(f"+ and - apply to numbers only, not to {type(value).__name__}")
    return value


def _call(node: ast.Call, depth: int) -> Any:
    if not (isinstance(node.func, ast.Name) and node.func.id in _CONSTRUCTORS):
        raise LiteralError(f"only {', '.join(_CONSTRUCTORS)} may be called")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise LiteralError("* and ** unpacking are not allowed")
    name = node.func.id
    args = [_value(a, depth + 1) for a in node.args]
    kwargs = {k.arg: _value(k.value, depth + 1) for k in node.keywords}
    if name == "bytes" and any(type(a) in (int, bool) for a in args):
        raise LiteralError("bytes(n) allocates n bytes; write the bytes literal instead")
    if name != "dict" and kwargs and name not in ("int", "str", "bytes"):
        raise LiteralError(f"{name}() takes no keyword arguments here")
    return _CONSTRUCTORS[name](*args, **kwargs)
