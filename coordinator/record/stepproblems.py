"""Each step's problems and answers for the league's dashboard, recorded in the league (RecordStepProblems) as the
step ends.

What the problem explorer and an adapter's samples show of a step: every proposal with its verdict, its task
(program, inputs, outputs, complexity), the student it was matched with and its solve rate, and every answer with
its outcome; in the layout of the league's /v1/runs/{run}/tasks entries, from the step's stored records. Token ids,
prompts and the task buffers stay in the journal: the league keeps what it is sent and never reads the journal.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from populora.pb import league_pb2

if TYPE_CHECKING:
    from coordinator.run.step import StepRecord


def _finite(value: float | int | None) -> float | int | None:
    """JSON has no NaN or infinity: such a figure is shown as missing."""
    return value if value is None or math.isfinite(value) else None


def step_problems(record: StepRecord) -> dict:
    """Step `record.step`'s proposals (`tasks`, valid or not, in the order proposed) and answers."""
    students = {p.match_id: p.student for p in record.matched.pairings}
    verdicts, rho, outcomes = record.validated.verdicts, record.checked.rho, record.checked.outcomes
    tasks = []
    for p in record.proposed.proposals:
        verdict = verdicts.get(p.id)
        task = verdict.task if verdict is not None else None
        tasks.append({
            "id": p.id, "task_type": p.task_type, "teacher_id": p.teacher, "student_id": students.get(p.match_id, ""),
            "validated": verdict is not None, "valid": bool(verdict and verdict.valid),
            "reason": verdict.reason if verdict else "", "detail": verdict.detail if verdict else "",
            "program": task.program if task else "", "inputs": list(task.inputs) if task else [],
            "outputs": list(task.outputs) if task else [], "message": task.message if task else "",
            "complexity": {k: _finite(v) for k, v in (task.complexity or {}).items()} if task else {},
            "rho": _finite(rho.get(p.id)), "text": p.text, "version": p.version})
    answers = [{"id": a.id, "task_id": a.task_id, "student_id": a.student, "text": a.text,
                "outcome": outcomes.get(a.id, "")} for a in record.solved.attempts]
    return {"tasks": tasks, "answers": answers}


def record_step_problems(league, run_id: str, record: StepRecord) -> None:
    """Send a step's problems to the league; a step recorded again (a resumed run) replaces them."""
    league.RecordStepProblems(league_pb2.RecordStepProblemsRequest(
        run_id=run_id, step=record.step, problems_json=json.dumps(step_problems(record), allow_nan=False)))
