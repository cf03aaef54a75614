"""The games of a step (spec 2-7): matches, the teachers' proposals, validation, the students' attempts, their
checks and the ratings."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from coordinator.run.phases.generation import chat_messages, generate, sampling_params
from coordinator.run.phases.proposals import Slot, sandbox_verdicts, write_proposals
from coordinator.run.phases.run import Run
from populora.pb import inference_pb2, league_pb2, sandbox_pb2
from populora.records import (
    Attempt,
    Checked,
    Matched,
    Pairing,
    Population,
    Proposal,
    Proposed,
    Rated,
    Rating,
    Solved,
    Validated,
)
from populora.tasks import BufferSet, mean_rho, student_messages


def match(run: Run, step: int) -> Matched:
    """League PFSP: each teacher draws one student per task type (spec 7)."""
    resp = run.services.league.Matchmake(league_pb2.MatchmakeRequest(
        run_id=run.run_id, step=step, task_types=run.cfg.tasks.task_types, seed=run.seed("match", step)))
    if not resp.pairings:
        raise RuntimeError(f"run {run.run_id} step {step}: the league made no pairings (no active adapters?)")
    return Matched([Pairing(p.match_id, p.teacher_id, p.student_id, p.task_type, p.p_student)
                    for p in resp.pairings])


def propose_slots(run: Run, matched: Matched, population: Population) -> list[Slot]:
    """The proposals a step asks for: proposals_per_teacher per match, each by the match's teacher."""
    return [Slot(f"{m.match_id}/p{k}", m.task_type, m.teacher, population[m.teacher].version, m.match_id)
            for m in matched.pairings for k in range(run.cfg.tasks.proposals_per_teacher)]


def propose(run: Run, step: int, matched: Matched, population: Population, buffers: BufferSet) -> Proposed:
    """Every teacher's proposals for every match, in one multi-LoRA batch (spec 2, 10)."""
    return Proposed(write_proposals(run, buffers, propose_slots(run, matched, population), step, "propose"))


def validate(run: Run, proposed: Proposed, buffers: BufferSet) -> Validated:
    """Sandbox validation of every proposal (spec 3); valid ones enter their type's buffer (spec 10)."""
    verdicts, jobs, cpu = sandbox_verdicts(run, proposed.proposals)
    buffers = BufferSet.from_json(buffers.to_json())  # the step's input stays as it was
    for p in proposed.proposals:
        v = verdicts[p.id]
        if v.valid:
            v = verdicts[p.id] = replace(v, task=replace(v.task, teacher_id=p.teacher, task_id=p.id))
            buffers.add(v.task)
    return Validated(verdicts, buffers, jobs, cpu)


def solve(run: Run, step: int, matched: Matched, proposed: Proposed, validated: Validated,
          population: Population) -> Solved:
    """Every matched student x valid task x n samples, in one multi-LoRA batch (spec 2)."""
    requests, tasks = student_requests(run, step, matched, proposed, validated, population)
    gen = generate(run, requests, "solve")
    overlapped = run.cfg.loop.max_staleness > 0  # the behaviour version is recorded (spec 16)
    attempts = []
    for p, rid, student in tasks:
        g = gen[rid]
        version = population[student].version if overlapped else 0
        for k, c in enumerate(g.completions):
            attempts.append(Attempt(id=f"{p.id}/a{k}", task_id=p.id, student=student, match_id=p.match_id,
                                    text=c.text, prompt_token_ids=g.prompt_token_ids,
                                    response_token_ids=list(c.token_ids), finish_reason=c.finish_reason,
                                    version=version, logprobs=list(c.logprobs),
                                    truncated_fraction=c.truncated_fraction))
    return Solved(attempts)


def student_requests(run: Run, step: int, matched: Matched, proposed: Proposed, validated: Validated,
                     population: Population
                     ) -> tuple[list[inference_pb2.GenerationRequest], list[tuple[Proposal, str, str]]]:
    """The generation request of every valid task for its match's student (n samples each), and per request the
    proposal, the request id and the student."""
    student_of = {m.match_id: m.student for m in matched.pairings}
    n = run.cfg.tasks.n_samples
    requests, tasks = [], []
    for p in proposed.proposals:
        v = validated.verdicts[p.id]
        if not v.valid:
            continue
        student = student_of[p.match_id]
        rid = f"{p.id}/solve"
        requests.append(inference_pb2.GenerationRequest(
            request_id=rid, adapter=run.ref(student, population[student].version),
            messages=chat_messages(student_messages(v.task)),
            sampling=sampling_params(run, n, run.cfg.generation.max_new_tokens, run.seed("gen", step, rid))))
        tasks.append((p, rid, student))
    return requests, tasks


def check(run: Run, solved: Solved, validated: Validated) -> Checked:
    """The sandbox (or an external verifier) checks each attempt; rho per task = mean correctness (spec 2, 4)."""
    outcomes: dict[str, str] = {}
    jobs, cpu = 0, 0.0
    if solved.attempts:
        request = sandbox_pb2.CheckAnswersRequest(attempts=[
            sandbox_pb2.Attempt(attempt_id=a.id, task=validated.verdicts[a.task_id].task.to_pb(),
                                response_text=a.text) for a in solved.attempts])
        resp = run.services.sandbox.CheckAnswers(request)
        outcomes, jobs, cpu = {r.attempt_id: r.outcome for r in resp.results}, resp.jobs, resp.cpu_seconds
    by_task: dict[str, list[str]] = defaultdict(list)
    for a in solved.attempts:
        by_task[a.task_id].append(outcomes[a.id])
    return Checked(outcomes, {task_id: mean_rho(outs) for task_id, outs in by_task.items()}, jobs, cpu)


def rate(run: Run, step: int, matched: Matched, proposed: Proposed, checked: Checked) -> Rated:
    """Report every match that played at least one valid task; the league applies TrueSkill once per match id
    (spec 6)."""
    rhos: dict[str, list[float]] = defaultdict(list)
    for p in proposed.proposals:
        if checked.rho.get(p.id) is not None:
            rhos[p.match_id].append(checked.rho[p.id])
    results = [league_pb2.MatchResult(match_id=m.match_id, teacher_id=m.teacher, student_id=m.student,
                                      task_type=m.task_type, step=step, rhos=rhos[m.match_id])
               for m in matched.pairings if rhos.get(m.match_id)]
    league = run.services.league
    applied = duplicates = 0
    if results:
        resp = league.ReportMatches(league_pb2.ReportMatchesRequest(run_id=run.run_id, matches=results))
        # a match id names one match of this step: one the league already held was applied by an earlier delivery
        # of this phase (a killed worker's), so the step's matches are applied either way
        applied, duplicates = resp.applied + resp.duplicates, resp.duplicates
    ratings = league.GetRatings(league_pb2.GetRatingsRequest(run_id=run.run_id)).ratings
    return Rated(applied, duplicates, [r.match_id for r in results],
                 {r.adapter_id: Rating(r.role, r.mu, r.sigma, r.conservative_skill) for r in ratings})
