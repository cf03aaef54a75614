"""A run as the dashboard shows it: where it stands (the phases stored, the one running, a phase that failed) and the
problems and answers of a step, from what the coordinator records in the league's own tables (RecordRun,
RecordPhases, RecordStepProblems: coordinator/run/runprogress.py) with the step summaries (RecordStepSummary). Nothing
here reads another component's tables, and nothing is derived from the coordinator's records: the coordinator sends
each step's problems in the layout served (coordinator/record/stepproblems.py), and the views below filter them.

A value of an unexpected type in a recorded step's problems reads as empty (the page shows gaps, never a server
error). Keys read from a step's problems (`league_step_problems.problems_json`):
- `tasks`: [{"id", "task_type", "teacher_id", "student_id", "validated", "valid", "reason", "detail", "program",
  "inputs", "outputs", "message", "complexity": {metric: number}, "rho", "text", "version"}], every proposal;
- `answers`: [{"id", "task_id", "student_id", "text", "outcome"}], every answer to a valid task.
Steps 1.. run match, propose, validate, solve, check, rate, update in that order, evolve after update on steps
that are a multiple of the config's `evolution.every_k` in `population` mode, account, and eval every `eval.every`.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

import yaml

from populora.analysis.dynamics import StepPrograms, run_dynamics
from services.league.engine import PhaseRow, RunRow

INIT_PHASES = ("warmstart", "init", "seed", "account", "eval")
STEP_PHASES = ("match", "propose", "validate", "solve", "check", "rate", "update", "evolve", "account", "eval")
PROGRAM_RUNS = 8  # runs whose valid programs the dynamics keep in memory
PRIVATE_KEYS = ("population", "versions")  # per-adapter maps: kept for `versions`, not served per step


class ProgressReads(Protocol):
    """The reads of LeagueDB (services/league/db_runs.py) that the views use."""

    def run_record(self, run_id: str) -> RunRow | None: ...
    def phase_rows(self, run_id: str) -> list[PhaseRow]: ...
    def problem_steps(self, run_id: str, first: int = 0, last: int | None = None) -> list[tuple[int, float]]: ...
    def step_problems(self, run_id: str, steps: Sequence[int]) -> dict[int, tuple[float, str]]: ...


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


def _texts(value: Any) -> list[str]:
    return [_text(x) for x in _list(value)]


@dataclass(frozen=True)
class RunRecord:
    """A run as the coordinator recorded it, with its config parsed."""

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


def _task(step: int, t: dict) -> dict:
    """A recorded task in the layout of /v1/runs/{run}/tasks."""
    return {"id": _text(t.get("id")), "step": step, "task_type": _text(t.get("task_type")),
            "teacher_id": _text(t.get("teacher_id")), "student_id": _text(t.get("student_id")),
            "validated": t.get("validated") is True, "valid": t.get("valid") is True, "reason": _text(t.get("reason")),
            "detail": _text(t.get("detail")), "program": _text(t.get("program")), "inputs": _texts(t.get("inputs")),
            "outputs": _texts(t.get("outputs")), "message": _text(t.get("message")),
            "complexity": {k: _number(v) for k, v in _dict(t.get("complexity")).items()},
            "rho": _number(t.get("rho")), "text": _text(t.get("text")), "version": _int(t.get("version"))}


class RunView:
    """The dashboard's views of a run over the league's reads, with each step's parsed problems cached (by when
    they were recorded, so a step recorded again is read again)."""

    def __init__(self, db: ProgressReads, cache_size: int = 64):
        self.db = db
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._problems: OrderedDict[tuple[str, int], tuple[float, dict]] = OrderedDict()  # LRU
        self._configs: dict[tuple[str, int], dict] = {}
        # per run (the last PROGRAM_RUNS asked), per step: (recorded_at, the valid proposals as (teacher, program))
        self._programs: OrderedDict[str, dict[int, tuple[float, list[tuple[str, str]]]]] = OrderedDict()

    # ---- reads --------------------------------------------------------------------------------------------------
    def run(self, run_id: str) -> RunRecord | None:
        row = self.db.run_record(run_id)
        if row is None:
            return None
        return RunRecord(run_id, row.mode, row.status, self._config(run_id, row.config_yaml),
                         _number(row.created_at), _number(row.updated_at))

    def _config(self, run_id: str, text: str) -> dict:
        key = (run_id, hash(text))
        if key not in self._configs:
            self._configs[key] = config_of(text)
        return self._configs[key]

    def problems(self, run_id: str, steps: list[tuple[int, float]]) -> dict[int, dict]:
        """The recorded problems of `steps` ((step, recorded_at), as db.problem_steps gives them), from the cache or
        in one query."""
        out: dict[int, dict] = {}
        missing: list[int] = []
        with self._lock:
            for step, recorded_at in steps:
                got = self._problems.get((run_id, step))
                if got is not None and got[0] == recorded_at:
                    self._problems.move_to_end((run_id, step))
                    out[step] = got[1]
                else:
                    missing.append(step)
        fresh = {}
        for step, (recorded_at, text) in self.db.step_problems(run_id, missing).items():
            try:
                value = _dict(json.loads(text))
            except (TypeError, ValueError):
                value = {}
            fresh[step] = (recorded_at, value)
            out[step] = value
        with self._lock:
            for step, entry in fresh.items():
                self._problems[(run_id, step)] = entry
            while len(self._problems) > self.cache_size:
                self._problems.popitem(last=False)
        return out

    # ---- views ------------------------------------------------------------------------------------------------------
    def overview(self, run_id: str, summaries: list[dict]) -> dict:
        """Where the run stands (step and phase in progress, status, the latest step's summary), its compute so far
        and its last evolution events, from the run and phases the coordinator recorded and the step `summaries`
        (by step); status `unknown` when the coordinator never recorded the run."""
        run = self.run(run_id)
        rows = self.db.phase_rows(run_id)
        steps = public_steps(summaries)
        measured = [s for s in steps if s.get("valid_rate") is not None or s.get("proposals")]
        failures = [r for r in rows if r.failed]
        error = None
        if failures:
            f = failures[-1]
            error = {"step": f.step, "phase": f.phase, "error": f.error or ""}
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
        recorded = self.db.problem_steps(run_id, step, step)
        got = self.problems(run_id, recorded).get(step, {})
        tasks = [_task(step, t) for t in _items(got.get("tasks"))]
        return {"run_id": run_id, "step": step, "steps": index,
                "tasks": [t for t in tasks if t["valid"] or include_invalid]}

    def samples(self, run_id: str, adapter_id: str, limit: int, first_step: int = 0,
                last_step: int | None = None) -> dict:
        """The adapter's latest proposals (as a teacher) with their verdicts and solve rates, and its latest answers
        (as a student) with their outcomes and the task they answered, newest step first, at most `limit` each."""
        steps = self.db.problem_steps(run_id, max(1, first_step), last_step)
        proposals: list[dict] = []
        answers: list[dict] = []
        for at in range(0, len(steps), 8):  # newest first, a few steps per query
            if len(proposals) >= limit and len(answers) >= limit:
                break
            chunk = steps[at:at + 8]
            got = self.problems(run_id, chunk)
            for step, _ in chunk:
                problems = got.get(step, {})
                tasks = {t["id"]: t for t in (_task(step, t) for t in _items(problems.get("tasks")))}
                for t in tasks.values():
                    if len(proposals) < limit and t["teacher_id"] == adapter_id:
                        proposals.append({k: t[k] for k in ("step", "id", "task_type", "text", "validated", "valid",
                                                             "reason", "detail", "program", "rho", "version")})
                for a in _items(problems.get("answers")):
                    if len(answers) < limit and a.get("student_id") == adapter_id:
                        task = tasks.get(_text(a.get("task_id")), {})
                        answers.append({"step": step, "id": _text(a.get("id")), "task_id": _text(a.get("task_id")),
                                        "task_type": task.get("task_type", ""), "text": _text(a.get("text")),
                                        "outcome": _text(a.get("outcome")), "program": task.get("program", ""),
                                        "inputs": task.get("inputs", []), "outputs": task.get("outputs", [])})
        return {"adapter_id": adapter_id, "proposals": proposals, "answers": answers}

    def valid_programs(self, run_id: str) -> dict[int, list[tuple[str, str]]]:
        """Every step's valid proposals as (teacher, program), kept between calls: a step is read again only when
        it was recorded again, so a long run's dynamics read only its new steps' problems."""
        recorded = self.db.problem_steps(run_id, 1)
        with self._lock:
            known = dict(self._programs.get(run_id, {}))
        stale = [step for step, at in recorded if known.get(step, (None,))[0] != at]
        for i in range(0, len(stale), 16):  # a few steps' problems per query
            for step, (at, text) in self.db.step_problems(run_id, stale[i:i + 16]).items():
                try:
                    tasks = _items(_dict(json.loads(text)).get("tasks"))
                except (TypeError, ValueError):
                    tasks = []
                known[step] = (at, [(_text(t.get("teacher_id")), _text(t.get("program")))
                                    for t in tasks if t.get("valid") is True and _text(t.get("program"))])
        current = {step for step, _ in recorded}
        known = {step: v for step, v in known.items() if step in current}
        with self._lock:
            self._programs[run_id] = known
            self._programs.move_to_end(run_id)
            while len(self._programs) > PROGRAM_RUNS:
                self._programs.popitem(last=False)
        return {step: programs for step, (_, programs) in known.items()}

    def dynamics(self, run_id: str, summaries: list[dict]) -> dict:
        """The run's dynamics against the compute charged to its budget (spec 11, 14): per step the mean
        complexity of valid proposals, coverage (distinct program shapes and AST node types so far), the teachers'
        behavioural diversity, each student's solve rate (with its oscillation over the run) and the members'
        weight diversity, from the step summaries and the problems recorded. A step recorded without a figure
        (a run from before it was recorded) has None there."""
        programs = self.valid_programs(run_id)
        flops = 0.0
        steps: list[StepPrograms] = []
        weights: list[dict] = []
        for s in sorted(summaries, key=lambda s: s["step"]):
            flops += _number(_dict(s.get("compute")).get("budget_flops")) or 0.0
            if s["step"] < 1:
                continue
            d = _dict(s.get("dynamics"))
            rates = {_text(k): _number(v) for k, v in _dict(d.get("solve_rates")).items()}
            complexity = {k: _number(v) for k, v in _dict(d.get("complexity")).items()}
            steps.append(StepPrograms(step=s["step"], flops=flops, programs=programs.get(s["step"], []),
                                      solve_rates=rates, complexity=complexity))
            w = _dict(d.get("weight_diversity"))
            if w:
                weights.append({"step": s["step"], "flops": flops, "cosine": _number(w.get("cosine")),
                                "distance": _number(w.get("distance"))})
        return {"run_id": run_id, **run_dynamics(steps), "weight_diversity": weights}

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
