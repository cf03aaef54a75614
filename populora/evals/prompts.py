"""How a benchmark problem is put to a model and how the program is taken back out of its answer.

Per model kind (`model.chat_template`):
- **completion** (a base model, or chat_template off): the problem's prompt is sent as raw text and the model
  continues the function body; generation stops at the first of COMPLETION_STOP (the next top-level statement),
  and the program is `prompt + completion` cut before that stop.
- **chat** (an instruct model through its chat template, SmolLM2-135M-Instruct in `cpu-smol`): the model is asked
  for the whole function in one fenced python block. The program is the first fenced block that defines the entry
  point (else the first block, else the whole answer), after the prompt: the prompt's imports and helper functions
  stay defined, and its stub (a docstring, a valid body) is replaced by the model's definition. An answer that
  only writes the body (indented lines) is appended to the prompt, as in completion mode.

Task problems (heldout, CRUXEval) use the training prompts (populora.tasks.prompts.student_messages) in either kind;
the inference backend formats messages per kind, and the training verifier reads the `<answer>` back.
"""

from __future__ import annotations

import ast
import re

from populora.evals.benchmarks import Problem
from populora.tasks.prompts import student_messages

# The next top-level statement ends a completion: HumanEval's own stop sequences (Chen et al. 2021), plus asserts.
COMPLETION_STOP = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ", '\n"""', "\n```")
CHAT_SYSTEM = "You are a careful Python programmer. Answer with code only."
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def chat_messages(problem: Problem) -> list[dict[str, str]]:
    """The chat prompt of a program problem, or the training student prompt of a task problem."""
    if problem.kind == "task":
        return student_messages(problem.task)
    what = (f"Complete the Python function `{problem.entry_point}` below" if _defines(problem.prompt,
                                                                                     problem.entry_point)
            else f"Write the Python function `{problem.entry_point}` described below")
    return [{"role": "system", "content": CHAT_SYSTEM},
            {"role": "user", "content": f"{what}. Reply with the whole function in one ```python block.\n\n"
                                        f"```python\n{problem.prompt.rstrip()}\n```"}]


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def _top_level_def(code: str, name: str) -> bool:
    return re.search(rf"^def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def cut_at_stop(text: str, stops: tuple[str, ...] = COMPLETION_STOP) -> str:
    """The completion before the first stop sequence (the backend keeps the stop it ended on)."""
    cut = len(text)
    for s in stops:
        k = text.find(s)
        if k != -1:
            cut = min(cut, k)
    return text[:cut]


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Fenced blocks (language, body) in order; a last fence left open (the answer ran out of tokens) counts."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def program_from_completion(problem: Problem, text: str) -> str:
    """Completion mode: the prompt and the completion up to the first stop."""
    return problem.prompt + cut_at_stop(text)


def program_from_chat(problem: Problem, text: str) -> str:
    """Chat mode: the code of the answer (see the module docstring) placed after the problem's prompt."""
    blocks = [body for lang, body in code_blocks(text) if lang in ("python", "py", "python3", "")]
    code = next((b for b in blocks if _defines(b, problem.entry_point)), blocks[0] if blocks else text)
    code = code.strip("\n")
    if not code.strip():
        return problem.prompt
    if _top_level_def(code, problem.entry_point) or not code[:1].isspace():
        return problem.prompt.rstrip() + "\n\n\n" + code + "\n"
    return problem.prompt + code + "\n"  # only the body, indented: it continues the prompt


def extract_program(problem: Problem, text: str, chat: bool) -> str:
    """The program a model's answer to a program problem stands for (see the module docstring)."""
    return program_from_chat(problem, text) if chat else program_from_completion(problem, text)


def parses(program: str) -> bool:
    try:
        ast.parse(program)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
