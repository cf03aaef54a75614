"""The published math benchmarks (spec 18): GSM8K, SVAMP and MATH-500 as `math` problems, each a question in words and
a gold answer that the math checker (populora.tasks.mathcheck) compares with the last `\\boxed{...}` of an answer.

Layouts, as published (docs/eval.md):
- GSM8K (`question`, `answer`; the copy's `idx` optional): the gold is the number after the last `####` of the
  worked solution, thousands separators removed.
- SVAMP (`Body`, `Question`, `Answer` a JSON number; `ID` optional), JSON lines or the original `SVAMP.json` (one JSON
  array): the question is the body, ended with a full stop when it has none, then the question, as the benchmark's
  evaluations put them together; a whole-number answer is an integer gold, any other a float gold.
- MATH-500 (`problem`, `answer`; `unique_id`, `subject`, `level` optional): the gold is the answer as written
  (LaTeX).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from populora.evals.datafiles import data_path, file_digest, jsonl_rows, text_field, unique_ids
from populora.evals.problem import BenchmarkError, Loader, LoadSpec, Problem
from populora.tasks.mathcheck import Gold, gold_of

GSM8K_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _gold(value: object, where: str, what: str) -> Gold:
    try:
        return gold_of(value)  # type: ignore[arg-type]
    except ValueError as e:
        raise BenchmarkError(f"{where}: {what} cannot be a gold answer: {e}") from None


def gsm8k_row(row: dict, where: str, n: int) -> Problem:
    question = text_field(row, "question", where)
    solution = text_field(row, "answer", where)
    if "####" not in solution:
        raise BenchmarkError(f"{where}: field 'answer' has no '####' before its final number")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not GSM8K_NUMBER.fullmatch(final):
        raise BenchmarkError(f"{where}: the final answer after '####' is {final[:80]!r}, not a number")
    gold = _gold(int(final) if "." not in final else final, where, "the final answer")
    idx = row.get("idx", n)
    return Problem(id=f"gsm8k/{idx}", kind="math", prompt=question.strip(), gold=gold, where=where)


def svamp_row(row: dict, where: str, n: int) -> Problem:
    body = text_field(row, "Body", where).strip()
    question = text_field(row, "Question", where).strip()
    answer = row.get("Answer")
    if isinstance(answer, bool) or not isinstance(answer, int | float):
        raise BenchmarkError(f"{where}: field 'Answer' must be a number, got "
                             f"{type(answer).__name__ if 'Answer' in row else 'nothing'}")
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    text = f"{body if body.endswith('.') else body + '.'} {question}"
    pid = text_field(row, "ID", where, required=False) or f"svamp/{n}"
    return Problem(id=pid, kind="math", prompt=text, gold=_gold(answer, where, "field 'Answer'"), where=where)


def math500_row(row: dict, where: str, n: int) -> Problem:
    problem = text_field(row, "problem", where)
    answer = text_field(row, "answer", where)
    pid = text_field(row, "unique_id", where, required=False) or f"math500/{n}"
    meta = {k: row[k] for k in ("subject", "level") if k in row}
    return Problem(id=pid, kind="math", prompt=problem.strip(), gold=_gold(answer, where, "field 'answer'"),
                   where=where, meta=meta)


def records(path: Path) -> Iterator[tuple[int, str, dict]]:
    """(line or item number, where, object) of each record: JSON lines, or a file holding one JSON array of objects
    (SVAMP's release)."""
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
    if not head.startswith(b"["):
        for number, row in jsonl_rows(path):
            yield number, f"{path}:{number}", row
        return
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise BenchmarkError(f"{path}: a file that starts with '[' must be one JSON array: {e}") from None
    if not items:
        raise BenchmarkError(f"{path}: no problems in the file (the array is empty)")
    for k, row in enumerate(items, start=1):
        if not isinstance(row, dict):
            raise BenchmarkError(f"{path}: item {k} of the array: expected a JSON object, got {type(row).__name__}")
        yield k, f"{path}: item {k}", row


def load_math(name: str, make_row) -> Loader:
    def load(spec: LoadSpec) -> list[Problem]:
        path = data_path(spec, name)
        digest = file_digest(path)
        out, lines = [], []
        for n, (number, where, row) in enumerate(records(path)):
            out.append(replace(make_row(row, where, n), digest=digest))
            lines.append(number)
        return unique_ids(out, path, lines)

    return load


load_gsm8k = load_math("gsm8k", gsm8k_row)
load_svamp = load_math("svamp", svamp_row)
load_math500 = load_math("math500", math500_row)
