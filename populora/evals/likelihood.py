"""A continuous score beside pass@1: the log-probability of each problem's reference answer under a model, in the
prompt the students trained on, from a prompt pass without generation (the inference service's Score).

pass@1 of a model at its floor is a column of zeros: it cannot tell two versions apart, nor a version that has come
closer to the answers from one that has not. The likelihood can: for every task problem (CRUXEval-O and -I, the
held-out tasks) the reference answer (CRUXEval-O's output, CRUXEval-I's input, a held-out task's gold output, input or
program) is scored as the continuation of the training protocol's student prompt (populora.tasks.prompts.
student_messages, through the chat template, as training generates) after `ANSWER_PREFIX`, the empty reasoning and
the opening tag of the answer format the students were trained on (a student writes `<think>...</think>` then
`<answer>...</answer>`: populora.tasks.seedgen.solution_text). A problem's value is the mean log-probability per token
of its answer (the sum over its tokens over their count), so answers of different lengths weigh alike; a version's
score on a benchmark is the mean over its problems. Higher is better; 0 is certainty.

    results = likelihood(services, targets, "cruxeval-o", problems)
    results[0].to_json()  # {"label", "adapter_id", "version", "benchmark", "kind": "logprob", "n_problems", "mean",
                          #  "problems": [{"id", "logprob", "tokens", "prompt_tokens", "value"}]}

A code_i problem may have other right inputs than the reference: its likelihood is that of one right answer, a lower
bound of the model's belief in a right one. Every row of every target goes to inference in one Score call per batch
the backend's limits allow (rows of all targets of a problem side by side, so each batch is mixed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from populora.evals.harness import EvalError, EvalTarget, check_targets, materialise
from populora.evals.problem import Problem
from populora.pb import common_pb2, inference_pb2
from populora.tasks.prompts import student_messages

ANSWER_PREFIX = "<think></think>\n<answer>"  # conditioned on, not scored: the answer format up to the answer itself
KIND = "logprob"


def reference_answer(problem: Problem) -> str:
    """The answer a task problem's student should write inside <answer>: the gold output (code_o), the task's own
    input (code_i) or the program in a python block (code_f), as the warm start teaches it."""
    if problem.kind != "task" or problem.task is None:
        raise EvalError(f"problem {problem.id}: the likelihood scores task problems (CRUXEval, heldout) whose task is "
                        "made; this one is a program problem or has no task yet")
    t = problem.task
    if t.task_type == "code_o":
        return t.outputs[0]
    if t.task_type == "code_i":
        return t.inputs[0]
    return f"```python\n{t.program}\n```"


def score_row(problem: Problem, target: EvalTarget, row_id: str) -> inference_pb2.ScoreRow:
    """The Score row of one problem under one target: the student prompt, the answer prefix, the reference answer."""
    row = inference_pb2.ScoreRow(row_id=row_id, prefix=ANSWER_PREFIX, continuation=reference_answer(problem))
    if target.adapter_id is not None:
        row.adapter.CopyFrom(common_pb2.AdapterRef(adapter_id=target.adapter_id, version=target.version))
    row.messages.extend(inference_pb2.ChatMessage(role=m["role"], content=m["content"])
                        for m in student_messages(problem.task))
    return row


@dataclass(frozen=True)
class LikelihoodResult:
    """One target's likelihood of the reference answers of one benchmark's problems."""

    label: str
    adapter_id: str | None
    version: int
    benchmark: str
    # [{"id", "logprob" (the sum), "tokens" (the answer's), "prompt_tokens" (before it), "value" (per token)}]
    problems: list[dict] = field(default_factory=list)
    run_id: str = ""

    @property
    def mean(self) -> float | None:
        return mean(p["value"] for p in self.problems) if self.problems else None

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "label": self.label, "adapter_id": self.adapter_id, "version": self.version,
                "benchmark": self.benchmark, "kind": KIND, "n_problems": len(self.problems), "mean": self.mean,
                "problems": list(self.problems)}

    @classmethod
    def from_json(cls, d: dict) -> LikelihoodResult:
        return cls(d["label"], d.get("adapter_id"), int(d.get("version", 0)), d["benchmark"], list(d["problems"]),
                   d.get("run_id", ""))


def _batches(rows: list[inference_pb2.ScoreRow], max_rows: int, max_adapters: int) -> list[list]:
    """Consecutive runs of rows within the backend's limits (rows, distinct adapter versions)."""
    out: list[list[inference_pb2.ScoreRow]] = []
    adapters: set = set()
    for r in rows:
        key = (r.adapter.adapter_id, r.adapter.version) if r.adapter.adapter_id else None
        grows = key is not None and key not in adapters
        if out and len(out[-1]) < max_rows and len(adapters) + grows <= max_adapters:
            out[-1].append(r)
        else:
            out.append([r])
            adapters = set()
        if key is not None:
            adapters.add(key)
    return out


def likelihood(services: Any, targets: list[EvalTarget], benchmark: str, problems: list[Problem], *,
               cache=None, progress: Callable[[int, int], None] | None = None, run_id: str = ""
               ) -> list[LikelihoodResult]:
    """Every target's likelihood of every problem's reference answer (module docstring), one result per target in
    order. `problems` are task problems (a held-out problem's task is made in the sandbox first, as the harness makes
    it); problems set apart by their benchmark are left out, as pass@1 leaves them out. `progress(rows done, rows)`
    follows the Score calls."""
    check_targets(services, targets)
    problems = materialise(services, [p for p in problems if not p.set_apart], cache)
    rows, where = [], {}
    for p_idx, problem in enumerate(problems):
        for t_idx, target in enumerate(targets):
            rid = f"{t_idx}/{p_idx}"
            where[rid] = (t_idx, p_idx)
            rows.append(score_row(problem, target, rid))
    info = services.inference.ListAdapters(inference_pb2.ListAdaptersRequest())
    got: dict[str, inference_pb2.RowScore] = {}
    done = 0
    if progress is not None:
        progress(0, len(rows))
    for batch in _batches(rows, info.max_batch or 10**9, info.max_resident or 10**9):
        for s in services.inference.Score(inference_pb2.ScoreRequest(rows=batch)).scores:
            got[s.row_id] = s
        done += len(batch)
        if progress is not None:
            progress(done, len(rows))
    missing = [r.row_id for r in rows if r.row_id not in got]
    if missing:
        raise RuntimeError(f"inference scored no result for {len(missing)} row(s), e.g. {missing[:3]}")
    per: dict[int, list[dict]] = {t: [] for t in range(len(targets))}
    for r in rows:
        t_idx, p_idx = where[r.row_id]
        s = got[r.row_id]
        per[t_idx].append({"id": problems[p_idx].id, "logprob": s.logprob, "tokens": s.tokens,
                           "prompt_tokens": s.prompt_tokens, "value": s.logprob / s.tokens})
    return [LikelihoodResult(t.label, t.adapter_id, t.version, benchmark, per[i], run_id)
            for i, t in enumerate(targets)]

