"""What a league request must satisfy before anything is written: ids and text that fit the columns, known runs and
adapters of the right role, rates in [0, 1], steps a JSON number holds. Each check raises InvalidRequest naming the
field; db.py calls them inside its transactions, on the rows it has just read."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

from populora.config import ROLES, TASK_TYPES
from populora.records import Usage
from services.league import engine
from services.league.engine import Conflict, InvalidRequest

# Longest ids the tables hold (services/league/tables.py): a longer one is refused, never truncated.
MAX_LEN = {"run_id": 200, "adapter_id": 128, "match_id": 400, "operator": 16, "mode": 32, "benchmark": 64,
           "label": 200, "problem_id": 400, "error": 2000, "phase": 32}


def check_text(value: str, where: str, kind: str) -> None:
    if len(value) > MAX_LEN[kind]:
        raise InvalidRequest(f"{where}: {len(value)} characters; at most {MAX_LEN[kind]}")


# An id is logged, shown in the dashboard and written into paths and metric labels: printable text only, as the
# sandbox's ids are (services/sandbox/rest.py).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_id(value: str, where: str, kind: str) -> None:
    """An id of bounded length without control characters (NUL, tab, newline, U+0013, DEL, ...)."""
    check_text(value, where, kind)
    if found := CONTROL.search(value):
        raise InvalidRequest(f"{where}: holds the control character U+{ord(found.group()):04X} at position "
                             f"{found.start()}; ids are printable text")


def check_step(step: int, where: str = "step") -> None:
    if not 0 <= step < 2 ** 62:
        raise InvalidRequest(f"{where}: {step} is outside [0, 2^62)")


def check_role(role: str, where: str, allow_empty: bool = False) -> None:
    if role not in ROLES and not (allow_empty and role == ""):
        raise InvalidRequest(f"{where}: '{role}' is not one of {list(ROLES)}" + (" (or empty for all)"
                                                                                 if allow_empty else ""))


def check_specs(specs: Sequence[engine.AdapterSpecIn]) -> None:
    for i, spec in enumerate(specs):
        if not spec.adapter_id:
            raise InvalidRequest(f"adapters[{i}].adapter_id: must not be empty")
        check_id(spec.adapter_id, f"adapters[{i}].adapter_id", "adapter_id")
        check_role(spec.role, f"adapters[{i}].role")
        check_step(spec.created_step, f"adapters[{i}].created_step")
        if not 0 <= spec.rank <= 4096:
            raise InvalidRequest(f"adapters[{i}].rank: {spec.rank} is outside [0, 4096]")
    ids = [s.adapter_id for s in specs]
    if len(set(ids)) != len(ids):
        raise InvalidRequest("adapters: an adapter_id appears twice in one request")


def check_same_run(run_id: str, mode: str, stored_mode: str) -> None:
    """Creating a run again is a no-op in the mode it has (or with the mode left empty). Its config is not compared:
    a resumed run is given more steps or a larger budget, and RecordRun keeps the latest config."""
    if mode and mode != stored_mode:
        raise Conflict(f"run_id: run '{run_id}' exists in mode '{stored_mode}', not '{mode}'; choose another run id "
                       "(creating a run again succeeds only in its own mode, or with the mode left empty)")


def check_registration(run_id: str, specs: Sequence[engine.AdapterSpecIn],
                       existing: dict[str, engine.AdapterRow]) -> None:
    """An adapter id belongs to one run and keeps its role."""
    for i, spec in enumerate(specs):
        old = existing.get(spec.adapter_id)
        if old is not None and (old.run_id != run_id or old.role != spec.role):
            raise Conflict(f"adapters[{i}].adapter_id: '{spec.adapter_id}' is already registered "
                                 f"(run '{old.run_id}', role '{old.role}'); an adapter id names one adapter: choose "
                           "another")


def check_reported_again(run_id: str, again: Sequence[engine.MatchReport], stored: dict[str, tuple]) -> None:
    """A match id reported again names the same match: its run, teacher, student, task type and step as stored
    (`stored`: match id -> those five). Its rhos are those first recorded: a report again changes nothing."""
    for m in again:
        had = stored.get(m.match_id)
        if had is not None and had != (run_id, m.teacher_id, m.student_id, m.task_type, m.step):
            raise Conflict(f"matches: match_id '{m.match_id}' was recorded as run '{had[0]}', teacher '{had[1]}', "
                           f"student '{had[2]}', {had[3]}, step {had[4]}; a match id names one match: choose a new "
                           "one")


def check_matches(run_id: str, reports: Sequence[engine.MatchReport], known: dict[str, engine.AdapterRow]) -> None:
    """Every report names a known teacher and student of this run in those roles, a task type, and rhos in [0, 1]."""
    for i, m in enumerate(reports):
        where = f"matches[{i}]"
        if not m.match_id:
            raise InvalidRequest(f"{where}.match_id: must not be empty")
        check_id(m.match_id, f"{where}.match_id", "match_id")
        check_step(m.step, f"{where}.step")
        if m.task_type not in TASK_TYPES:
            raise InvalidRequest(f"{where}.task_type: '{m.task_type}' is not one of {list(TASK_TYPES)}")
        if not m.rhos:
            raise InvalidRequest(f"{where}.rhos: a match needs at least one rho (one per task)")
        for j, rho in enumerate(m.rhos):
            if not 0.0 <= rho <= 1.0:  # also rejects NaN
                raise InvalidRequest(f"{where}.rhos[{j}]: {rho} is outside [0, 1]")
        for fld, adapter_id, roles in (("teacher_id", m.teacher_id, engine.TEACHER_ROLES),
                                       ("student_id", m.student_id, engine.STUDENT_ROLES)):
            a = known.get(adapter_id)
            if a is None or a.run_id != run_id:
                raise InvalidRequest(f"{where}.{fld}: unknown adapter '{adapter_id}' in run '{run_id}'")
            if a.role not in roles:
                raise InvalidRequest(f"{where}.{fld}: adapter '{adapter_id}' is a {a.role}, not a "
                                     f"{fld.removesuffix('_id')}")
        if m.teacher_id == m.student_id and known[m.teacher_id].role != "both":
            raise InvalidRequest(f"{where}.student_id: a teacher never solves its own problems (spec 1)")


def check_child(run_id: str, child: engine.ChildSpec,
                known: dict[str, engine.AdapterRow]) -> engine.AdapterRow | None:
    """The child's parents and the member it retires exist in this run; returns the child when it was recorded
    already with the same parents and operator (recording it again changes nothing)."""
    if not child.child_id:
        raise InvalidRequest("child_id: must not be empty")
    check_role(child.role, "role")
    if not child.parent_ids:
        raise InvalidRequest("parent_ids: a child needs at least one parent")
    if not child.operator:
        raise InvalidRequest("operator: name the operator that made the child (M1..X4)")
    check_id(child.child_id, "child_id", "adapter_id")
    check_id(child.operator, "operator", "operator")
    check_step(child.step)
    if not 0 <= child.rank <= 4096:
        raise InvalidRequest(f"rank: {child.rank} is outside [0, 4096]")
    if not -(2 ** 63) <= child.seed < 2 ** 63:
        raise InvalidRequest(f"seed: {child.seed} does not fit 64 bits")
    existing = known.get(child.child_id)
    if existing is not None:
        if existing.run_id == run_id and existing.parents == list(child.parent_ids) \
                and existing.operator == child.operator:
            return existing
        raise Conflict(f"child_id: '{child.child_id}' already exists (run '{existing.run_id}', parents "
                       f"{existing.parents}, operator '{existing.operator or 'none'}'); a child id is recorded once: "
                       "choose a new one")
    for i, pid in enumerate(child.parent_ids):
        p = known.get(pid)
        if p is None or p.run_id != run_id:
            raise InvalidRequest(f"parent_ids[{i}]: unknown adapter '{pid}' in run '{run_id}'")
    if child.retire_id:
        r = known.get(child.retire_id)
        if r is None or r.run_id != run_id:
            raise InvalidRequest(f"retire_id: unknown adapter '{child.retire_id}' in run '{run_id}'")
        if r.role != child.role:
            raise InvalidRequest(f"retire_id: '{child.retire_id}' is a {r.role}, the child a {child.role}")
    return None


def check_usage(step: int, usage: Sequence[tuple[str, Usage]]) -> None:
    """(adapter_id, usage) pairs of one step: each adapter once, no negative count."""
    check_step(step)
    seen: set[str] = set()
    for i, (adapter_id, u) in enumerate(usage):
        check_id(adapter_id, f"usage[{i}].adapter_id", "adapter_id")
        if adapter_id in seen:
            raise InvalidRequest(f"usage[{i}].adapter_id: '{adapter_id}' appears twice")
        seen.add(adapter_id)
        for name in ("generated_tokens", "trained_tokens", "sandbox_jobs"):
            if getattr(u, name) < 0:
                raise InvalidRequest(f"usage[{i}].{name}: {getattr(u, name)} is negative")


def _fraction(value: float, where: str) -> None:
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise InvalidRequest(f"{where}: {value} is outside [0, 1]")


def check_evals(run_id: str, rows: Sequence[engine.EvalRow], known: dict[str, engine.AdapterRow]) -> None:
    """Each score names the base ("") or an adapter of this run, a benchmark, a version and step in range, and
    pass rates in [0, 1]; per-problem results, when given, are one per problem with 0 <= passed <= n = samples."""
    seen: set[tuple[str, int, str]] = set()
    for i, row in enumerate(rows):
        where, r = f"scores[{i}]", row.score
        if r.adapter_id:
            check_id(r.adapter_id, f"{where}.adapter_id", "adapter_id")
            a = known.get(r.adapter_id)
            if a is None or a.run_id != run_id:
                raise InvalidRequest(f"{where}.adapter_id: unknown adapter '{r.adapter_id}' in run '{run_id}' (\"\" "
                                     "is the bare base model)")
        if not row.benchmark:
            raise InvalidRequest(f"{where}.benchmark: must not be empty")
        check_id(row.benchmark, f"{where}.benchmark", "benchmark")
        check_text(r.label, f"{where}.label", "label")
        check_step(r.version, f"{where}.version")
        check_step(row.step, f"{where}.step")
        if not 1 <= r.samples <= 100_000:
            raise InvalidRequest(f"{where}.samples: {r.samples} is outside [1, 100000]")
        if not 0 <= r.n_problems <= 1_000_000:
            raise InvalidRequest(f"{where}.n_problems: {r.n_problems} is outside [0, 1000000]")
        _fraction(r.pass_at_1, f"{where}.pass_at_1")
        for k, v in r.pass_at_k.items():
            if not 1 <= int(k) <= r.samples:
                raise InvalidRequest(f"{where}.pass_at_k: k={k} is outside [1, samples={r.samples}]")
            _fraction(v, f"{where}.pass_at_k[{k}]")
        if r.problems and len(r.problems) != r.n_problems:
            raise InvalidRequest(f"{where}.problems: {len(r.problems)} results for n_problems={r.n_problems}")
        ids: set[str] = set()
        for j, p in enumerate(r.problems):
            pw = f"{where}.problems[{j}]"
            if not p.id:
                raise InvalidRequest(f"{pw}.problem_id: must not be empty")
            check_id(p.id, f"{pw}.problem_id", "problem_id")
            check_text(p.error, f"{pw}.error", "error")
            if p.id in ids:
                raise InvalidRequest(f"{pw}.problem_id: '{p.id[:80]}' appears twice")
            ids.add(p.id)
            if p.n != r.samples or not 0 <= p.passed <= p.n:
                raise InvalidRequest(f"{pw}: needs n = samples ({r.samples}) and 0 <= passed <= n "
                                     f"(got passed={p.passed}, n={p.n})")
        key = (r.adapter_id, r.version, row.benchmark)
        if key in seen:
            raise InvalidRequest(f"{where}: adapter '{r.adapter_id}' v{r.version} on '{row.benchmark}' appears twice")
        seen.add(key)


MAX_SUMMARY_CHARS = 1_000_000


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of a float's range")
    return value


def _json_object(text: str, where: str, limit: int) -> dict:
    """One JSON object of at most `limit` characters, finite numbers only (the page reads it as JSON, which has no
    NaN); returns it parsed."""
    if len(text) > limit:
        raise InvalidRequest(f"{where}: {len(text)} characters; at most {limit}")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as e:
        raise InvalidRequest(f"{where}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where}: must be a JSON object, not {type(value).__name__}")
    return value


def check_step_summary(step: int, summary_json: str) -> dict:
    """A step summary is one JSON object of at most MAX_SUMMARY_CHARS characters, finite numbers only; returns it
    parsed."""
    check_step(step)
    return _json_object(summary_json, "summary_json", MAX_SUMMARY_CHARS)


RUN_STATUSES = ("running", "finished", "failed", "stopped")


def check_run(mode: str, status: str) -> None:
    check_text(mode, "mode", "mode")
    if status not in RUN_STATUSES:
        raise InvalidRequest(f"status: '{status}' is not one of {list(RUN_STATUSES)}")


def check_phases(phases: Sequence[engine.PhaseRow]) -> None:
    """Persisted phases: each (step, phase) once, a phase name, seconds and a finish time that are finite and not
    negative, and an error of bounded length."""
    seen: set[tuple[int, str]] = set()
    for i, p in enumerate(phases):
        where = f"phases[{i}]"
        check_step(p.step, f"{where}.step")
        if not p.phase:
            raise InvalidRequest(f"{where}.phase: must not be empty")
        check_id(p.phase, f"{where}.phase", "phase")
        for name in ("seconds", "finished_at"):
            value = getattr(p, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidRequest(f"{where}.{name}: {value} is not a finite number >= 0")
        if p.attempts < 0:
            raise InvalidRequest(f"{where}.attempts: {p.attempts} is negative")
        if p.error is not None:
            check_text(p.error, f"{where}.error", "error")
        if (p.step, p.phase) in seen:
            raise InvalidRequest(f"{where}: phase '{p.phase}' of step {p.step} appears twice")
        seen.add((p.step, p.phase))


MAX_PROBLEMS_CHARS = 64_000_000  # a step of 500 members, 4 proposals each with a long answer: about 25 MB


def check_step_problems(step: int, problems_json: str) -> dict:
    """A step's problems: one JSON object (as a step summary) whose `tasks` and `answers` are lists of objects."""
    check_step(step)
    problems = _json_object(problems_json, "problems_json", MAX_PROBLEMS_CHARS)
    for key in ("tasks", "answers"):
        items = problems.get(key)
        if not isinstance(items, list):
            raise InvalidRequest(f"problems_json.{key}: must be a list, not {type(items).__name__}")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidRequest(f"problems_json.{key}[{i}]: must be an object, not {type(item).__name__}")
    return problems
