"""The project's own generator of small deterministic seed programs (spec 13): templates over strings, lists, dicts,
loops, recursion and comprehensions (and one-line programs a small model can trace), each with inputs, split once and for all into warm-start and held-out templates.

The generator writes programs and inputs only. Outputs are computed by the verifier: `verify_programs` sends every
program through proposal validation (spec 3, the sandbox), exactly as a teacher's proposal would go, and keeps the
outputs the sandbox reports. Same seed, same programs and inputs, in any process (nothing here hashes strings or
iterates over sets).

    programs = generate_programs(24, seed=0, split="warm")       # never a held-out template
    triplets = verify_programs(programs, "code_o", runner, cfg.tasks)
    eval_set = heldout_tasks(50, seed=1, runner=runner, settings=cfg.tasks)   # never seen by the warm start
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from populora.tasks.jobs import Runner
from populora.tasks.triplet import TASK_TYPES, Triplet
from populora.tasks.verify import Proposal, ValidationSettings, validate_proposals

CONSTRUCTS = ("string", "list", "dict", "loop", "recursion", "comprehension")
SPLITS = ("warm", "heldout")
WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "paper", "glass", "north", "music", "pixel", "ocean",
         "maple", "robot", "candle", "violet", "kiwi", "sun", "bee", "moon", "level", "noon", "radar", "stats")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


class GeneratorError(RuntimeError):
    """A generated program the verifier rejected: a bug in a template (the message names it and the reason)."""


@dataclass(frozen=True)
class SeedProgram:
    """One generated program: its template, source (entry function `f`), argument-list texts to call it with, and a
    one-sentence description (the code_f message and the reasoning line of warm-start examples)."""

    template: str
    program: str
    inputs: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Draft:
    """What a template draws: the program text, a function drawing one input text, and the description."""

    program: str
    draw_input: Callable[[random.Random], str]
    message: str


@dataclass(frozen=True)
class Template:
    name: str
    constructs: frozenset[str]
    draw: Callable[[random.Random], Draft]
    weight: int = 1  # turns in each round of the generator's round-robin


# ---------------------------------------------------------------- random inputs (always restricted literals)

def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _sentence(rng: random.Random, lo: int = 2, hi: int = 4) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _ints(rng: random.Random, lo: int = 3, hi: int = 6, a: int = -5, b: int = 20) -> list[int]:
    return [rng.randint(a, b) for _ in range(rng.randint(lo, hi))]


def _name(rng: random.Random, *names: str) -> str:
    return rng.choice(names)


# ---------------------------------------------------------------- templates
# Each draws its parameters (constants, operators, argument names) from rng, so one template yields many programs.

def _reverse_words(rng: random.Random) -> Draft:
    s = _name(rng, "s", "text", "sentence")
    sep = rng.choice([" ", "-", "_"])
    prog = f"def f({s}):\n    return {sep!r}.join(w[::-1] for w in {s}.split())"
    return Draft(prog, lambda r: repr(_sentence(r)), f"Reverses every word and joins the words with {sep!r}.")


def _shift_letters(rng: random.Random) -> Draft:
    s, k = _name(rng, "s", "word"), rng.randint(1, 5)
    prog = (f"def f({s}):\n    out = ''\n    for c in {s}:\n        out += chr((ord(c) - 97 + {k}) % 26 + 97)\n"
            "    return out")
    return Draft(prog, lambda r: repr(_word(r)), f"Shifts every letter {k} places forward in the alphabet.")


def _count_letters(rng: random.Random) -> Draft:
    s = _name(rng, "s", "text")
    chars = rng.choice(["aeiou", "".join(sorted(rng.sample(LETTERS, 3)))])
    prog = (f"def f({s}):\n    n = 0\n    for c in {s}:\n        if c in {chars!r}:\n            n += 1\n"
            "    return n")
    return Draft(prog, lambda r: repr(_sentence(r)), f"Counts the characters that are in {chars!r}.")


def _alternate_case(rng: random.Random) -> Draft:
    s, m = _name(rng, "s", "word"), rng.randint(2, 3)
    prog = f"def f({s}):\n    return ''.join(c.upper() if i % {m} == 0 else c for i, c in enumerate({s}))"
    return Draft(prog, lambda r: repr(_word(r)), f"Upper-cases every character whose index is a multiple of {m}.")


def _run_length(rng: random.Random) -> Draft:
    s = _name(rng, "s", "text")
    prog = (f"def f({s}):\n    out = []\n    i = 0\n    while i < len({s}):\n        j = i\n"
            f"        while j < len({s}) and {s}[j] == {s}[i]:\n            j += 1\n"
            f"        out.append({s}[i] + str(j - i))\n        i = j\n    return ''.join(out)")

    def draw(r: random.Random) -> str:
        return repr("".join(r.choice("abc") * r.randint(1, 3) for _ in range(r.randint(2, 4))))

    return Draft(prog, draw, "Run-length encodes the string: each run becomes its letter and its length.")


def _palindrome(rng: random.Random) -> Draft:
    s = _name(rng, "s", "word")
    prog = f"def f({s}):\n    t = {s}.lower()\n    return t == t[::-1]"
    return Draft(prog, lambda r: repr(_word(r)), "Tells whether the word reads the same backwards.")


def _running(rng: random.Random) -> Draft:
    xs = _name(rng, "xs", "nums")
    op, what = rng.choice([("total + x", "sum"), ("max(total, x)", "maximum"), ("total * x", "product")])
    init = "1" if what == "product" else f"{xs}[0]" if what == "maximum" else "0"
    prog = (f"def f({xs}):\n    total = {init}\n    out = []\n    for x in {xs}:\n        total = {op}\n"
            "        out.append(total)\n    return out")
    return Draft(prog, lambda r: repr(_ints(r, a=-3, b=9)), f"Returns the running {what} of the list.")


def _filter_map(rng: random.Random) -> Draft:
    xs, k, m = _name(rng, "xs", "nums", "items"), rng.randint(2, 5), rng.randint(2, 3)
    r0 = rng.randint(0, m - 1)
    prog = f"def f({xs}):\n    return [x * {k} for x in {xs} if x % {m} == {r0}]"
    return Draft(prog, lambda r: repr(_ints(r)), f"Multiplies by {k} the numbers whose remainder modulo {m} is {r0}.")


def _differences(rng: random.Random) -> Draft:
    xs = _name(rng, "xs", "nums")
    op, what = rng.choice([("-", "differences"), ("+", "sums")])
    prog = f"def f({xs}):\n    return [{xs}[i + 1] {op} {xs}[i] for i in range(len({xs}) - 1)]"
    return Draft(prog, lambda r: repr(_ints(r)), f"Returns the {what} of neighbouring numbers.")


def _window(rng: random.Random) -> Draft:
    xs, k = _name(rng, "xs", "nums"), rng.randint(2, 3)
    prog = (f"def f({xs}):\n    best = sum({xs}[:{k}])\n    for i in range(1, len({xs}) - {k} + 1):\n"
            f"        best = max(best, sum({xs}[i:i + {k}]))\n    return best")
    return Draft(prog, lambda r: repr(_ints(r, lo=k, hi=6, a=-9, b=9)),
                 f"Returns the largest sum of {k} consecutive numbers.")


def _rotate(rng: random.Random) -> Draft:
    xs, k = _name(rng, "xs", "items"), rng.randint(1, 4)
    prog = f"def f({xs}):\n    k = {k} % len({xs})\n    return {xs}[k:] + {xs}[:k]"
    return Draft(prog, lambda r: repr(_ints(r, lo=2)), f"Rotates the list {k} places to the left.")


def _dedupe(rng: random.Random) -> Draft:
    xs = _name(rng, "xs", "items")
    prog = (f"def f({xs}):\n    seen = []\n    for x in {xs}:\n        if x not in seen:\n            seen.append(x)\n"
            "    return seen")
    return Draft(prog, lambda r: repr(_ints(r, lo=4, hi=7, a=0, b=5)),
                 "Removes repeated items, keeping the first of each.")


def _split_parity(rng: random.Random) -> Draft:
    xs = _name(rng, "xs", "nums")
    prog = (f"def f({xs}):\n    even, odd = [], []\n    for x in {xs}:\n        if x % 2 == 0:\n"
            "            even.append(x)\n        else:\n            odd.append(x)\n    return even, odd")
    return Draft(prog, lambda r: repr(_ints(r)), "Splits the numbers into the even ones and the odd ones.")


def _char_counts(rng: random.Random) -> Draft:
    s = _name(rng, "s", "word")
    prog = (f"def f({s}):\n    counts = {{}}\n    for c in {s}:\n        counts[c] = counts.get(c, 0) + 1\n"
            "    return counts")
    return Draft(prog, lambda r: repr(_word(r)), "Counts how often each character occurs.")


def _group_by_length(rng: random.Random) -> Draft:
    ws = _name(rng, "words", "ws")
    prog = (f"def f({ws}):\n    groups = {{}}\n    for w in {ws}:\n        groups.setdefault(len(w), []).append(w)\n"
            "    return groups")
    return Draft(prog, lambda r: repr(_sentence(r, 2, 5).split()), "Groups the words by their length.")


def _invert(rng: random.Random) -> Draft:
    d = _name(rng, "d", "table")
    prog = f"def f({d}):\n    return {{v: k for k, v in {d}.items()}}"

    def draw(r: random.Random) -> str:
        keys = r.sample(WORDS, r.randint(2, 4))
        return repr({k: r.randint(0, 9) for k in keys})

    return Draft(prog, draw, "Swaps the keys and the values of the dictionary.")


def _word_lengths(rng: random.Random) -> Draft:
    s = _name(rng, "s", "text")
    c = rng.choice("aeo")
    prog, what = rng.choice([(f"def f({s}):\n    return {{w: len(w) for w in {s}.split()}}", "its length"),
                             (f"def f({s}):\n    return {{w: w.count({c!r}) for w in {s}.split()}}",
                              f"how many {c!r} it holds")])
    return Draft(prog, lambda r: repr(_sentence(r)), f"Maps every word to {what}.")


def _keys_above(rng: random.Random) -> Draft:
    d, t = _name(rng, "d", "scores"), rng.randint(2, 6)
    prog = f"def f({d}):\n    return sorted(k for k, v in {d}.items() if v > {t})"

    def draw(r: random.Random) -> str:
        return repr({k: r.randint(0, 9) for k in r.sample(WORDS, r.randint(2, 4))})

    return Draft(prog, draw, f"Lists, sorted, the keys whose value is above {t}.")


def _digit_sum(rng: random.Random) -> Draft:
    n = _name(rng, "n", "x")
    op, what = rng.choice([("+", "sum"), ("*", "product")])
    prog = f"def f({n}):\n    if {n} < 10:\n        return {n}\n    return {n} % 10 {op} f({n} // 10)"
    return Draft(prog, lambda r: str(r.randint(0, 9999)), f"Returns the {what} of the digits, recursively.")


def _fib(rng: random.Random) -> Draft:
    n, a, b = _name(rng, "n", "k"), rng.randint(0, 2), rng.randint(1, 3)
    prog = (f"def f({n}):\n    if {n} == 0:\n        return {a}\n    if {n} == 1:\n        return {b}\n"
            f"    return f({n} - 1) + f({n} - 2)")
    return Draft(prog, lambda r: str(r.randint(0, 12)),
                 f"A Fibonacci-like sequence that starts {a}, {b}; returns term n.")


def _flatten(rng: random.Random) -> Draft:
    xs = _name(rng, "xs", "items")
    prog = (f"def f({xs}):\n    out = []\n    for x in {xs}:\n        if isinstance(x, list):\n"
            "            out.extend(f(x))\n        else:\n            out.append(x)\n    return out")

    def draw(r: random.Random) -> str:
        return repr([r.randint(0, 9) if r.random() < 0.6 else [r.randint(0, 9), [r.randint(0, 9)]]
                     for _ in range(r.randint(2, 4))])

    return Draft(prog, draw, "Flattens nested lists into one list, recursively.")


def _gcd(rng: random.Random) -> Draft:
    a, b = rng.choice([("a", "b"), ("x", "y")])
    prog = f"def f({a}, {b}):\n    if {b} == 0:\n        return {a}\n    return f({b}, {a} % {b})"
    return Draft(prog, lambda r: f"{r.randint(1, 60)}, {r.randint(1, 60)}",
                 "Returns the greatest common divisor, recursively.")


def _reverse_rec(rng: random.Random) -> Draft:
    s = _name(rng, "s", "word")
    prog = f"def f({s}):\n    if not {s}:\n        return ''\n    return f({s}[1:]) + {s}[0]"
    return Draft(prog, lambda r: repr(_word(r)), "Reverses the string, recursively.")


def _collatz(rng: random.Random) -> Draft:
    n, k = _name(rng, "n", "x"), rng.choice([3, 5])
    prog = (f"def f({n}):\n    steps = 0\n    while {n} > 1 and steps < 50:\n"
            f"        {n} = {n} // 2 if {n} % 2 == 0 else {k} * {n} + 1\n        steps += 1\n    return steps")
    return Draft(prog, lambda r: str(r.randint(1, 40)),
                 f"Counts halving or {k}n+1 steps until 1 (at most 50).")


def _divisors(rng: random.Random) -> Draft:
    n = _name(rng, "n", "x")
    prog = f"def f({n}):\n    return [d for d in range(1, {n} + 1) if {n} % d == 0]"
    return Draft(prog, lambda r: str(r.randint(1, 60)), "Lists the divisors of the number.")


def _row_sums(rng: random.Random) -> Draft:
    m = _name(rng, "rows", "grid")
    agg = rng.choice(["sum", "max", "min"])
    prog = f"def f({m}):\n    return [{agg}(row) for row in {m}]"

    def draw(r: random.Random) -> str:
        w = r.randint(2, 3)
        return repr([[r.randint(0, 9) for _ in range(w)] for _ in range(r.randint(2, 3))])

    return Draft(prog, draw, f"Returns the {agg} of every row.")


# One-line programs: a small model can learn to trace these, so the first tasks of a run are solvable at all.
def _string_op(rng: random.Random) -> Draft:
    s = _name(rng, "s", "word")
    body, what = rng.choice([(f"{s}.upper()", "Upper-cases the word."), (f"{s}[::-1]", "Reverses the word."),
                             (f"{s} + {s}", "Repeats the word twice."), (f"{s}[0] + {s}[-1]",
                                                                         "Returns the first and last letters."),
                             (f"len({s})", "Returns the length of the word."),
                             (f"{s}.capitalize()", "Capitalizes the word.")])
    return Draft(f"def f({s}):\n    return {body}", lambda r: repr(_word(r)), what)


def _arithmetic(rng: random.Random) -> Draft:
    x, k = _name(rng, "x", "n"), rng.randint(2, 9)
    body, what = rng.choice([(f"{x} + {k}", f"Adds {k}."), (f"{x} * {k}", f"Multiplies by {k}."),
                             (f"{x} - {k}", f"Subtracts {k}."), (f"{x} * {x}", "Squares the number."),
                             (f"{x} // {k}", f"Divides by {k}, rounding down."), (f"{x} % {k}", f"Remainder by {k}.")])
    return Draft(f"def f({x}):\n    return {body}", lambda r: str(r.randint(0, 30)), what)


def _list_op(rng: random.Random) -> Draft:
    xs = _name(rng, "xs", "nums")
    body, what = rng.choice([(f"sum({xs})", "Sums the list."), (f"max({xs})", "Returns the largest number."),
                             (f"sorted({xs})", "Sorts the list."), (f"{xs}[::-1]", "Reverses the list."),
                             (f"len({xs})", "Counts the items."), (f"{xs}[0] + {xs}[-1]",
                                                                  "Adds the first and last numbers.")])
    return Draft(f"def f({xs}):\n    return {body}", lambda r: repr(_ints(r, 2, 5, 0, 9)), what)


def _dict_op(rng: random.Random) -> Draft:
    d = _name(rng, "d", "table")
    body, what = rng.choice([(f"sorted({d})", "Lists the keys, sorted."), (f"sum({d}.values())", "Sums the values."),
                             (f"len({d})", "Counts the keys."), (f"max({d}.values())", "Returns the largest value.")])

    def draw(r: random.Random) -> str:
        return repr({k: r.randint(0, 9) for k in r.sample(WORDS, r.randint(2, 3))})

    return Draft(f"def f({d}):\n    return {body}", draw, what)


def _count_up(rng: random.Random) -> Draft:
    n, k = _name(rng, "n", "x"), rng.randint(1, 3)
    prog = f"def f({n}):\n    total = 0\n    for i in range({n}):\n        total += {k}\n    return total"
    return Draft(prog, lambda r: str(r.randint(0, 9)), f"Adds {k} once per number below n.")


TEMPLATES: dict[str, Template] = {t.name: t for t in [
    Template("reverse_words", frozenset({"string", "comprehension"}), _reverse_words),
    Template("shift_letters", frozenset({"string", "loop"}), _shift_letters),
    Template("count_letters", frozenset({"string", "loop"}), _count_letters),
    Template("alternate_case", frozenset({"string", "comprehension"}), _alternate_case),
    Template("run_length", frozenset({"string", "loop"}), _run_length),
    Template("palindrome", frozenset({"string"}), _palindrome),
    Template("running", frozenset({"list", "loop"}), _running),
    Template("filter_map", frozenset({"list", "comprehension"}), _filter_map),
    Template("differences", frozenset({"list", "comprehension"}), _differences),
    Template("window", frozenset({"list", "loop"}), _window),
    Template("rotate", frozenset({"list"}), _rotate),
    Template("dedupe", frozenset({"list", "loop"}), _dedupe),
    Template("split_parity", frozenset({"list", "loop"}), _split_parity),
    Template("char_counts", frozenset({"string", "dict", "loop"}), _char_counts),
    Template("group_by_length", frozenset({"dict", "list", "loop"}), _group_by_length),
    Template("invert", frozenset({"dict", "comprehension"}), _invert),
    Template("word_lengths", frozenset({"dict", "string", "comprehension"}), _word_lengths),
    Template("keys_above", frozenset({"dict", "comprehension"}), _keys_above),
    Template("digit_sum", frozenset({"recursion"}), _digit_sum),
    Template("fib", frozenset({"recursion"}), _fib),
    Template("flatten", frozenset({"recursion", "list", "loop"}), _flatten),
    Template("gcd", frozenset({"recursion"}), _gcd),
    Template("reverse_rec", frozenset({"recursion", "string"}), _reverse_rec),
    Template("collatz", frozenset({"loop"}), _collatz),
    Template("divisors", frozenset({"list", "comprehension"}), _divisors),
    Template("row_sums", frozenset({"list", "comprehension"}), _row_sums),
    # three turns each: about 40% of the warm start's programs are one-liners a 135M model can learn to trace
    Template("string_op", frozenset({"string"}), _string_op, weight=3),
    Template("arithmetic", frozenset(), _arithmetic, weight=3),
    Template("list_op", frozenset({"list"}), _list_op, weight=3),
    Template("dict_op", frozenset({"dict"}), _dict_op, weight=3),
    Template("count_up", frozenset({"loop"}), _count_up, weight=3),
]}

# The held-out split (spec 13): templates the warm start never uses, one or more per construct, so an evaluation on
# them measures what self-play taught rather than what the warm start showed.
HELDOUT_TEMPLATES = ("alternate_case", "window", "invert", "gcd", "collatz", "reverse_rec")
WARM_TEMPLATES = tuple(name for name in TEMPLATES if name not in HELDOUT_TEMPLATES)


def templates_of(split: str) -> tuple[str, ...]:
    """The template names of a split: `warm` (the warm start's) or `heldout` (never used by it)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {list(SPLITS)}")
    return WARM_TEMPLATES if split == "warm" else HELDOUT_TEMPLATES


# ---------------------------------------------------------------- programs

def generate_programs(n: int, seed: int, split: str = "warm", n_inputs: int = 1, stream: str = "") -> list[SeedProgram]:
    """`n` programs of the split's templates, round-robin over the templates (each `weight` times) in a seeded order,
    each with `n_inputs` distinct inputs (code_f needs N). Deterministic in (n, seed, split, n_inputs, stream);
    `stream` names an independent sequence (one per task type, say)."""
    if n < 0 or n_inputs < 1:
        raise ValueError(f"need n >= 0 and n_inputs >= 1 (got n={n}, n_inputs={n_inputs})")
    names = [name for name in templates_of(split) for _ in range(TEMPLATES[name].weight)]
    rng = random.Random(f"populora-seedgen/{split}/{seed}/{stream}")
    rng.shuffle(names)
    out = []
    for k in range(n):
        template = TEMPLATES[names[k % len(names)]]
        draft = template.draw(rng)
        out.append(SeedProgram(template.name, draft.program, _distinct_inputs(draft, rng, n_inputs, template.name),
                               draft.message))
    return out


def _distinct_inputs(draft: Draft, rng: random.Random, n: int, name: str) -> tuple[str, ...]:
    inputs: list[str] = []
    for _ in range(50 * n):
        text = draft.draw_input(rng)
        if text not in inputs:
            inputs.append(text)
            if len(inputs) == n:
                return tuple(inputs)
    raise GeneratorError(f"template {name!r} could not draw {n} distinct inputs")


# ---------------------------------------------------------------- the answer formats (what the parsers read back)

def proposal_text(program: SeedProgram, task_type: str) -> str:
    """A teacher's answer in the exact proposal format (spec 3.1-3.2) that proposes `program`: a python block and an
    input block (code_o, code_i), or the inputs and a message block for the given program (code_f)."""
    _check_type(task_type)
    think = f"<think>{program.message}</think>\n"
    if task_type == "code_f":
        blocks = "".join(f"```input\n{i}\n```\n" for i in program.inputs) + f"```message\n{program.message}\n```"
        return f"{think}<answer>\n{blocks}\n</answer>"
    return f"{think}<answer>\n```python\n{program.program}\n```\n```input\n{program.inputs[0]}\n```\n</answer>"


def solution_text(task: Triplet, message: str) -> str:
    """A student's correct answer in the exact attempt format (spec 4): the gold output (code_o), the task's own
    input (code_i) or the program (code_f) inside <answer>, after a short <think>."""
    _check_type(task.task_type)
    if task.task_type == "code_o":
        answer = task.outputs[0]
    elif task.task_type == "code_i":
        answer = task.inputs[0]
    else:
        answer = f"```python\n{task.program}\n```"
    return f"<think>{message}</think>\n<answer>{answer}</answer>"


def _check_type(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; allowed: {list(TASK_TYPES)}")


# ---------------------------------------------------------------- outputs from the verifier

def seed_proposals(programs: list[SeedProgram], task_type: str) -> list[Proposal]:
    """Each program as the teacher proposal that proposes it (what the verifier validates)."""
    return [Proposal(f"seedgen/{k}/{p.template}", task_type, proposal_text(p, task_type),
                     given_program=p.program if task_type == "code_f" else "")
            for k, p in enumerate(programs)]


def verify_programs(programs: list[SeedProgram], task_type: str, runner: Runner,
                    settings: ValidationSettings) -> list[Triplet]:
    """Each program as a validated task (spec 3): its proposal text goes through `validate_proposals` with the
    sandbox `runner`, so its outputs are the ones the verifier computed. A program the verifier rejects is a bug in
    its template: GeneratorError names it."""
    verdicts = validate_proposals(seed_proposals(programs, task_type), settings, runner)
    return triplets_from_verdicts(programs, task_type, [(v.valid, v.reason, v.detail, v.task) for v in verdicts])


def triplets_from_verdicts(programs: list[SeedProgram], task_type: str,
                           verdicts: list[tuple[bool, str, str, Triplet | None]]) -> list[Triplet]:
    """Triplets from the verifier's (valid, reason, detail, task) verdicts on `proposal_text` of each program (the
    same verdicts whether the sandbox ran in this process or behind its service)."""
    if len(verdicts) != len(programs):
        raise GeneratorError(f"{len(programs)} programs but {len(verdicts)} verdicts")
    out = []
    for k, (p, (valid, reason, detail, task)) in enumerate(zip(programs, verdicts, strict=True)):
        if not valid or task is None:
            raise GeneratorError(f"generated program {k} (template {p.template!r}, {task_type}) was rejected by the "
                                 f"verifier: {reason}: {detail}\n{p.program}")
        task.task_id = f"seedgen-{p.template}-{k}"
        task.teacher_id = ""
        out.append(task)
    return out


def heldout_programs(n: int, seed: int, code_f_inputs: int = 10,
                     task_types: tuple[str, ...] = TASK_TYPES) -> list[tuple[str, SeedProgram]]:
    """`n` (task type, program) pairs from the held-out templates only (spec 13), task types in turn, each type from a
    stream of its own, so the first k pairs are the same for any n >= k. code_f programs carry `code_f_inputs`
    inputs. Deterministic in (n, seed, code_f_inputs, task_types)."""
    for tt in task_types:
        _check_type(tt)
    if not task_types:
        raise ValueError("heldout programs need at least one task type")
    counts = {tt: len(range(i, n, len(task_types))) for i, tt in enumerate(task_types)}
    by_type = {tt: generate_programs(count, seed, split="heldout", n_inputs=code_f_inputs if tt == "code_f" else 1,
                                     stream=tt) for tt, count in counts.items()}
    return [(task_types[i % len(task_types)], by_type[task_types[i % len(task_types)]][i // len(task_types)])
            for i in range(n)]


def heldout_tasks(n: int, seed: int, runner: Runner, settings: ValidationSettings,
                  task_types: tuple[str, ...] = TASK_TYPES) -> list[Triplet]:
    """`n` tasks from the held-out templates only (spec 13), task types in turn, outputs computed by the verifier.

    The warm start never uses these templates, so an evaluation on them (population vs baseline) measures what
    training taught. Deterministic in (n, seed, task_types, settings.code_f_inputs)."""
    pairs = heldout_programs(n, seed, settings.code_f_inputs, task_types)
    by_type: dict[str, list[Triplet]] = {}
    for tt in dict.fromkeys(task_types):
        programs = [p for t, p in pairs if t == tt]
        by_type[tt] = verify_programs(programs, tt, runner, settings) if programs else []
    cursor = dict.fromkeys(by_type, 0)
    out = []
    for tt, _ in pairs:
        out.append(by_type[tt][cursor[tt]])
        cursor[tt] += 1
    return out


# ---------------------------------------------------------------- warm-start examples (spec 13)

@dataclass(frozen=True)
class FormatExample:
    """One supervised example of the warm start: the chat prompt the role sees in the run and the answer taught."""

    messages: tuple[tuple[str, str], ...]  # (role, content) turns
    response: str
    task_type: str
    role: str  # "teacher" | "student"


def format_examples(tasks: dict[str, list[tuple[SeedProgram, Triplet]]], n: int, seed: int, n_references: int,
                    teacher_fraction: float, n_inputs: int) -> list[FormatExample]:
    """`n` examples in the exact teacher and student formats, from verified warm-start tasks per task type.

    A `teacher_fraction` of them are proposals (the prompt a teacher gets in the run, with `n_references` other
    tasks of that type as references, or the program for code_f; the answer proposes the example's program); the
    rest are student answers to the task (the verifier's output for code_o, the task's input for code_i, the
    program for code_f). Roles interleave evenly and task types take turns within each role."""
    from populora.tasks.prompts import student_messages, teacher_messages

    types = [tt for tt in TASK_TYPES if tasks.get(tt)]
    if not types:
        raise ValueError("format_examples needs verified tasks of at least one task type")
    if not 0 <= teacher_fraction <= 1:
        raise ValueError(f"teacher_fraction must lie in [0, 1], got {teacher_fraction}")
    rng = random.Random(f"populora-format-examples/{seed}")
    cursor: dict[tuple[str, str], int] = {}
    turn = {"teacher": 0, "student": 0}
    out = []
    for k in range(n):
        role = "teacher" if int((k + 1) * teacher_fraction) > int(k * teacher_fraction) else "student"
        tt = types[turn[role] % len(types)]
        turn[role] += 1
        pool = tasks[tt]
        i = cursor.get((role, tt), 0)
        cursor[(role, tt)] = i + 1
        program, task = pool[i % len(pool)]
        if role == "student":
            msgs, response = student_messages(task), solution_text(task, program.message)
        elif tt == "code_f":
            msgs = teacher_messages(tt, [], given_program=program.program, n_inputs=n_inputs)
            response = proposal_text(program, tt)
        else:
            others = [t for j, (_, t) in enumerate(pool) if j != i % len(pool)]
            refs = rng.sample(others, min(n_references, len(others)))
            msgs, response = teacher_messages(tt, refs), proposal_text(program, tt)
        out.append(FormatExample(tuple((m["role"], m["content"]) for m in msgs), response, tt, role))
    return out
