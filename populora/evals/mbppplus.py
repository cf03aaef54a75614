"""MBPP+'s own rules, as EvalPlus applies them to its MBPP+ release (spec 15; docs/eval.md): the argument types its
JSON cannot hold, rebuilt task by task before any call, and the tasks whose outputs EvalPlus judges by a rule of
their own instead of plain equality.

The task numbers and entry points below are EvalPlus's (`evalplus/data/mbpp.py`, `evalplus/eval/_special_oracle.py`
and the comparison in `evalplus/eval/__init__.py`, v0.3). A file from another source with the same task ids
(`Mbpp/N`) gets the same treatment, as EvalPlus would give it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


# ------------------------------------------------------------------------------------------------ argument types
def _every_arg_a_tuple(args: list) -> list:
    return [tuple(a) for a in args]


def _every_arg_a_list_of_tuples(args: list) -> list:
    return [[tuple(v) for v in a] for a in args]


def _first_arg_a_list_of_tuples(args: list) -> list:
    return [[tuple(v) for v in args[0]], args[1]]


def _second_arg_a_tuple(args: list) -> list:
    return [args[0], tuple(args[1])]


def _first_arg_a_tuple(args: list) -> list:
    return [tuple(args[0]), *args[1:]]


def _every_arg_a_tuple_of_tuples(args: list) -> list:
    return [tuple(tuple(v) for v in a) for a in args]


def _deep_tuple(x: Any) -> Any:
    return tuple(_deep_tuple(v) for v in x) if isinstance(x, list) else x


def _every_list_a_tuple(args: list) -> list:
    return [_deep_tuple(a) for a in args]


def _first_arg_a_tuple_of_its_items(args: list) -> list:
    return [tuple(tuple(v) if isinstance(v, list) else v for v in args[0])]


def _first_arg_a_list_of_sets(args: list) -> list:
    # EvalPlus writes an empty member as `{}`, an empty dict: kept, so the canonical solution sees what it sees there
    return [[set(v) if isinstance(v, list) and v else {} for v in args[0]]]


def _first_arg_values_tuples(args: list) -> list:
    return [{k: tuple(v) for k, v in args[0].items()}, *args[1:]]


def _float_and_complex(args: list) -> list:
    return [float(args[0]), complex(args[1])]


def _complex(args: list) -> list:
    return [complex(args[0])]


def _rules() -> dict[int, Callable[[list], list]]:
    groups: list[tuple[Callable[[list], list], tuple[int, ...]]] = [
        (_every_arg_a_tuple, (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630,
                              726, 740, 744, 809)),
        (_every_arg_a_list_of_tuples, (63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780)),
        (_first_arg_a_list_of_tuples, (75, 413, 444, 753)),
        (_second_arg_a_tuple, (106, 750)),
        (_first_arg_a_tuple, (250, 307, 405, 446, 617, 720, 763, 808)),
        (_every_arg_a_tuple_of_tuples, (259, 401, 445)),
        (_first_arg_a_tuple_of_its_items, (278,)),
        (_every_list_a_tuple, (580, 615, 791)),
        (_first_arg_a_list_of_sets, (115,)),
        (_first_arg_values_tuples, (722,)),
        (_float_and_complex, (124,)),
        (_complex, (252,)),
    ]
    return {n: rule for rule, numbers in groups for n in numbers}


ARGUMENT_TYPES = _rules()
"""MBPP+ task number -> how one call's JSON argument list becomes the arguments EvalPlus passes (tuples, sets and
complex numbers that JSON stores as lists and strings)."""


def task_number(task_id: str) -> int | None:
    """N of an MBPP+ task id `Mbpp/N`; None for any other id (its inputs are taken as they are)."""
    head, _, tail = task_id.partition("/")
    return int(tail) if head == "Mbpp" and tail.isdigit() else None


def typed_inputs(task_id: str, inputs: tuple) -> tuple:
    """A task's argument lists with the types EvalPlus gives them (unchanged for a task with no rule)."""
    rule = ARGUMENT_TYPES.get(task_number(task_id) or -1)
    return inputs if rule is None else tuple(rule(list(args)) for args in inputs)


# ------------------------------------------------------------------------------------------------ judged apart
NOT_NONE = frozenset({"check_str", "text_match_three", "text_starta_endb"})
"""Tasks that return a re.Match or None: EvalPlus keeps only whether the canonical solution's output is not None, and
passes a candidate whose output is not None exactly then (a bool output is taken as that answer itself)."""

SET_EQUAL = frozenset({"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum",
                       "intersection_array", "find_dissimilar", "Diff"})
"""Tasks whose output is compared as a set: set(output) == set(expected)."""


def _surface_area(base_edge: float, height: float) -> float:
    """Mbpp/581's other reading of "height" (the pyramid's, not the faces'), which EvalPlus accepts too."""
    slant = math.sqrt((base_edge / 2) ** 2 + height ** 2)
    return round(base_edge ** 2 + 4 * (base_edge * slant) / 2)


def _digit_distance(a: int, b: int) -> int:
    """Mbpp/558 with the shorter number padded with zeros, which EvalPlus accepts too."""
    left, right = str(a), str(b)
    width = max(len(left), len(right))
    return sum(abs(int(x) - int(y)) for x, y in zip(left.zfill(width), right.zfill(width)))


def exact_match(entry_point: str, out: Any, exp: Any, args: list, atol: float, equal: bool) -> bool:
    """EvalPlus's verdict on one MBPP+ output before its float tolerance, given `equal` (plain equality): the
    task's own oracle where it has one. Values are plain data rebuilt on the host; `args` are the call's."""
    try:
        if entry_point == "are_equivalent":  # Mbpp/164: any answer that returns passes
            return True
        if entry_point == "sum_div":  # Mbpp/295: 0 is accepted as well
            return equal or out == 0
        if entry_point == "surface_Area":  # Mbpp/581
            return equal or abs(out - _surface_area(*args)) <= atol
        if entry_point == "digit_distance_nums":  # Mbpp/558
            return equal or out == _digit_distance(*args)
        if entry_point in SET_EQUAL:
            return set(out) == set(exp)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return False
    return equal
