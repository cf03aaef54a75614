"""The seed generator's math word-problem templates (spec 13, 18): a statement in words, `def solution():` computing its
answer, and the one-line working a student writes before boxing it. They serve the warm start of math_w only; the
math held-out sets are the published benchmarks (GSM8K, SVAMP, MATH-500), which no template copies."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

NAMES = ("Ann", "Ben", "Carla", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemal", "Lena", "Mia",
         "Noah", "Omar", "Priya")
THINGS = ("apples", "marbles", "stickers", "books", "pencils", "cards", "shells", "coins", "cookies", "stamps")


@dataclass(frozen=True)
class WordDraft:
    """One drawn problem: the statement, the program (entry `solution`), the working that reaches the answer, and
    the answer as the template computes it (used only to avoid a statement that holds it: the gold is the sandbox's)."""

    statement: str
    program: str
    working: str
    answer: int | Fraction | float


@dataclass(frozen=True)
class WordTemplate:
    name: str
    draw: Callable[[random.Random], WordDraft]
    weight: int = 1  # turns in each round of the generator's round-robin


def _program(*lines: str) -> str:
    return "def solution():\n" + "\n".join(f"    {line}" for line in lines)


def _fraction_program(*lines: str) -> str:
    return "from fractions import Fraction\n\n" + _program(*lines)


def _small_sum(rng: random.Random) -> WordDraft:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    statement = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
    return WordDraft(statement, _program(f"return {a} + {b}"), f"{a} + {b} = {a + b}.", a + b)


def _small_difference(rng: random.Random) -> WordDraft:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a = rng.randint(4, 12)
    b = rng.randint(1, a - 1)
    statement = f"{name} has {a} {thing} and gives {b} away. How many {thing} does {name} have left?"
    return WordDraft(statement, _program(f"return {a} - {b}"), f"{a} - {b} = {a - b}.", a - b)


def _gain_loss(rng: random.Random) -> WordDraft:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b, c = rng.randint(10, 60), rng.randint(2, 30), rng.randint(1, 9)
    statement = (f"{name} has {a} {thing}. A friend gives {name} {b} more, and then {name} loses {c}. "
                 f"How many {thing} does {name} have now?")
    program = _program(f"have = {a}", f"have = have + {b}", f"have = have - {c}", "return have")
    return WordDraft(statement, program, f"{a} + {b} - {c} = {a + b - c}.", a + b - c)


def _boxes(rng: random.Random) -> WordDraft:
    thing = rng.choice(THINGS)
    boxes, each, extra = rng.randint(3, 12), rng.randint(4, 15), rng.randint(1, 9)
    statement = (f"A shop packs {thing} in {boxes} boxes with {each} {thing} in each box, and keeps {extra} more "
                 f"{thing} on the counter. How many {thing} does the shop have in all?")
    program = _program(f"boxes = {boxes}", f"per_box = {each}", f"loose = {extra}", "return boxes * per_box + loose")
    total = boxes * each + extra
    return WordDraft(statement, program, f"{boxes} * {each} + {extra} = {total}.", total)


def _share(rng: random.Random) -> WordDraft:
    kids, pies = rng.randint(2, 9), rng.randint(2, 20)
    if pies % kids == 0:
        pies += 1
    answer = Fraction(pies, kids)
    statement = (f"{pies} pies are shared equally among {kids} children. How many pies does each child get? "
                 "Give the answer as a fraction.")
    program = _fraction_program(f"return Fraction({pies}, {kids})")
    return WordDraft(statement, program, f"{pies} / {kids} = {answer.numerator}/{answer.denominator}.", answer)


def _discount(rng: random.Random) -> WordDraft:
    thing = rng.choice(("jacket", "lamp", "bicycle", "chair", "kettle", "backpack"))
    price, off = rng.randint(12, 240), rng.choice((10, 15, 20, 25, 30, 40))
    answer = price * (100 - off) / 100
    statement = (f"A {thing} costs {price} dollars. It is on sale for {off} percent off. How many dollars does the "
                 f"{thing} cost on sale?")
    program = _program(f"price = {price}", f"off = {off}", "return price * (100 - off) / 100")
    return WordDraft(statement, program, f"{price} * (100 - {off}) / 100 = {answer:g}.", answer)


def _speed(rng: random.Random) -> WordDraft:
    name = rng.choice(NAMES)
    speed, hours = rng.randint(3, 80), rng.randint(2, 9)
    statement = (f"{name} travels at {speed} kilometres per hour for {hours} hours. How many kilometres does "
                 f"{name} travel?")
    program = _program(f"speed = {speed}", f"hours = {hours}", "return speed * hours")
    return WordDraft(statement, program, f"{speed} * {hours} = {speed * hours}.", speed * hours)


def _ages(rng: random.Random) -> WordDraft:
    a, b = rng.sample(NAMES, 2)
    age, gap, years = rng.randint(5, 40), rng.randint(2, 30), rng.randint(2, 15)
    answer = age + gap + years
    statement = (f"{a} is {age} years old. {b} is {gap} years older than {a}. How old will {b} be in {years} "
                 "years?")
    program = _program(f"age_a = {age}", f"age_b = age_a + {gap}", f"return age_b + {years}")
    return WordDraft(statement, program, f"{age} + {gap} + {years} = {answer}.", answer)


def _rectangle(rng: random.Random) -> WordDraft:
    w, h = rng.randint(2, 30), rng.randint(2, 30)
    what = rng.choice(("area", "perimeter"))
    answer = w * h if what == "area" else 2 * (w + h)
    statement = (f"A garden is a rectangle {w} metres wide and {h} metres long. What is its {what}"
                 f"{' in square metres' if what == 'area' else ' in metres'}?")
    expr = "width * length" if what == "area" else "2 * (width + length)"
    program = _program(f"width = {w}", f"length = {h}", f"return {expr}")
    working = f"{w} * {h} = {answer}." if what == "area" else f"2 * ({w} + {h}) = {answer}."
    return WordDraft(statement, program, working, answer)


def _eaten(rng: random.Random) -> WordDraft:
    name = rng.choice(NAMES)
    q = rng.choice((3, 4, 5, 6, 8))
    p = rng.randint(1, q - 1)
    left = 1 - Fraction(p, q)
    statement = (f"{name} eats {p}/{q} of a cake. What fraction of the cake is left? Give the answer as a "
                 "fraction.")
    program = _fraction_program(f"eaten = Fraction({p}, {q})", "return 1 - eaten")
    return WordDraft(statement, program, f"1 - {p}/{q} = {left.numerator}/{left.denominator}.", left)


def _unit_price(rng: random.Random) -> WordDraft:
    thing = rng.choice(THINGS)
    n, each, m = rng.randint(2, 12), rng.randint(2, 25), rng.randint(2, 12)
    statement = (f"{n} {thing} cost {n * each} dollars in all. How many dollars do {m} {thing} cost at the same "
                 "price?")
    program = _program(f"total = {n * each}", f"count = {n}", f"wanted = {m}", "return total // count * wanted")
    return WordDraft(statement, program, f"{n * each} / {n} = {each}, and {each} * {m} = {each * m}.", each * m)


# One-step problems with one-digit numbers weigh three times the others: a small model can learn to solve these, so
# a run's first math_w tasks are solvable at all (as the code types' one-line templates, docs/warmstart.md).
WORD_TEMPLATES: dict[str, WordTemplate] = {t.name: t for t in [
    WordTemplate("small_sum", _small_sum, 3), WordTemplate("small_difference", _small_difference, 3),
    WordTemplate("gain_loss", _gain_loss), WordTemplate("boxes", _boxes), WordTemplate("share", _share),
    WordTemplate("discount", _discount), WordTemplate("speed", _speed), WordTemplate("ages", _ages),
    WordTemplate("rectangle", _rectangle), WordTemplate("eaten", _eaten), WordTemplate("unit_price", _unit_price)]}
