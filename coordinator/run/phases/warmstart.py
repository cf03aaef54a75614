"""The warm start before step 0 (spec 13): generated programs, verified by the sandbox, become examples in the exact
answer formats; the trainer fits one adapter on them, from which every member starts."""

from __future__ import annotations

import logging
import time

from coordinator.run.phases import Run
from populora.pb import sandbox_pb2, trainer_pb2
from populora.records import WarmStarted
from populora.rpc import ref_from_pb
from populora.tasks import Triplet
from populora.tasks.seedgen import (
    format_examples,
    generate_programs,
    generate_word_problems,
    seed_proposals,
    triplets_from_verdicts,
)

log = logging.getLogger(__name__)


def verified_seed_tasks(run: Run) -> dict[str, list]:
    """Per task type, `warmstart.programs` programs of the warm-start templates paired with their tasks (math_w: word
    problems with their programs, spec 18), outputs computed by the sandbox service (never by the generator)."""
    ws, tasks_cfg = run.cfg.warmstart, run.cfg.tasks
    out = {}
    for tt in tasks_cfg.task_types:
        n_inputs = tasks_cfg.code_f_inputs if tt == "code_f" else 1
        if tt == "math_w":
            programs = generate_word_problems(ws.programs, ws.seed, stream=tt)
        else:
            programs = generate_programs(ws.programs, ws.seed, split="warm", n_inputs=n_inputs, stream=tt)
        req = sandbox_pb2.ValidateProposalsRequest(proposals=[
            sandbox_pb2.Proposal(proposal_id=p.proposal_id, task_type=p.task_type, response_text=p.response_text,
                                 given_program=p.given_program) for p in seed_proposals(programs, tt)])
        results = run.services.sandbox.ValidateProposals(req).results
        verdicts = [(r.valid, r.reason, r.detail, Triplet.from_pb(r.task) if r.valid else None) for r in results]
        out[tt] = list(zip(programs, triplets_from_verdicts(programs, tt, verdicts), strict=True))
    return out


def warm_start(run: Run) -> WarmStarted:
    """Fit (or take from the cache) the run's warm-start adapter; an empty record when `warmstart.enabled` is off."""
    cfg = run.cfg
    ws = cfg.warmstart
    if not ws.enabled:
        return WarmStarted()
    start = time.perf_counter()
    log.info("warm start: %d generated programs per task type through the sandbox, then %d fit steps of %d examples "
             "(a cached fit is reused)", ws.programs, ws.steps, ws.batch_size)
    tasks = verified_seed_tasks(run)
    n_refs = cfg.tasks.n_references if ws.n_references < 0 else ws.n_references
    examples = format_examples(tasks, ws.steps * ws.batch_size, ws.seed, n_refs, ws.teacher_fraction,
                               cfg.tasks.code_f_inputs)
    resp = run.services.trainer.WarmStart(trainer_pb2.WarmStartRequest(
        adapter_id=f"{run.run_id}.warm", rank=cfg.lora.rank, target_modules=cfg.lora.target_modules,
        lora_alpha=cfg.lora.alpha, seed=ws.seed, steps=ws.steps, batch_size=ws.batch_size, lr=ws.lr,
        use_cache=ws.cache, prompt_grad=ws.prompt_grad, examples=[
            trainer_pb2.SftExample(prompt=[trainer_pb2.ChatTurn(role=r, content=c) for r, c in e.messages],
                                   response=e.response, task_type=e.task_type, role=e.role) for e in examples]))
    ref = ref_from_pb(resp.adapter)
    losses = list(resp.losses)
    log.info("warm start: %s %s from %d examples (%d tokens), loss %.3f -> %.3f, %.1fs",
             "reused" if resp.cached else "fitted", ref.key, len(examples), resp.tokens,
             losses[0] if losses else float("nan"), losses[-1] if losses else float("nan"),
             time.perf_counter() - start)
    return WarmStarted(ref.adapter_id, ref.version, resp.cached, losses, resp.tokens, resp.fit_seconds,
                       len(examples), resp.digest, time.perf_counter() - start)
