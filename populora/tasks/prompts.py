"""Teacher and student chat prompts (spec 10). The wording is ours; the tags, blocks and order are the contract
that the parsers in `parsing.py` read back."""

from __future__ import annotations

from populora.tasks.rules import AZR_BANNED_MODULES, CONSTRUCTORS, INTEGRITY_BANNED_MODULES
from populora.tasks.triplet import TASK_TYPES, Triplet

SYSTEM = ("You are a careful Python programmer. Think step by step inside <think>...</think>, then give your "
          "final answer inside <answer>...</answer>.")
_BANNED = ", ".join(sorted(AZR_BANNED_MODULES | INTEGRITY_BANNED_MODULES))
_RULES = (f"Rules: the program defines exactly one top-level function `f` and is deterministic; it must not "
          f"import {_BANNED}; it must not use dunder names or attributes, exec, eval, compile, open, globals, "
          f"locals, vars, getattr, setattr, delattr or input(). Inputs are Python literals, containers, "
          f"operators and calls of {', '.join(CONSTRUCTORS)} only.")


def _check_type(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; allowed: {list(TASK_TYPES)}")


def _reference(t: Triplet, i: int, show: str) -> str:
    parts = [f"### Reference {i}", f"```python\n{t.program}\n```"]
    if show in ("io",):
        parts.append(f"```input\n{t.inputs[0]}\n```")
        parts.append(f"```output\n{t.outputs[0]}\n```")
    return "\n".join(parts)


def _teacher_io(task_type: str, references: list[Triplet]) -> str:
    goal = ("predict the output from the program and the input" if task_type == "code_o"
            else "find an input that produces the given output")
    refs = "\n\n".join(_reference(t, i + 1, "io") for i, t in enumerate(references)) or "(none yet)"
    return (f"Design a new code reasoning task. A solver will see your program and must {goal}.\n\n"
            f"Earlier tasks for reference:\n\n{refs}\n\n"
            "Write a new program that is different from the references and harder to reason about, plus one "
            "input for it.\n" + _RULES + "\n\n"
            "Answer format, inside <answer>...</answer>:\n"
            "```python\ndef f(...):\n    ...\n```\n"
            "```input\n<the arguments of one call of f, e.g. [1, 2], 'abc'>\n```")


def _teacher_f(given_program: str, n_inputs: int) -> str:
    return ("Design a new program-induction task. A solver will see a short description of the function below "
            f"and half of {n_inputs} input/output pairs, and must write the function.\n\n"
            f"The function:\n```python\n{given_program}\n```\n\n"
            f"Write {n_inputs} different inputs that together reveal what the function does, and a message that "
            "hints at its purpose without giving the code away.\n" + _RULES + "\n\n"
            "Answer format, inside <answer>...</answer>: "
            f"{n_inputs} blocks of\n```input\n<the arguments of one call of f>\n```\nthen\n"
            "```message\n<one or two sentences>\n```")


def teacher_messages(task_type: str, references: list[Triplet], given_program: str | None = None,
                     n_inputs: int = 10) -> list[dict[str, str]]:
    """Chat messages of a teacher proposal (spec 10): K references from the buffer of `task_type` (code_o,
    code_i), or, for code_f, the `given_program` drawn from the code_f buffer and a request for `n_inputs`
    inputs plus a message (spec 2)."""
    _check_type(task_type)
    if task_type == "code_f":
        if not given_program:
            raise ValueError("a code_f teacher prompt needs given_program (one program from the code_f buffer)")
        user = _teacher_f(given_program, n_inputs)
    else:
        user = _teacher_io(task_type, references)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def student_messages(task: Triplet) -> list[dict[str, str]]:
    """Chat messages of a student attempt (spec 2): code_o shows p and i; code_i shows p and o; code_f shows the
    message and the first N/2 (input, output) pairs."""
    _check_type(task.task_type)
    if task.task_type == "code_o":
        user = (f"Here is a program and an input.\n```python\n{task.program}\n```\n```input\n{task.inputs[0]}\n```\n"
                "What does f(<input>) return? Give the value as a Python literal inside <answer>...</answer>.")
    elif task.task_type == "code_i":
        user = (f"Here is a program and an output.\n```python\n{task.program}\n```\n```output\n{task.outputs[0]}"
                "\n```\nGive an input (the arguments of one call of f) that produces this output, inside "
                "<answer>...</answer>.")
    else:
        half = len(task.inputs) // 2
        pairs = "\n".join(f"```input\n{i}\n```\n```output\n{o}\n```"
                          for i, o in zip(task.inputs[:half], task.outputs[:half]))
        user = (f"Write a Python function `f` from its description and examples.\nDescription: {task.message}\n\n"
                f"{pairs}\n\nGive the program in a ```python block inside <answer>...</answer>. "
                + _RULES)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
