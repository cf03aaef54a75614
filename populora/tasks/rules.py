"""Static checks on model-written code (spec 3.4): banned modules and calls, the reward-integrity rules for
programs, and restricted expressions for model-written inputs and predicted outputs."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# AZR's banned modules (spec 3.4).
AZR_BANNED_MODULES = frozenset({
    "logging", "random", "secrets", "uuid", "multiprocessing", "pebble", "subprocess", "threading", "datetime",
    "time", "hashlib", "hmac", "bcrypt", "calendar"})
# Beyond AZR, for reward integrity (spec 3.4 [choice]).
INTEGRITY_BANNED_MODULES = frozenset({
    "os", "sys", "ctypes", "io", "gc", "inspect", "importlib", "builtins", "signal", "socket"})
BANNED_MODULES = AZR_BANNED_MODULES | INTEGRITY_BANNED_MODULES
BANNED_NAMES = frozenset({
    "__import__", "exec", "eval", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "input", "breakpoint", "exit", "quit"})
# Attributes that reach interpreter frames and code objects without a dunder (frame walking would let a
# program read the trusted epilogue's state).
BANNED_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_back", "f_globals", "f_locals",
    "f_builtins", "f_code", "tb_frame", "tb_next", "co_code", "co_consts", "mro"})
# AZR's dotted bans, matched as attribute chains on names (spec 3.4: "we match them properly").
BANNED_DOTTED = frozenset({("sys", "exit"), ("os", "environ")})

# Restricted expressions (spec 3.4 [choice]): the only names a model-written input or output may use, and only
# as the callee of a call.
CONSTRUCTORS = ("dict", "set", "frozenset", "tuple", "list", "range", "int", "float", "complex", "str", "bytes",
                "bool")
_EXPR_NODES = (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.BoolOp,
               ast.Compare, ast.Call, ast.Name, ast.Load, ast.Starred, ast.keyword, ast.unaryop, ast.operator,
               ast.boolop, ast.cmpop, ast.expr_context)


@dataclass
class Violation:
    """The first rule a piece of code breaks: the reason code and a line the author can act on."""

    reason: str
    detail: str


def _is_dunder(name: str) -> bool:
    """`__x__`: two underscores, a name, two underscores. A run of underscores alone (`'_____'`, a separator
    line in a string) names no special attribute."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__") and name.strip("_") != ""


def _dotted(node: ast.AST) -> tuple[str, ...] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return (node.id, *reversed(parts))
    return None


def _import_violation(node: ast.Import | ast.ImportFrom) -> Violation | None:
    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    for mod in modules:
        root = mod.split(".")[0]
        if root in BANNED_MODULES:
            return Violation("banned_import", f"line {node.lineno}: module '{mod}' is not allowed")
        if isinstance(node, ast.ImportFrom) and node.level:
            return Violation("banned_import", f"line {node.lineno}: relative imports are not allowed")
    if isinstance(node, ast.ImportFrom):
        for alias in node.names:
            if alias.name == "*" or _is_dunder(alias.name) or alias.name in BANNED_NAMES:
                return Violation("banned_import", f"line {node.lineno}: 'from {node.module} import "
                                                  f"{alias.name}' is not allowed")
    return None


def program_violation(program: str) -> Violation | None:
    """The first static rule (spec 3.3-3.4) a teacher program or a code_f student program breaks, or None.

    Reason codes: `syntax_error`, `banned_import`, `banned_call` (sys.exit, os.environ, input()),
    `banned_name` (dunder names, exec/eval/open/getattr/...), `banned_attribute` (dunder attributes, frame
    and code-object attributes).
    """
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return Violation("syntax_error", f"the program does not parse: {e}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bad = _import_violation(node)
            if bad:
                return bad
        elif isinstance(node, ast.Attribute):
            chain = _dotted(node)
            if chain and any(chain[i:i + 2] == pair for pair in BANNED_DOTTED for i in range(len(chain) - 1)):
                return Violation("banned_call", f"line {node.lineno}: '{'.'.join(chain)}' is not allowed")
            if _is_dunder(node.attr) or node.attr in BANNED_ATTRIBUTES:
                return Violation("banned_attribute", f"line {node.lineno}: attribute '{node.attr}' is not allowed")
        elif isinstance(node, ast.Name):
            if node.id == "input":
                return Violation("banned_call", f"line {node.lineno}: input() is not allowed")
            if _is_dunder(node.id) or node.id in BANNED_NAMES:
                return Violation("banned_name", f"line {node.lineno}: name '{node.id}' is not allowed")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if _is_dunder(node.name):
                return Violation("banned_name", f"line {node.lineno}: defining '{node.name}' is not allowed")
        elif isinstance(node, ast.arg) and _is_dunder(node.arg):
            return Violation("banned_name", f"line {node.lineno}: argument '{node.arg}' is not allowed")
        elif isinstance(node, ast.keyword) and node.arg and _is_dunder(node.arg):
            return Violation("banned_name", f"keyword '{node.arg}' is not allowed")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_dunder(node.value.strip()):
            # a dunder in a string reaches attributes through format specs or type() namespaces
            return Violation("banned_name", f"line {node.lineno}: the string {node.value!r} is not allowed")
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names = [n for n in node.names if _is_dunder(n) or n in BANNED_NAMES]
            if names:
                return Violation("banned_name", f"line {node.lineno}: name '{names[0]}' is not allowed")
    return None


def _expression_violation(tree: ast.AST, what: str) -> Violation | None:
    for node in ast.walk(tree):
        if not isinstance(node, _EXPR_NODES):
            return Violation("not_restricted", f"{what}: {type(node).__name__} is not allowed in a restricted "
                                               "expression (literals, containers, operators and constructor "
                                               "calls only)")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in CONSTRUCTORS):
                callee = (f"'{node.func.id}'" if isinstance(node.func, ast.Name)
                          else f"a {type(node.func).__name__.lower()} expression")
                return Violation("not_restricted", f"{what}: calling {callee} is not allowed; only "
                                                   f"{', '.join(CONSTRUCTORS)} may be called")
            if any(k.arg is None for k in node.keywords):
                return Violation("not_restricted", f"{what}: ** unpacking is not allowed")
        if isinstance(node, ast.Name) and node.id not in CONSTRUCTORS:
            return Violation("not_restricted", f"{what}: name '{node.id}' is not allowed")
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for n in names:
        if id(n) not in callees:
            return Violation("not_restricted", f"{what}: '{n.id}' may only be called, not used as a value")
    return None


def expression_violation(text: str, what: str = "expression") -> Violation | None:
    """None when `text` is one restricted expression (spec 3.4): literals, containers, unary/binary/boolean
    operators, comparisons, and calls of the constructors in CONSTRUCTORS; no other names, no attributes,
    comprehensions, lambdas, subscripts or f-strings. Reason codes: `syntax_error`, `not_restricted`."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return Violation("syntax_error", f"{what} does not parse as an expression: {e}")
    return _expression_violation(tree.body, what)


def arguments_violation(text: str, what: str = "input") -> Violation | None:
    """None when `text` is an argument list `a, b, k=c` whose every value is a restricted expression, so that
    `f(` + text + `)` is a call with those arguments and nothing else (spec 2, 3.4)."""
    try:
        tree = ast.parse(f"f({text.strip()})", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return Violation("syntax_error", f"{what} is not an argument list: {e}")
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"):
        return Violation("not_restricted", f"{what} is not a plain argument list")
    for arg in call.args:
        bad = _expression_violation(arg.value if isinstance(arg, ast.Starred) else arg, what)
        if bad:
            return bad
    for kw in call.keywords:
        if kw.arg is None:
            return Violation("not_restricted", f"{what}: ** unpacking is not allowed")
        bad = _expression_violation(kw.value, what)
        if bad:
            return bad
    return None
