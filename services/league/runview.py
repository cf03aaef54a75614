"""The coordinator's phase journal as the dashboard reads it: where a run stands (the phases stored, the one running,
a phase that failed) and the problems and answers of a step. The per-step figures are not worked out here: the
coordinator records each step's summary in the league (RecordStepSummary, coordinator/stepsummary.py) and the views
below take those summaries as they are given. It reads the journal by SQL and never imports the coordinator.

What it expects is the JSON the coordinator's journal stores (the typed records of populora/records.py, encoded by
their codec); when that layout changes, this is the one module to port (and tests/league/test_runview.py the one test
to update).

Tables, in the league's own database (embedded: the run's SQLite file; distributed: the shared Postgres schema):
- `coord_runs(run_id, mode, config_yaml, status, created_at, updated_at)`: status is running, finished, failed or
  stopped; times are Unix seconds; `config_yaml` is the run's whole configuration.
- `coord_phases(run_id, step, phase, result, seconds, attempts, finished_at)`: one row per persisted phase, written
  once and never changed (so anything computed from a row may be cached forever); `result` is JSON text. A phase
  that failed for good is a row named `failed:<phase>` holding {"error": text}.

Phase results read, and the keys read from each (anything else is ignored; a key that is missing or of another type
reads as empty, so a changed layout shows as gaps on the page, never as a server error):
- `match`: {"pairings": [{"match_id", "student"}]}
- `propose`: {"proposals": [{"id", "match_id", "task_type", "teacher", "text", "version"}]}
- `validate`: {"verdicts": {proposal_id: {"valid", "reason", "detail",
  "task": {"program", "inputs", "outputs", "message", "complexity": {metric: number}} or null}}}
- `solve`: {"attempts": [{"id", "task_id", "student", "text"}]}
- `check`: {"outcomes": {attempt_id: outcome}, "rho": {proposal_id: the student's mean correctness}}
Steps 1.. run match, propose, validate, solve, check, rate, update in that order, evolve after update on steps
that are a multiple of the config's `evolution.every_k` in `population` mode, account, and eval every `eval.every`.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import sqlalchemy as sa
import yaml

RUNS_TABLE = "coord_runs"
PHASES_TABLE = "coord_phases"
INIT_PHASES = ("warmstart", "init", "seed", "account", "eval")
STEP_PHASES = ("match", "propose", "validate", "solve", "check", "rate", "update", "evolve", "account", "eval")
FAILED_PREFIX = "failed:"
PRIVATE_KEYS = ("population", "versions")  # per-adapter maps: kept for `versions`, not served per step

_runs = sa.table(RUNS_TABLE, sa.column("run_id"), sa.column("mode"), sa.column("config_yaml"), sa.column("status"),
                 sa.column("created_at"), sa.column("updated_at"))
_phases = sa.table(PHASES_TABLE, sa.column("run_id"), sa.column("step"), sa.column("phase"), sa.column("result"),
                   sa.column("seconds"), sa.column("attempts"), sa.column("finished_at"))


# ---- tolerant readers: a value of an unexpected type reads as empty ------------------------------------------------
def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _items(value: Any) -> list[dict]:
    return [x for x in _list(value) if isinstance(x, dict)]


@dataclass(frozen=True)
class PhaseRow:
    """One persisted phase, without its result."""

    step: int
    phase: str
    seconds: float
    attempts: int
    finished_at: float

    @property
    def failed(self) -> bool:
        return self.phase.startswith(FAILED_PREFIX)


@dataclass(frozen=True)
class RunRecord:
    """A run as the coordinator recorded it."""

    run_id: str
    mode: str
    status: str
    config: dict
    created_at: float | None
    updated_at: float | None

    def setting(self, section: str, name: str) -> Any:
        return _dict(self.config.get(section)).get(name)

    def evolves_at(self, step: int) -> bool:
        every = _int(self.setting("evolution", "every_k"))
        mode = self.setting("run", "mode") or self.mode
        return mode == "population" and bool(every) and every > 0 and step % every == 0

    def evaluates_at(self, step: int) -> bool:
        every = _int(self.setting("eval", "every"))
        return bool(every) and every > 0 and step % every == 0

    def expects(self, phase: str, step: int) -> bool:
        """Whether step `step` of this run has phase `phase` (evolve and eval run only every so many steps)."""
        if phase == "evolve":
            return self.evolves_at(step)
        if phase == "eval":
            return self.evaluates_at(step)
        return True

    def store_root(self) -> str:
        return store_root(self.config)


def _compact(phase: str, result: Any) -> dict:
    """The part of a phase result the dashboard reads: token id lists become counts, the buffers are dropped (a
    validate result carries every buffered task; a proposal, its whole prompt)."""
    result = dict(_dict(result))
    result.pop("buffers", None)
    for key in ("proposals", "attempts"):
        if not isinstance(result.get(key), list):
            continue
        items = []
        for item in _items(result[key]):
            item = dict(item)
            item.pop("prompt_token_ids", None)
            ids = item.pop("response_token_ids", None)
            item["response_tokens"] = len(ids) if isinstance(ids, list) else None
            items.append(item)
        result[key] = items
    return result


class Journal:
    """Reads of the phase journal, with what is derived from its rows cached (rows never change once written)."""

    RECHECK_S = 5.0

    def __init__(self, engine: sa.Engine, cache_size: int = 64):
        self.engine = engine
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._results: OrderedDict[tuple, dict] = OrderedDict()  # (run, step, phase) -> compact result, LRU
        self._configs: dict[tuple[str, int], dict] = {}
        self._present = False
        self._checked_at = -math.inf

    # ---- raw reads ------------------------------------------------------------------------------------------------
    def available(self) -> bool:
        """Whether the journal's tables exist in this database (the league also runs without a coordinator)."""
        if self._present:
            return True
        now = time.monotonic()
        if now - self._checked_at >= self.RECHECK_S:
            self._checked_at = now
            names = set(sa.inspect(self.engine).get_table_names())
            self._present = {RUNS_TABLE, PHASES_TABLE} <= names
        return self._present

    def run(self, run_id: str) -> RunRecord | None:
        if not self.available():
            return None
        r = _runs.c
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(r.mode, r.config_yaml, r.status, r.created_at, r.updated_at)
                               .where(r.run_id == run_id)).first()
        if row is None:
            return None
        return RunRecord(run_id, _text(row.mode), _text(row.status), self._config(run_id, _text(row.config_yaml)),
                         _number(row.created_at), _number(row.updated_at))

    def _config(self, run_id: str, text: str) -> dict:
        key = (run_id, hash(text))
        if key not in self._configs:
            self._configs[key] = config_of(text)
        return self._configs[key]

    def rows(self, run_id: str) -> list[PhaseRow]:
        """Every persisted phase of a run (no results), in the order they finished."""
        if not self.available():
            return []
        p = _phases.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(p.step, p.phase, p.seconds, p.attempts, p.finished_at)
                                .where(p.run_id == run_id).order_by(p.finished_at, p.step)).all()
        return [PhaseRow(int(r.step), _text(r.phase), _number(r.seconds) or 0.0, _int(r.attempts) or 0,
                         _number(r.finished_at) or 0.0) for r in rows]

    def results(self, run_id: str, step: int, phases: list[str]) -> dict[str, dict]:
        """The compact results of some phases of one step (those persisted), from the cache or in one query."""
        out: dict[str, dict] = {}
        missing: list[str] = []
        if not phases or not self.available():
            return out
        with self._lock:
            for phase in phases:
                got = self._results.get((run_id, step, phase))
                if got is None:
                    missing.append(phase)
                else:
                    self._results.move_to_end((run_id, step, phase))
                    out[phase] = got
        if missing:
            p = _phases.c
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(p.phase, p.result).where(
                    p.run_id == run_id, p.step == step, p.phase.in_(missing))).all()
            for phase, text in rows:
                try:
                    value = json.loads(text)
                except (TypeError, ValueError):
                    value = {}
                out[phase] = _compact(phase, value)
            with self._lock:
                for phase, value in out.items():
                    self._results[(run_id, step, phase)] = value
                while len(self._results) > self.cache_size:
                    self._results.popitem(last=False)
        return out

    # ---- views ------------------------------------------------------------------------------------------------------
    def overview(self, run_id: str, summaries: list[dict]) -> dict | None:
        """Where the run stands (step and phase in progress, status, the latest step's summary), its compute so far
        and its last evolution events, from the journal's rows and the step `summaries` the league holds (by step);
        None when the journal has no such run."""
        run = self.run(run_id)
        rows = self.rows(run_id)
        if run is None and not rows:
            return None
        steps = public_steps(summaries)
        measured = [s for s in steps if s.get("valid_rate") is not None or s.get("proposals")]
        failures = [r for r in rows if r.failed]
        error = None
        if failures:
            f = failures[-1]
            error = {"step": f.step, "phase": f.phase[len(FAILED_PREFIX):],
                     "error": _text(self.results(run_id, f.step, [f.phase]).get(f.phase, {}).get("error"))}
        events = [{"step": s["step"], **e} for s in steps for e in _items(s.get("evolution"))]
        compute: Counter = Counter()
        for s in steps:
            compute.update({k: v for k, v in _dict(s.get("compute")).items() if _number(v) is not None})
        return {
            "status": run.status if run else "unknown", "mode": run.mode if run else "",
            "steps_planned": _int(run.setting("run", "steps")) if run else None,
            "created_at": run.created_at if run else None, "updated_at": run.updated_at if run else None,
            "progress": _progress(run, rows), "error": error,
            "latest_step": steps[-1] if steps else None,
            "last_measured_step": measured[-1] if measured else None,
            "compute": dict(compute), "evolution": events[-12:], "journal_rows": len(rows),
        }

    def tasks(self, run_id: str, summaries: list[dict], step: int | None, include_invalid: bool) -> dict:
        """The problems proposed at one step (the latest with proposals by default, as the step `summaries` count
        them): program, inputs, outputs, complexity, proposer, matched student and solve rate; invalid proposals too
        when asked, with the reason."""
        with_tasks = [s["step"] for s in summaries if s.get("proposals")]
        if step is None:
            step = with_tasks[-1] if with_tasks else 0
        index = [{"step": s["step"], "proposals": s.get("proposals", 0), "valid": s.get("valid", 0)}
                 for s in summaries if s.get("proposals")]
        got = self.results(run_id, step, ["match", "propose", "validate", "check"])
        students = {_text(m.get("match_id")): _text(m.get("student")) for m in _items(got.get("match", {})
                                                                                         .get("pairings"))}
        verdicts = _dict(got.get("validate", {}).get("verdicts"))
        rho = _dict(got.get("check", {}).get("rho"))
        tasks = []
        for p in _items(got.get("propose", {}).get("proposals")):
            pid = _text(p.get("id"))
            verdict = _dict(verdicts.get(pid))
            valid = verdict.get("valid") is True
            if not valid and not include_invalid:
                continue
            task = _dict(verdict.get("task"))
            tasks.append({
                "id": pid, "step": step, "task_type": _text(p.get("task_type")), "teacher_id": _text(p.get("teacher")),
                "student_id": students.get(_text(p.get("match_id")), ""), "validated": bool(verdict),
                "valid": valid, "reason": _text(verdict.get("reason")), "detail": _text(verdict.get("detail")),
                "program": _text(task.get("program")), "inputs": [_text(x) for x in _list(task.get("inputs"))],
                "outputs": [_text(x) for x in _list(task.get("outputs"))], "message": _text(task.get("message")),
                "complexity": {k: _number(v) for k, v in _dict(task.get("complexity")).items()},
                "rho": _number(rho.get(pid)), "text": _text(p.get("text")), "version": _int(p.get("version"))})
        return {"run_id": run_id, "step": step, "steps": index, "tasks": tasks}

    def samples(self, run_id: str, adapter_id: str, limit: int, first_step: int = 0,
                last_step: int | None = None) -> dict:
        """The adapter's latest proposals (as a teacher) with their verdicts and solve rates, and its latest answers
        (as a student) with their outcomes and the task they answered, newest step first, at most `limit` each."""
        rows = self.rows(run_id)
        steps = sorted({r.step for r in rows if r.step >= max(1, first_step)
                        and (last_step is None or r.step <= last_step)}, reverse=True)
        proposals: list[dict] = []
        answers: list[dict] = []
        for step in steps:
            if len(proposals) >= limit and len(answers) >= limit:
                break
            got = self.results(run_id, step, ["propose", "validate", "solve", "check"])
            verdicts = _dict(got.get("validate", {}).get("verdicts"))
            check = got.get("check", {})
            rho, outcomes = _dict(check.get("rho")), _dict(check.get("outcomes"))
            props = {_text(p.get("id")): p for p in _items(got.get("propose", {}).get("proposals"))}
            for pid, p in props.items():
                if len(proposals) < limit and p.get("teacher") == adapter_id:
                    verdict = _dict(verdicts.get(pid))
                    task = _dict(verdict.get("task"))
                    proposals.append({"step": step, "id": pid, "task_type": _text(p.get("task_type")),
                                      "text": _text(p.get("text")), "validated": bool(verdict),
                                      "valid": verdict.get("valid") is True, "reason": _text(verdict.get("reason")),
                                      "detail": _text(verdict.get("detail")), "program": _text(task.get("program")),
                                      "rho": _number(rho.get(pid)), "version": _int(p.get("version"))})
            for a in _items(got.get("solve", {}).get("attempts")):
                if len(answers) < limit and a.get("student") == adapter_id:
                    task_id = _text(a.get("task_id"))
                    task = _dict(_dict(verdicts.get(task_id)).get("task"))
                    answers.append({"step": step, "id": _text(a.get("id")), "task_id": task_id,
                                    "task_type": _text(props.get(task_id, {}).get("task_type")),
                                    "text": _text(a.get("text")), "outcome": _text(outcomes.get(_text(a.get("id")))),
                                    "program": _text(task.get("program")),
                                    "inputs": [_text(x) for x in _list(task.get("inputs"))],
                                    "outputs": [_text(x) for x in _list(task.get("outputs"))]})
        return {"adapter_id": adapter_id, "proposals": proposals, "answers": answers}


def adapter_versions(summaries: list[dict], adapter_id: str) -> list[dict]:
    """Each version of the adapter the run used, with the step after which it was current, from the step summaries'
    `versions` maps."""
    out: list[dict] = []
    for s in summaries:
        version = _int(_dict(s.get("versions")).get(adapter_id))
        if version is not None and (not out or out[-1]["version"] != version):
            out.append({"version": version, "step": s["step"]})
    return out


def public_steps(summaries: list[dict]) -> list[dict]:
    """The step summaries as the REST API serves them: without the per-adapter version maps (a member's versions
    are `versions`)."""
    return [{k: v for k, v in s.items() if k not in PRIVATE_KEYS} for s in summaries]


def store_root(config: dict) -> str:
    """The artifact store directory a run's config names, with `{output_dir}` filled in as the config does."""
    root = _text(_dict(config.get("store")).get("root"))
    return root.replace("{output_dir}", _text(_dict(config.get("run")).get("output_dir")))


def config_of(text: str) -> dict:
    """A run's config YAML as a dict (empty when it is not a YAML mapping)."""
    try:
        return _dict(yaml.safe_load(text)) if text else {}
    except yaml.YAMLError:
        return {}


def version_path(store_root: str, adapter_id: str, version: int) -> str:
    """Where a version lives in the artifact store (layout `adapters/<adapter_id>/v<version>/`, DESIGN.md)."""
    if not store_root:
        return ""
    return str(PurePosixPath(store_root) / "adapters" / adapter_id / f"v{version}")


def _progress(run: RunRecord | None, rows: list[PhaseRow]) -> dict:
    """The last phase persisted and, while the run is running, the one expected next (in progress)."""
    done = [r for r in rows if not r.failed]
    if not done:
        first = {"step": 0, "phase": INIT_PHASES[0]} if run and run.status == "running" else None
        return {"done": None, "in_progress": first}
    last = max(done, key=lambda r: (r.step, r.finished_at))
    present = {r.phase for r in done if r.step == last.step}
    phases = INIT_PHASES if last.step == 0 else STEP_PHASES
    expected = [p for p in phases if (run.expects(p, last.step) if run is not None else p not in ("evolve", "eval"))]
    pending = [p for p in expected if p not in present]
    planned = _int(run.setting("run", "steps")) if run else None
    if pending:
        nxt = {"step": last.step, "phase": pending[0]}
    elif planned is None or last.step < planned:
        nxt = {"step": last.step + 1, "phase": STEP_PHASES[0]}
    else:
        nxt = None
    running = run is not None and run.status == "running"
    return {"done": {"step": last.step, "phase": last.phase, "finished_at": last.finished_at},
            "in_progress": nxt if running else None}
