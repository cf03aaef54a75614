"""The likelihood of a problem's reference answer (populora.evals.likelihood) on the tiny model and the real sandbox:
each value is the Score of the student prompt, the answer prefix and the reference answer, per token; a held-out
problem's task is made in the sandbox first; a batch of eight adapters and the base gives each what it gets alone;
program problems are refused."""

from __future__ import annotations

import pytest

from populora.evals import EvalError, EvalTarget, load_problems
from populora.evals.likelihood import ANSWER_PREFIX, likelihood, reference_answer
from populora.evals.problem import Problem
from populora.pb import inference_pb2
from populora.tasks.prompts import student_messages
from populora.tasks.triplet import Triplet

CODE_O = Triplet(task_type="code_o", program="def f(s):\n    return s[::-1]", inputs=["'abc'"], outputs=["'cba'"])
CODE_I = Triplet(task_type="code_i", program="def f(a, b):\n    return a * 10 + b", inputs=["4, 2"], outputs=["42"])


def _task(pid: str, task: Triplet) -> Problem:
    return Problem(pid, "task", task=task, task_type=task.task_type, style="cruxeval")


def _targets(refs, store):
    return [EvalTarget("base", None)] + [EvalTarget(f"{r.adapter_id}@v{r.version}", r.adapter_id, r.version,
                                                    str(store.path_of(r))) for r in refs]


def test_each_value_is_the_score_of_the_reference_answer_per_token(services, adapters, store):
    problems = [_task("o/0", CODE_O), _task("i/0", CODE_I)]
    assert [reference_answer(p) for p in problems] == ["'cba'", "4, 2"]
    targets = _targets(adapters[:2], store)
    results = likelihood(services, targets, "cruxeval", problems)
    assert [r.label for r in results] == [t.label for t in targets]
    for target, result in zip(targets, results, strict=True):
        assert [p["id"] for p in result.problems] == ["o/0", "i/0"]
        for problem, got in zip(problems, result.problems, strict=True):
            row = inference_pb2.ScoreRow(row_id="x", prefix=ANSWER_PREFIX, continuation=reference_answer(problem),
                                         messages=[inference_pb2.ChatMessage(**m)
                                                   for m in student_messages(problem.task)])
            if target.adapter_id:
                row.adapter.adapter_id, row.adapter.version = target.adapter_id, target.version
            [alone] = services.inference.Score(inference_pb2.ScoreRequest(rows=[row])).scores
            assert got["tokens"] == alone.tokens > 0
            assert got["logprob"] == pytest.approx(alone.logprob, abs=1e-4)
            assert got["value"] == pytest.approx(got["logprob"] / got["tokens"])
        assert result.mean == pytest.approx(sum(p["value"] for p in result.problems) / 2)
        assert result.to_json()["kind"] == "logprob" and result.to_json()["n_problems"] == 2
    assert len({round(r.mean, 4) for r in results}) == len(results), "the versions scored alike: no mix-up seen"


def test_heldout_tasks_are_made_in_the_sandbox_and_a_batch_scores_as_each_alone(services, adapters, store):
    problems = load_problems("heldout", None, 6, 0)
    assert all(p.task is None for p in problems)  # proposals until the sandbox validates them
    targets = _targets(adapters, store)
    together = likelihood(services, targets, "heldout", problems)
    alone = likelihood(services, [targets[4]], "heldout", problems)[0]
    assert [p["id"] for p in alone.problems] == [p.id for p in problems]
    assert [p["value"] for p in together[4].problems] == pytest.approx([p["value"] for p in alone.problems], abs=1e-4)
    assert {p.id.split("/")[2] for p in problems} == {"code_o", "code_i", "code_f"}


def test_program_problems_are_refused():
    program = Problem("h/0", "program", prompt="def g():\n", entry_point="g")
    with pytest.raises(EvalError, match="task problems"):
        reference_answer(program)
