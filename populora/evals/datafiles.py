"""Reading benchmark data files: where a benchmark's file is found (--data, or its publisher's file in the directory
$POPULORA_BENCHMARKS names), JSON lines (gzipped or not), typed fields checked with the file and line they came from,
unique problem ids, and the HumanEval / EvalPlus row layouts."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

from populora.evals.problem import BenchmarkError, LoadSpec, Problem

BENCHMARKS_ENV = "POPULORA_BENCHMARKS"
# The benchmarks read from a file their authors publish, by the name they publish it under: without --data the file is
# looked for in the directory named by $POPULORA_BENCHMARKS. The project carries no copy of them.
PUBLISHED = {"cruxeval-o": "cruxeval.jsonl", "cruxeval-i": "cruxeval.jsonl", "mbpp-plus": "MbppPlus.jsonl",
             "gsm8k": "math/gsm8k.test.jsonl", "svamp": "math/svamp.test.jsonl", "math500": "math/math500.test.jsonl"}
# where each publisher offers its file
PUBLISHERS = {
    "cruxeval.jsonl": "CRUXEval publishes it as data/cruxeval.jsonl of https://github.com/facebookresearch/cruxeval",
    "MbppPlus.jsonl": "EvalPlus publishes it with the MBPP+ releases, https://github.com/evalplus/mbppplus_release "
                      "(MbppPlus-<version>.jsonl.gz; give that file to --data, or save it unpacked as MbppPlus.jsonl)",
    "math/gsm8k.test.jsonl": "GSM8K publishes its test split as grade_school_math/data/test.jsonl of "
                             "https://github.com/openai/grade-school-math",
    "math/svamp.test.jsonl": "SVAMP is published as SVAMP.json of https://github.com/arkilpatel/SVAMP (one JSON array; "
                             "--data reads it as it is)",
    "math/math500.test.jsonl": "MATH-500 is published as prm800k/math_splits/test.jsonl of https://github.com/openai/prm800k",
}


def published_file(name: str) -> Path:
    """The publisher's file of benchmark `name` (a key of PUBLISHED) in the directory $POPULORA_BENCHMARKS names;
    an error saying which file was looked for where, how to give it, and where its publisher offers it."""
    filename = PUBLISHED[name]
    how = (f"give the file with --data FILE, or set {BENCHMARKS_ENV} to the directory that holds it; "
           f"{PUBLISHERS[filename]}")
    directory = os.environ.get(BENCHMARKS_ENV, "").strip()
    if not directory:
        raise BenchmarkError(f"benchmark {name!r} reads {filename}, and {BENCHMARKS_ENV} is not set: {how}")
    path = Path(directory).expanduser() / filename
    if not path.is_file():
        missing_dir = "" if path.parent.is_dir() else ", a directory that does not exist"
        raise BenchmarkError(f"benchmark {name!r}: {filename} is not in {BENCHMARKS_ENV}={directory} "
                             f"(looked for {path}{missing_dir}): {how}")
    return path


def data_path(spec: LoadSpec, name: str) -> Path:
    """The benchmark's data file: --data when given, else the publisher's file in $POPULORA_BENCHMARKS (PUBLISHED),
    else an error naming --data."""
    if not spec.data and name in PUBLISHED:
        return published_file(name)
    if not spec.data:
        raise BenchmarkError(f"benchmark {name!r} reads its problems from a file: give --data PATH")
    path = Path(spec.data)
    if not path.is_file():
        raise BenchmarkError(f"benchmark {name!r}: data file {path} does not exist")
    return path


def jsonl_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line; a line that is not a JSON object is an error naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            lines = list(fh)
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise BenchmarkError(f"{path}: cannot read it as UTF-8 JSON lines: {e}") from None
    seen = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise BenchmarkError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        seen = True
        yield number, row
    if not seen:
        raise BenchmarkError(f"{path}: no problems in the file (it is empty)")


def file_digest(path: Path) -> str:
    """sha256 of a data file's bytes: what cached results computed from the file are keyed by."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def text_field(row: dict, key: str, where: str, required: bool = True, allow_empty: bool = False) -> str:
    if key not in row:
        if required:
            raise BenchmarkError(f"{where}: missing field {key!r}")
        return ""
    value = row[key]
    if not isinstance(value, str):
        raise BenchmarkError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if required and not allow_empty and not value.strip():
        raise BenchmarkError(f"{where}: field {key!r} is empty")
    return value


def identifier(value: str, key: str, where: str) -> str:
    if not value.isidentifier():
        raise BenchmarkError(f"{where}: field {key!r} = {value!r} is not a Python identifier")
    return value


MAX_PROBLEM_ID = 400  # what the league's evaluation records hold


def unique_ids(problems: list[Problem], path: Path, lines: list[int]) -> list[Problem]:
    """Problem ids are printable, bounded (the league records them with each score) and unique in the file."""
    seen: dict[str, int] = {}
    for p, line in zip(problems, lines):
        if found := re.search(r"[\x00-\x1f\x7f]", p.id):
            raise BenchmarkError(f"{path}:{line}: problem id {p.id!r} holds the control character "
                                 f"U+{ord(found.group()):04X}; ids are printable text")
        if len(p.id) > MAX_PROBLEM_ID:
            raise BenchmarkError(f"{path}:{line}: problem id of {len(p.id)} characters; at most {MAX_PROBLEM_ID}")
        if p.id in seen:
            raise BenchmarkError(f"{path}:{line}: problem id {p.id!r} repeats line {seen[p.id]}")
        seen[p.id] = line
    return problems


def call_inputs(row: dict, key: str, where: str) -> tuple:
    """An EvalPlus input field: a list of argument lists (one call each). An empty object stands for no inputs, as
    the MBPP+ release writes it (Mbpp/793's `plus_input: {}`) and EvalPlus reads it."""
    value = row.get(key)
    if value == {}:
        return ()
    if not isinstance(value, list):
        raise BenchmarkError(f"{where}: field {key!r} must be a list of argument lists, got "
                             f"{type(value).__name__ if key in row else 'nothing'}")
    for k, args in enumerate(value):
        if not isinstance(args, list):
            raise BenchmarkError(f"{where}: {key}[{k}] must be a list of arguments, got {type(args).__name__}")
    return tuple(value)


def atol_field(row: dict, where: str) -> float:
    value = row.get("atol", 0)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise BenchmarkError(f"{where}: field 'atol' must be a number >= 0, got {value!r}")
    return float(value)


def program_rows(path: Path, id_key: str, canonical_key: str) -> list[Problem]:
    """Rows of the HumanEval / EvalPlus layouts: id, prompt, entry_point, and either `base_input` and `plus_input`
    (the EvalPlus release: scored against the canonical solution's outputs, which it then requires) or `test` (code
    defining check(candidate)); an optional canonical solution that continues the prompt. EvalPlus's `contract`
    and MBPP+'s `assertion` are kept in `meta`."""
    out, lines = [], []
    digest = file_digest(path)
    for number, row in jsonl_rows(path):
        where = f"{path}:{number}"
        pid = text_field(row, id_key, where)
        prompt = text_field(row, "prompt", where)
        entry = identifier(text_field(row, "entry_point", where), "entry_point", where)
        meta = {k: row[k] for k in ("contract", "assertion") if isinstance(row.get(k), str)}
        if "base_input" in row or "plus_input" in row:
            out.append(Problem(
                id=pid, kind="evalplus", prompt=prompt, entry_point=entry,
                canonical=text_field(row, canonical_key, where, allow_empty=False),
                base_input=call_inputs(row, "base_input", where), plus_input=call_inputs(row, "plus_input", where),
                atol=atol_field(row, where), where=where, digest=digest, meta=meta))
        elif "test" in row:
            test = text_field(row, "test", where)
            if "def check(" not in test:
                raise BenchmarkError(f"{where}: field 'test' must define check(candidate)")
            out.append(Problem(id=pid, kind="program", prompt=prompt, entry_point=entry, test=test,
                               canonical=text_field(row, canonical_key, where, required=False), where=where,
                               digest=digest, meta=meta))
        else:
            raise BenchmarkError(f"{where}: neither 'base_input' and 'plus_input' (the EvalPlus layout) nor 'test' "
                                 "(code defining check(candidate)): one of them says how the problem is scored")
        lines.append(number)
    return unique_ids(out, path, lines)
