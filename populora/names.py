"""What a run, adapter or child id may be: one rule for the REST APIs, the gRPC services, the CLI and the artifact
store, so that a name one edge accepts every other edge can read back, and no name makes a path leave its directory.

The rule: 1 to 100 characters for a run id, 1 to 128 for an adapter or child id, of the ASCII letters, digits, '_',
'.' and '-', starting with a letter or a digit. Ids name directories (`runs/<run_id>`, `adapters/<adapter_id>`),
URL path segments, stream keys and metric labels, so they hold no path separator, no space, no control or non-ASCII
character, and are never `.`, `..` or a name that starts like an option (`-x`) or a hidden file (`.x`).
"""

from __future__ import annotations

import re

MAX_ADAPTER_ID = 128  # the league's adapter columns and the store's directories hold this many
# A run's adapters are named after it, `<run_id>.T0`, `<run_id>.S12c3` (coordinator/phases): a run id leaves room
# in an adapter id for the longest of those suffixes.
MAX_RUN_ID = 100
RULE = "letters A-Z a-z, digits, '_', '.' and '-', starting with a letter or digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NEXT = _FIRST | frozenset("_.-")


def pattern(max_length: int) -> str:
    """The rule as a JSON-schema pattern (what the OpenAPI documents publish)."""
    return rf"^[A-Za-z0-9][A-Za-z0-9_.-]{{0,{max_length - 1}}}$"


RUN_ID_PATTERN = pattern(MAX_RUN_ID)
ADAPTER_ID_PATTERN = pattern(MAX_ADAPTER_ID)


class InvalidName(ValueError):
    """An id that breaks the rule: the message names the field, what is wrong and what is allowed."""


def problem(value: object, max_length: int) -> str:
    """Why `value` is not an id of at most `max_length` characters, or "" when it is one."""
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"{len(value)} characters; at most {max_length}"
    if _NAME.match(value):
        return ""
    for i, ch in enumerate(value):
        if ch in (_NEXT if i else _FIRST):
            continue
        code = ord(ch)
        if code < 0x20 or code == 0x7F:
            return f"holds the control character U+{code:04X} at position {i}"
        if ch in "/\\":
            return f"holds the path separator {ch!r} at position {i}"
        if code > 0x7E:
            return f"holds the non-ASCII character U+{code:04X} at position {i}"
        if i == 0 and ch in "_.-":
            return f"starts with {ch!r}"
        return f"holds {ch!r} at position {i}"
    return ""  # pragma: no cover - every character passed, so the pattern matched


def reason(value: object, max_length: int) -> str:
    """What is wrong with `value` as an id and what the rule is, or "" when it is a valid id."""
    why = problem(value, max_length)
    return f"{why}; an id is 1-{max_length} {RULE}" if why else ""


def _check(value: object, max_length: int, where: str, optional: bool) -> str:
    if optional and value == "":
        return ""
    why = reason(value, max_length)
    if why:
        raise InvalidName(f"{where}: {why}")
    return value  # type: ignore[return-value]


def check_run_id(value: object, where: str = "run_id", optional: bool = False) -> str:
    """`value` if it is a valid run id ("" too with `optional`); else InvalidName naming `where`."""
    return _check(value, MAX_RUN_ID, where, optional)


def check_adapter_id(value: object, where: str = "adapter_id", optional: bool = False) -> str:
    """`value` if it is a valid adapter (or child) id ("" too with `optional`); else InvalidName naming `where`."""
    return _check(value, MAX_ADAPTER_ID, where, optional)


# gRPC request fields that hold ids; an empty one means "none", "any" or "the base" where a method allows it, and
# the method itself refuses it where it needs a name.
ID_FIELDS = {"run_id": MAX_RUN_ID, "adapter_id": MAX_ADAPTER_ID, "child_id": MAX_ADAPTER_ID,
             "parent_ids": MAX_ADAPTER_ID, "retire_id": MAX_ADAPTER_ID, "teacher_id": MAX_ADAPTER_ID,
             "student_id": MAX_ADAPTER_ID}
_PLAN: dict[str, tuple] = {}  # message type -> ((field name, repeated, max length or None for a message), ...)


def _plan(descriptor, visiting: frozenset = frozenset()) -> tuple:
    """The fields of a message type that hold ids, or messages that may (maps and other scalars skipped)."""
    plan = _PLAN.get(descriptor.full_name)
    if plan is not None:
        return plan
    inside = visiting | {descriptor.full_name}
    fields = []
    for f in descriptor.fields:
        repeated = f.is_repeated
        if f.type == f.TYPE_STRING and f.name in ID_FIELDS:
            fields.append((f.name, repeated, ID_FIELDS[f.name]))
        elif (f.type == f.TYPE_MESSAGE and not f.message_type.GetOptions().map_entry
              and f.message_type.full_name not in inside and _plan(f.message_type, inside)):
            fields.append((f.name, repeated, None))
    plan = tuple(fields)
    if not visiting:  # a plan made inside a recursive type may have skipped the way back to it: keep only the top's
        _PLAN[descriptor.full_name] = plan
    return plan


def check_request(message, path: str = "") -> None:
    """Every id field of a gRPC request, nested messages included, against the rule; InvalidName names the first
    that breaks it (`matches[3].teacher_id: ...`)."""
    for name, repeated, max_length in _plan(message.DESCRIPTOR):
        value = getattr(message, name)
        where = f"{path}{name}"
        if max_length is not None:
            for i, v in enumerate(value if repeated else (value,)):
                if v and (len(v) > max_length or not _NAME.match(v)):
                    _check(v, max_length, f"{where}[{i}]" if repeated else where, optional=True)
        elif repeated:
            for i, item in enumerate(value):
                check_request(item, f"{where}[{i}].")
        elif message.HasField(name):
            check_request(value, f"{where}.")
