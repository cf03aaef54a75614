"""Parsers of model outputs (spec 3.1-3.2): the last `<answer>`, fenced blocks, the one `def` renamed to `f`."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_THINK_THEN_ANSWER = re.compile(r"<think>.*?</think>.*?<answer>.*?</answer>", re.S)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)


class ParseError(ValueError):
    """A model output that does not have the required shape; `reason` is the reason code (spec 3)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class Block:
    lang: str
    body: str


def extract_answer(text: str, require_think: bool = False) -> str:
    """The text of the *last* `<answer>...</answer>` (spec 3.1). With `require_think`, the output must also
    hold `<think>...</think>` before an answer (the student's format, spec 4)."""
    answers = _ANSWER.findall(text)
    if not answers:
        raise ParseError("no_answer", "no <answer>...</answer> in the output")
    if require_think and not _THINK_THEN_ANSWER.search(text):
        raise ParseError("no_think", "no <think>...</think> before the <answer>")
    return answers[-1].strip()


def fenced_blocks(text: str) -> list[Block]:
    """Every ```lang ...``` block, in order, with its language tag lower-cased."""
    return [Block(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def strip_fence(text: str) -> str:
    """An answer's content without a surrounding fence (students may wrap an expression in one)."""
    blocks = fenced_blocks(text)
    return blocks[0].body.strip() if blocks else text.strip()


def first_block(blocks: list[Block], lang: str) -> str | None:
    for b in blocks:
        if b.lang == lang:
            return b.body
    return None


def python_program(blocks: list[Block], fallback: str | None = None) -> str:
    """The first fenced python block (spec 3.2); `fallback` (the whole answer) when there is no fence."""
    body = first_block(blocks, "python") or first_block(blocks, "py")
    if body is None:
        if fallback is None or not fallback.strip():
            raise ParseError("no_program", "no ```python block in the answer")
        body = fallback
    return body.strip("\n")


def rename_entry(program: str, entry: str = "f") -> str:
    """Exactly one top-level `def` (spec 3.2), renamed to `entry` (its recursive calls too): `f`, or `solution` for
    math_w (spec 18).

    Raises ParseError `syntax_error` when the program does not parse and `not_one_def` otherwise.
    """
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ParseError("syntax_error", f"the program does not parse: {e}") from None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if len(defs) != 1:
        raise ParseError("not_one_def", f"the program has {len(defs)} top-level functions; it needs exactly one")
    if isinstance(defs[0], ast.AsyncFunctionDef):
        raise ParseError("not_one_def", "the entry function must not be async")
    name = defs[0].name
    if name == entry:
        return program
    defs[0].name = entry
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name:
            node.id = entry
    try:
        return ast.unparse(tree)
    except RecursionError:  # a tree the parser accepts can still be too deep to write back out
        raise ParseError("syntax_error", f"the program is nested too deeply to rename its function to {entry}; "
                                         f"name it {entry} or nest less") from None
