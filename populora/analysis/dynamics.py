"""Training dynamics of spec 11: program shapes, coverage, students' oscillation, teachers' behavioural diversity."""

from __future__ import annotations

import ast
import hashlib
import itertools
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)
# Containers whose elements are all literals are literals themselves: `[1, 2, 3]` and `[4, 5]` are one shape.
_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict)


def _parse(program: str) -> ast.AST | None:
    try:
        return ast.parse(program)
    except _UNPARSABLE:
        return None


def _is_literal(node: ast.AST | None) -> bool:
    if node is None:  # a `**spread` in a dict display has no key
        return False
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Dict):
        return all(_is_literal(k) for k in node.keys) and all(_is_literal(v) for v in node.values)
    if isinstance(node, _CONTAINERS):
        return all(_is_literal(e) for e in node.elts)
    return False


def _canonical(node: ast.AST) -> str:
    """The tree as text with every identifier, constant and literal replaced by its node type.

    Fields holding nodes are written with their field name; a field holding something else (a name, a constant's
    value, a flag) is written as `_`, so only that the field is set survives, not what it holds; empty fields are
    left out, which keeps the text the same across Python versions that add new, empty fields (3.12's
    `type_params`). Iterative, so a deeply nested program cannot exhaust the recursion limit.
    """
    out: list[str] = []
    stack: list[ast.AST | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        kind = type(item).__name__
        if isinstance(item, ast.Constant) or _is_literal(item):
            out.append(kind)
            continue
        parts: list[ast.AST | str] = [kind, "("]
        for name, value in ast.iter_fields(item):
            if value is None or value == []:
                continue
            if isinstance(value, ast.AST):
                parts += [name, "=", value, ","]
            elif isinstance(value, list):
                parts += [name, "=["]
                for v in value:
                    parts += [v if isinstance(v, ast.AST) else "_", ","]
                parts += ["],"]
            else:
                parts += [name, "=_,"]
        parts.append(")")
        stack.extend(reversed(parts))
    return "".join(out)


def shape(program: str) -> str | None:
    """The program's shape: a hash of its AST with names, constants and literals replaced by their node type
    (spec 11, Coverage); None when the program does not parse (nested too deeply for the parser included).

    Renaming variables or functions and changing constants keep the shape; changing the structure (another
    statement, operator or call arity) changes it. Attribute and keyword names count as names too, so `s.upper()`
    and `s.lower()` share a shape. The hash is sha256 over the canonical text (first 16 hex digits), stable across
    processes and machines, unlike Python's salted `hash`.
    """
    tree = _parse(program)
    if tree is None:
        return None
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()[:16]


def node_types(program: str) -> frozenset[str]:
    """The AST node types a program uses (operators and contexts included), for coverage (spec 11); empty when it
    does not parse."""
    tree = _parse(program)
    return frozenset() if tree is None else frozenset(type(n).__name__ for n in ast.walk(tree))


@dataclass(frozen=True)
class StepCoverage:
    """Coverage after one step (spec 11): cumulative distinct shapes and node types, and the new-shape rate."""

    step: int
    proposals: int  # valid proposals at this step
    unparsed: int  # of which did not parse (no shape, no node types)
    distinct_shapes: int  # distinct shapes among all valid proposals up to this step
    node_types: int  # AST node types used so far
    new_shapes: int  # distinct shapes first seen at this step
    new_shape_rate: float | None  # new_shapes / proposals; None at a step without proposals


def coverage(steps: Sequence[tuple[int, Sequence[str]]]) -> list[StepCoverage]:
    """Coverage per step from each step's valid proposals, in step order (spec 11, Coverage).

    New-shape rate = shapes first seen at the step / valid proposals at the step: two proposals of one new shape
    add one new shape, so a teacher repeating itself shows as a rate below 1 even early on. A program that does
    not parse has no shape and no node types but still counts as a proposal in the rate's denominator.
    """
    seen_shapes: set[str] = set()
    seen_types: set[str] = set()
    out = []
    previous = None
    for step, programs in steps:
        if previous is not None and step <= previous:
            raise ValueError(f"coverage needs steps in increasing order, got {previous} then {step}")
        previous = step
        before = len(seen_shapes)
        unparsed = 0
        for program in programs:
            s = shape(program)
            if s is None:
                unparsed += 1
                continue
            seen_shapes.add(s)
            seen_types |= node_types(program)
        new = len(seen_shapes) - before
        out.append(StepCoverage(step=step, proposals=len(programs), unparsed=unparsed,
                                distinct_shapes=len(seen_shapes), node_types=len(seen_types), new_shapes=new,
                                new_shape_rate=new / len(programs) if programs else None))
    return out


def sign_changes(rates: Sequence[float | None]) -> int:
    """Sign changes of the first difference of a solve-rate series (spec 11, Oscillation), zero differences skipped.

    Steps without a rate (None) are dropped first. A zero difference has no sign: it neither counts as a change nor
    breaks a run, so rise, flat, fall is one change and rise, flat, rise none.
    """
    r = [x for x in rates if x is not None]
    signs = [1 if b > a else -1 for a, b in itertools.pairwise(r) if b != a]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def oscillation(rates: Sequence[float | None]) -> float | None:
    """A student's oscillation (spec 11): sign changes of the first difference of its per-step solve rate divided
    by (steps - 2), the most changes a series of that length can have; in [0, 1].

    Steps without a rate (None: the student attempted nothing) are dropped and do not count in `steps`. Zero
    differences are skipped (see `sign_changes`), so a saturated student (flat at 0 or 1) scores 0 and a student
    that alternates every step scores 1. None with fewer than three rates, where no change is possible.
    """
    n = sum(1 for x in rates if x is not None)
    return None if n < 3 else sign_changes(rates) / (n - 2)


def jaccard(a: Iterable[Hashable], b: Iterable[Hashable]) -> float | None:
    """|a ∩ b| / |a ∪ b|; None when both are empty (two teachers that proposed nothing are neither alike nor
    different)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else None


@dataclass(frozen=True)
class BehaviouralDiversity:
    """Teachers' shape-set overlap over the last k steps (spec 11) and 1 minus it."""

    overlap: float | None  # mean Jaccard over pairs of active teachers; None when fewer than two are active
    diversity: float | None  # 1 - overlap
    pairs: dict[tuple[str, str], float | None]  # per pair of active teachers (names in sorted order)
    steps: tuple[int, ...]  # the window: the last k steps any teacher has
    active: tuple[str, ...] = ()  # the teachers with a valid proposal in the window, the ones compared


def behavioural_diversity(teachers: Mapping[str, Mapping[int, Iterable[str | None]]],
                          k: int) -> BehaviouralDiversity:
    """Mean pairwise Jaccard overlap of the active teachers' shape sets over the last k steps, and 1 - that (spec 11).

    `teachers[name][step]` holds the shapes (from `shape`) of that teacher's valid proposals at the step; None
    shapes (unparsable programs) are ignored. The window is the k most recent steps present for any teacher, the
    same for all. Only the teachers active in the window (a valid proposal in it) are compared: a teacher retired
    before it, or a child that has proposed nothing yet, has an empty set, and an empty set against any other would
    count as entirely different, which measures who is absent, not how the teachers differ. The overlap is None
    with fewer than two active teachers.
    """
    if k < 1:
        raise ValueError(f"the window must hold at least one step, got k={k}")
    window = tuple(sorted({s for steps in teachers.values() for s in steps})[-k:])
    sets = {name: {x for s in window for x in steps.get(s, ()) if x is not None} for name, steps in teachers.items()}
    active = sorted(name for name, shapes in sets.items() if shapes)
    pairs = {(a, b): jaccard(sets[a], sets[b]) for a, b in itertools.combinations(active, 2)}
    defined = [v for v in pairs.values() if v is not None]
    overlap = sum(defined) / len(defined) if defined else None
    return BehaviouralDiversity(overlap=overlap, diversity=None if overlap is None else 1.0 - overlap, pairs=pairs,
                                steps=window, active=tuple(active))


def split_reference(steps: Sequence[tuple[int, Sequence[str | None]]], k: int, seed: int = 0) -> list[float | None]:
    """The one-policy reference of behavioural diversity: per step, the diversity (over the last k steps) of one
    policy's valid proposals split in two halves at random, as if they were two teachers.

    A population's teachers are worth calling diverse only as far as they differ more than one policy differs from
    itself: one adapter proposing twice draws different shapes too. `steps` lists each step's shapes (the baseline's,
    one adapter's); each step's proposals are shuffled with a seeded generator and dealt alternately to the halves,
    so the halves are the same size and the reference is reproducible. All proposals of one shape give 0, every
    proposal of its own shape 1.
    """
    rng = random.Random(f"populora-split-reference/{seed}")
    halves: dict[str, dict[int, list[str | None]]] = {"a": {}, "b": {}}
    out = []
    for step, shapes in steps:
        dealt = list(shapes)
        rng.shuffle(dealt)
        halves["a"][step], halves["b"][step] = dealt[0::2], dealt[1::2]
        out.append(behavioural_diversity(halves, k).diversity)
    return out


# Behavioural diversity compares the teachers' shapes over this many most recent steps (spec 11's k).
BEHAVIOUR_WINDOW = 3
COMPLEXITY_METRICS = ("ast_depth", "cyclomatic", "lines_of_code")


@dataclass(frozen=True)
class StepPrograms:
    """What one step (>= 1) of a run contributes to its dynamics: the compute charged to the budget after it, its
    valid programs as (teacher, program), each student's solve rate and the mean complexity of its valid programs
    (spec 11's metrics: COMPLEXITY_METRICS)."""

    step: int
    flops: float
    programs: Sequence[tuple[str, str]]
    solve_rates: Mapping[str, float | None]
    complexity: Mapping[str, float | None]


def run_dynamics(steps: Sequence[StepPrograms]) -> dict:
    """A run's dynamics per step, in step order (spec 11): compute, mean complexity of valid proposals, coverage,
    the teachers' behavioural diversity over the last BEHAVIOUR_WINDOW steps (over the teachers active in the window:
    behavioural_diversity); per student its oscillation over the run. A run whose proposals all come from one
    adapter (the baseline) gets the one-policy reference instead (split_reference): its proposals split in two."""
    shapes: dict[str, str | None] = {}

    def shape_of(program: str) -> str | None:
        if program not in shapes:
            shapes[program] = shape(program)
        return shapes[program]

    cov = coverage([(s.step, [p for _, p in s.programs]) for s in steps])
    teachers: dict[str, dict[int, list[str | None]]] = {}
    behaviour = []
    for s in steps:
        for teacher, program in s.programs:
            teachers.setdefault(teacher, {}).setdefault(s.step, []).append(shape_of(program))
        b = behavioural_diversity(teachers, BEHAVIOUR_WINDOW) if len(teachers) > 1 else None
        behaviour.append(None if b is None else b.diversity)
    one_policy = len(teachers) == 1
    reference = (split_reference([(s.step, [shape_of(p) for _, p in s.programs]) for s in steps], BEHAVIOUR_WINDOW)
                 if one_policy else [])
    students = sorted({name for s in steps for name in s.solve_rates})
    return {"steps": [s.step for s in steps], "flops": [s.flops for s in steps],
            "complexity": {k: [s.complexity.get(k) for s in steps] for k in COMPLEXITY_METRICS},
            "coverage": [asdict(c) for c in cov], "behavioural_diversity": behaviour,
            "behavioural_reference": reference,
            "solve_rate": {name: [s.solve_rates.get(name) for s in steps] for name in students},
            "oscillation": {name: oscillation([s.solve_rates.get(name) for s in steps]) for name in students}}
