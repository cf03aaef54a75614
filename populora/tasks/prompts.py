"""Teacher and student chat prompts (spec 10, 18). The wording is ours; the tags, blocks and order are the contract
that the parsers in `parsing.py` (and `mathword.py` for math_w) read back."""

from __future__ import annotations

from populora.tasks.mathword import STATEMENT_MAX_CHARS, answer_shown
from populora.tasks.rules import AZR_BANNED_MODULES, CONSTRUCTORS, INTEGRITY_BANNED_MODULES
from populora.tasks.triplet import TASK_TYPES, Triplet

SYSTEM = ("You are a careful Python programmer. Think step by step inside <think>...</think>, then give your "
          "final answer inside <answer>...</answer>.")
_BANNED = ", ".join(sorted(AZR_BANNED_MODULES | INTEGRITY_BANNED_MODULES))
# The chain-of-thought instruction the MATH-style evaluations put after the question (DeepSeekMath's, and Qwen2.5-Math's
# evaluation of GSM8K, SVAMP and MATH-500), so the final answer comes in a box the checker reads. A math_w student
# gets it too: the format trained is the format evaluated (docs/eval.md).
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
_MATH_RULES = (f"Rules: the problem is in words (at most {STATEMENT_MAX_CHARS} characters), gives every number the "
               "solver needs, and holds no code and not the answer; `solution()` takes no arguments, is deterministic "
               "(no random, no time) and returns the answer: an int, a fractions.Fraction, a float or a short math "
               "expression as a string.")
# Short on purpose: every prompt token is paid for at generation and again at training, and a small model follows
# a short rule list no worse than a long one. The sandbox enforces the full rules whatever the prompt says.
_RULES = (f"Rules: one top-level function `f`, deterministic; no imports of {_BANNED}; no dunder names, exec, "
          f"eval, open, getattr or input(). Inputs are Python literals (calls of {', '.join(CONSTRUCTORS)} allowed).")


def chat_token_ids(tokenizer, messages: list[dict[str, str]], chat_template: bool = True) -> list[int]:
    """Token ids of chat messages as the model sees them before it answers: the tokenizer's chat template with the
    generation prompt, or `role: content` lines ending in `assistant: ` without one. The one encoding shared by
    generation and by training on prompts (the warm start), so both condition on the same tokens."""
    if chat_template:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return tokenizer.encode(text, add_special_tokens=False)


def _check_type(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; allowed: {list(TASK_TYPES)}")


def _reference(t: Triplet, i: int) -> str:
    return (f"Task {i}:\n```python\n{t.program}\n```\n```input\n{t.inputs[0]}\n```\n"
            f"```output\n{t.outputs[0]}\n```")


def _teacher_io(task_type: str, references: list[Triplet]) -> str:
    goal = "predict its output" if task_type == "code_o" else "find an input that gives its output"
    refs = "\n\n".join(_reference(t, i + 1) for i, t in enumerate(references)) or "(none yet)"
    return (f"Write a new task: a program and one input. A solver will see the program and must {goal}.\n\n"
            f"Earlier tasks:\n\n{refs}\n\n"
            "Make yours different and harder to reason about. " + _RULES + "\n"
            "Answer inside <answer>...</answer>: ```python\ndef f(...):\n    ...\n``` then ```input\n<the "
            "arguments of one call of f, e.g. [1, 2], 'abc'>\n```")


def _teacher_f(given_program: str, n_inputs: int) -> str:
    return ("Write a program-induction task. A solver will see a message about the function below and half of "
            f"{n_inputs} input/output pairs, and must write the function.\n\n"
            f"```python\n{given_program}\n```\n\n"
            f"Write {n_inputs} different inputs that together show what it does, and a message that hints at its "
            "purpose without giving the code away. " + _RULES + "\n"
            f"Answer inside <answer>...</answer>: {n_inputs} blocks of ```input\n<the arguments of one call of "
            "f>\n``` then ```message\n<one sentence>\n```")


def _math_reference(t: Triplet, i: int) -> str:
    return (f"Problem {i}:\n```problem\n{t.message}\n```\n```python\n{t.program}\n```\n"
            f"Answer: {answer_shown(t.outputs[0])}")


def _teacher_math(references: list[Triplet]) -> str:
    refs = "\n\n".join(_math_reference(t, i + 1) for i, t in enumerate(references)) or "(none yet)"
    return ("Write a new math word problem and a Python program that computes its answer. A solver will see only the "
            "problem and must find the answer.\n\n"
            f"Earlier problems:\n\n{refs}\n\n"
            "Make yours different and harder to solve. " + _MATH_RULES + "\n"
            "Answer inside <answer>...</answer>: ```problem\n<the problem in words>\n``` then ```python\n"
            "def solution():\n    ...\n```")


def teacher_messages(task_type: str, references: list[Triplet], given_program: str | None = None,
                     n_inputs: int = 10) -> list[dict[str, str]]:
    """Chat messages of a teacher proposal (spec 10): K references from the buffer of `task_type` (code_o,
    code_i, math_w), or, for code_f, the `given_program` drawn from the code_f buffer and a request for `n_inputs`
    inputs plus a message (spec 2)."""
    _check_type(task_type)
    if task_type == "math_w":
        user = _teacher_math(references)
    elif task_type == "code_f":
        if not given_program:
            raise ValueError("a code_f teacher prompt needs given_program (one program from the code_f buffer)")
        user = _teacher_f(given_program, n_inputs)
    else:
        user = _teacher_io(task_type, references)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def student_messages(task: Triplet) -> list[dict[str, str]]:
    """Chat messages of a student attempt (spec 2): code_o shows p and i; code_i shows p and o; code_f shows the
    message and the first N/2 (input, output) pairs. math_w (spec 18) shows the problem only, with the instruction to
    box the answer, as the math benchmarks put it (no system line)."""
    _check_type(task.task_type)
    if task.task_type == "math_w":
        return [{"role": "user", "content": f"{task.message.rstrip()}\n{MATH_INSTRUCTION}"}]
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
                f"{pairs}\n\nGive the program in a ```python block inside <answer>...</answer>. One function, "
                "deterministic, no imports.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
