"""Static complexity of a program (spec 11): AST depth, McCabe cyclomatic complexity, lines of code."""

from __future__ import annotations

import ast

# Each of these nodes adds one decision point to McCabe's count (1 + decisions).
_BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.With, ast.AsyncWith,
             ast.Assert, ast.comprehension, ast.match_case)


def ast_depth(node: ast.AST) -> int:
    """Height of the syntax tree: 1 for a leaf, 1 + the deepest child otherwise (iterative, any size)."""
    best = 0
    stack = [(node, 1)]
    while stack:
        cur, depth = stack.pop()
        best = max(best, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(cur))
    return best


def cyclomatic(tree: ast.AST) -> int:
    """McCabe: 1 + decision points; a boolean operator with k operands adds k - 1 (each short-circuit)."""
    decisions = 0
    for node in ast.walk(tree):
        if isinstance(node, _BRANCHES):
            decisions += 1
        elif isinstance(node, ast.BoolOp):
            decisions += len(node.values) - 1
    return 1 + decisions


def lines_of_code(program: str) -> int:
    """Non-blank lines that are not only a comment."""
    return sum(1 for line in program.splitlines() if line.strip() and not line.strip().startswith("#"))


def complexity(program: str) -> dict[str, int]:
    """{"ast_depth", "cyclomatic", "lines_of_code"} of a program; zeros when it does not parse."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {"ast_depth": 0, "cyclomatic": 0, "lines_of_code": lines_of_code(program)}
    return {"ast_depth": ast_depth(tree), "cyclomatic": cyclomatic(tree), "lines_of_code": lines_of_code(program)}
