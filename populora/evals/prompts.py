"""How a benchmark problem is put to a model and how the program or answer is taken back out of what it wrote.

Two protocols. `training` (the default for adapters trained here) keeps the format they were trained on; `benchmark`
(the default for the bare base model) prompts as each benchmark's authors do: HumanEval and MBPP as a raw completion
of the signature and docstring (the `completion` form below, whatever the model kind), CRUXEval with two worked
examples of an `assert f(...) == ...` to complete between [ANSWER] tags (the `cruxeval` form), the answer read as its
authors read it (read_task_answer). `heldout` is the project's own benchmark: its protocol is the training format.

Forms, per protocol and model kind (`model.chat_template`):
- **completion** (a base model, or chat_template off): the problem's prompt is sent as raw text and the model
  continues the function body; generation stops at the first of COMPLETION_STOP (the next top-level statement),
  and the program is `prompt + completion` cut before that stop.
- **chat** (an instruct model through its chat template, SmolLM2-135M-Instruct in `cpu-smol`): the model is asked
  for the whole function in one fenced python block. The program is the first fenced block that defines the entry
  point (else the first block, else the whole answer), after the prompt: the prompt's imports and helper functions
  stay defined, and its stub (a docstring, a valid body) is replaced by the model's definition. An answer that
  only writes the body (indented lines) is appended to the prompt, as in completion mode.

- **training** (task problems, training protocol): the training student prompt (populora.tasks.prompts.
  student_messages) in either kind; the inference backend formats messages per kind, and the training verifier
  reads the `<answer>` back.
- **cruxeval** (task problems of CRUXEval, benchmark protocol): CRUXEVAL_OUTPUT or CRUXEVAL_INPUT as raw text, cut
  at `[/ANSWER]`; the completed assertion's expected value (output prediction) or call arguments (input prediction)
  is the answer the training verifier judges.
- **math_chat** / **math_completion** (math problems, either protocol, until a math task type trains a format of its
  own): the question followed by MATH_INSTRUCTION, as the user's message or as raw text; the math checker reads the
  answer's last `\\boxed{...}`.

A prompt is never truncated: one longer than the model's context minus the generation budget is refused before
anything is generated (populora.evals.harness.check_context).
"""

from __future__ import annotations

import ast
import re

from populora.evals.problem import Problem
from populora.tasks.prompts import MATH_INSTRUCTION, student_messages

PROTOCOLS = ("training", "benchmark")
FORMS = ("chat", "completion", "training", "cruxeval", "math_chat", "math_completion")
# The next top-level statement ends a completion: HumanEval's own stop sequences (Chen et al. 2021), plus asserts.
COMPLETION_STOP = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ", '\n"""', "\n```")
# A prompt that only describes the function (MBPP): the model writes the def itself, so a new def cannot end it.
DESCRIPTION_STOP = ("\nif __name__", "\nprint(", "\nassert ", "\n```")
CRUXEVAL_STOP = ("[/ANSWER]",)
CRUXEVAL_OUTPUT = """Below is a Python function and an assertion that calls it on an input. Complete the assertion \
with the literal value the call returns (no expressions, no calls), even if the function looks wrong. Write the \
whole completed assertion between [ANSWER] and [/ANSWER], as in the examples, and nothing else.

[PYTHON]
def f(items):
    return [x * 2 for x in items if x > 1]
assert f([1, 2, 3]) == ??
[/PYTHON]
[ANSWER]
assert f([1, 2, 3]) == [4, 6]
[/ANSWER]

[PYTHON]
def f(text, sep):
    return sep.join(reversed(text.split()))
assert f("to be or", "-") == ??
[/PYTHON]
[ANSWER]
assert f("to be or", "-") == "or-be-to"
[/ANSWER]

[PYTHON]
{program}
assert f({input}) == ??
[/PYTHON]
[ANSWER]
"""
CRUXEVAL_INPUT = """Below is a Python function f and an assertion f(??) == output. Find an input for which f \
returns that output; if several do, give any one. Write the whole assertion with your input between [ANSWER] and \
[/ANSWER], as in the examples, and nothing else.

[PYTHON]
def f(words):
    return sum(1 for w in words if w.endswith("s"))
assert f(??) == 2
[/PYTHON]
[ANSWER]
assert f(["cats", "dog", "hats"]) == 2
[/ANSWER]

[PYTHON]
def f(a, b):
    return a * 10 + b
assert f(??) == 42
[/PYTHON]
[ANSWER]
assert f(4, 2) == 42
[/ANSWER]

[PYTHON]
{program}
assert f(??) == {output}
[/PYTHON]
[ANSWER]
"""
CHAT_SYSTEM = "You are a careful Python programmer. Answer with code only."
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def prompt_form(problem: Problem, protocol: str, chat: bool) -> str:
    """How `problem` is put to a model under `protocol` (training | benchmark) for its kind (chat or not)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; allowed: {list(PROTOCOLS)}")
    if problem.kind == "task":
        return "cruxeval" if protocol == "benchmark" and problem.style == "cruxeval" else "training"
    if problem.kind == "math":
        return "math_chat" if chat else "math_completion"
    if protocol == "benchmark":
        return "completion"
    return "chat" if chat else "completion"


def prompt_of(problem: Problem, form: str) -> tuple[str, list[dict[str, str]], tuple[str, ...]]:
    """(raw prompt, chat messages, stop strings) of `problem` in `form`: exactly one of prompt and messages."""
    if form == "chat":
        return "", chat_messages(problem), ()
    if form == "training":
        return "", student_messages(problem.task), ()
    if form == "cruxeval":
        t = problem.task
        text = (CRUXEVAL_OUTPUT.format(program=t.program, input=t.inputs[0]) if t.task_type == "code_o"
                else CRUXEVAL_INPUT.format(program=t.program, output=t.outputs[0]))
        return text, [], CRUXEVAL_STOP
    if form == "completion":
        return problem.prompt, [], completion_stops(problem)
    if form == "math_chat":
        return "", [{"role": "user", "content": math_question(problem)}], ()
    if form == "math_completion":
        return math_question(problem) + "\n", [], ()
    raise ValueError(f"unknown prompt form {form!r}; allowed: {list(FORMS)}")


def math_question(problem: Problem) -> str:
    """A math problem's question with the instruction to box the final answer."""
    return f"{problem.prompt.rstrip()}\n{MATH_INSTRUCTION}"


def completion_stops(problem: Problem) -> tuple[str, ...]:
    return COMPLETION_STOP if _defines(problem.prompt, problem.entry_point) else DESCRIPTION_STOP


def read_task_answer(problem: Problem, text: str, form: str) -> str | None:
    """The answer text the training verifier judges: the model's own in the training form; in the cruxeval form,
    what the completed assertion says, in the training answer format (None when it holds no assertion).

    As CRUXEval's authors read it: the text before [/ANSWER], its first line with `==` less a leading `assert`; for
    output prediction the expression after `==`, for input prediction the arguments of the call before it."""
    if form != "cruxeval":
        return text
    body = text.split("[/ANSWER]")[0].strip()
    line = next((ln.strip() for ln in body.splitlines() if "==" in ln), "")
    if line.startswith("assert "):
        line = line[len("assert "):].strip()
    answer = _assertion_part(line, problem.task.task_type)
    return None if answer is None else f"<think></think><answer>{answer}</answer>"


def _assertion_part(line: str, task_type: str) -> str | None:
    try:
        node = ast.parse(line, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        node = None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        left, right = node.left, node.comparators[0]
        if task_type == "code_o":
            return ast.get_source_segment(line, right)
        if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "f":
            start = left.func.end_col_offset + 1
            return line[start:left.end_col_offset - 1].strip()
        return None
    if "==" not in line:
        return None
    before, after = line.split("==", 1)
    if task_type == "code_o":
        return after.strip() or None
    before = before.strip()
    if before.startswith("f(") and before.endswith(")"):
        return before[2:-1].strip()
    return None


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
    """Completion mode: the prompt and the completion up to the first stop; where the prompt only describes the
    function, the longest run of the completion's lines that parses (a completion cut by the token budget)."""
    program = problem.prompt + cut_at_stop(text, completion_stops(problem))
    if completion_stops(problem) is COMPLETION_STOP or parses(program):
        return program
    lines = program.splitlines(keepends=True)
    for end in range(len(lines) - 1, 0, -1):
        if parses("".join(lines[:end])):
            return "".join(lines[:end])
    return program


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


def extract_program(problem: Problem, text: str, form: str) -> str:
    """The program a model's answer to a program problem stands for, in `form` chat or completion (see the module
    docstring)."""
    return program_from_chat(problem, text) if form == "chat" else program_from_completion(problem, text)


def parses(program: str) -> bool:
    try:
        ast.parse(program)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
