"""Teacher proposals: the slots a phase fills, their prompts (spec 2, 10), the written proposals and the
sandbox's verdicts on them (spec 3)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.run.phases.generation import chat_messages, generate, sampling_params
from coordinator.run.phases.run import Run
from populora.pb import inference_pb2, sandbox_pb2
from populora.records import Proposal, Verdict
from populora.tasks import BufferSet, Triplet, teacher_messages


@dataclass(frozen=True)
class Slot:
    """One proposal to write: its id, task type, the teacher it is credited to ("" while seeding) and the adapter
    version that writes it (the teacher's own; while seeding the warm start, or none: the bare base model)."""

    id: str
    task_type: str
    teacher: str = ""
    version: int = 0
    match_id: str = ""
    writer: str = ""  # the adapter that generates it when it is not the teacher (seeding with the warm start)


def _teacher_request(run: Run, buffers: BufferSet, slot: Slot, step: int
                     ) -> tuple[inference_pb2.GenerationRequest, str]:
    """A teacher prompt (spec 2, 10): K references without replacement; a code_f teacher is also given one program
    from the buffers. Returns the request and the given program ("" unless code_f)."""
    cfg = run.cfg
    rng = run.rng("propose", step, slot.id)
    refs = buffers.sample(slot.task_type, cfg.tasks.n_references, rng)
    given = ""
    if slot.task_type == "code_f":
        pool = buffers.sample("code_f", 1, rng) or buffers.sample("code_o", 1, rng)
        given = pool[0].program
    msgs = teacher_messages(slot.task_type, refs, given_program=given or None, n_inputs=cfg.tasks.code_f_inputs)
    writer = slot.writer or slot.teacher
    adapter = run.ref(writer, slot.version) if writer else None
    return inference_pb2.GenerationRequest(
        request_id=slot.id, adapter=adapter, messages=chat_messages(msgs),
        sampling=sampling_params(run, 1, cfg.teacher_max_new_tokens, run.seed("gen", step, slot.id))), given


def teacher_requests(run: Run, buffers: BufferSet, slots: list[Slot], step: int
                     ) -> tuple[list[inference_pb2.GenerationRequest], dict[str, str]]:
    """The generation requests of every slot, and the program each code_f slot was given (by slot id)."""
    requests, given = [], {}
    for slot in slots:
        request, given[slot.id] = _teacher_request(run, buffers, slot, step)
        requests.append(request)
    return requests, given


def write_proposals(run: Run, buffers: BufferSet, slots: list[Slot], step: int, desc: str) -> list[Proposal]:
    """Every slot's proposal, written in one generation batch."""
    requests, given = teacher_requests(run, buffers, slots, step)
    gen = generate(run, requests, desc)
    out = []
    for s in slots:
        g = gen[s.id]
        c = g.completions[0]
        out.append(Proposal(id=s.id, task_type=s.task_type, teacher=s.teacher, match_id=s.match_id,
                            version=s.version, text=c.text, prompt_token_ids=g.prompt_token_ids,
                            response_token_ids=list(c.token_ids), finish_reason=c.finish_reason,
                            given_program=given[s.id], logprobs=list(c.logprobs),
                            truncated_fraction=c.truncated_fraction))
    return out


def sandbox_verdicts(run: Run, proposals: list[Proposal]) -> tuple[dict[str, Verdict], int, float]:
    """The sandbox's verdict on every proposal (spec 3), in one call, the sandbox jobs it took and their CPU
    seconds."""
    request = sandbox_pb2.ValidateProposalsRequest(proposals=[
        sandbox_pb2.Proposal(proposal_id=p.id, task_type=p.task_type, response_text=p.text,
                             given_program=p.given_program, teacher_id=p.teacher) for p in proposals])
    resp = run.services.sandbox.ValidateProposals(request)
    return {r.proposal_id: Verdict(r.valid, r.reason, r.detail[:500], Triplet.from_pb(r.task) if r.valid else None)
            for r in resp.results}, resp.jobs, resp.cpu_seconds
