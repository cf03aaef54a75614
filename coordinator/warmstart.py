"""The warm start before step 0 (spec 13): generated programs, verified by the sandbox, become examples in the exact
answer formats; the trainer fits one adapter on them, from which every member starts."""

from __future__ import annotations

import logging
import time

from coordinator.context import RunContext
from populora.pb import common_pb2, sandbox_pb2, trainer_pb2
from populora.rpc import ref_from_pb, ref_to_pb
from populora.tasks import Triplet
from populora.tasks.seedgen import format_examples, generate_programs, seed_proposals, triplets_from_verdicts

log = logging.getLogger(__name__)


def verified_seed_tasks(ctx: RunContext) -> dict[str, list]:
    """Per task type, `warmstart.programs` programs of the warm-start templates paired with their tasks, outputs
    computed by the sandbox service (never by the generator)."""
    ws, tasks_cfg = ctx.cfg.warmstart, ctx.cfg.tasks
    out = {}
    for tt in tasks_cfg.task_types:
        n_inputs = tasks_cfg.code_f_inputs if tt == "code_f" else 1
        programs = generate_programs(ws.programs, ws.seed, split="warm", n_inputs=n_inputs, stream=tt)
        req = sandbox_pb2.ValidateProposalsRequest(proposals=[
            sandbox_pb2.Proposal(proposal_id=p.proposal_id, task_type=p.task_type, response_text=p.response_text,
                                 given_program=p.given_program) for p in seed_proposals(programs, tt)])
        results = ctx.clients.sandbox.validate_proposals(req).results
        verdicts = [(r.valid, r.reason, r.detail, Triplet.from_pb(r.task) if r.valid else None) for r in results]
        out[tt] = list(zip(programs, triplets_from_verdicts(programs, tt, verdicts), strict=True))
    return out


def warm_start(ctx: RunContext) -> dict | None:
    """Fit (or take from the cache) the run's warm-start adapter; None when `warmstart.enabled` is off.

    Returns what the init phase records: the adapter ({adapter_id, version}), whether it was cached, the fit's
    losses, tokens and seconds, and the number of examples."""
    cfg = ctx.cfg
    ws = cfg.warmstart
    if not ws.enabled:
        return None
    start = time.perf_counter()
    tasks = verified_seed_tasks(ctx)
    n_refs = cfg.tasks.n_references if ws.n_references < 0 else ws.n_references
    examples = format_examples(tasks, ws.steps * ws.batch_size, ws.seed, n_refs, ws.teacher_fraction,
                               cfg.tasks.code_f_inputs)
    resp = ctx.clients.trainer.warm_start(trainer_pb2.WarmStartRequest(
        adapter_id=f"{ctx.run_id}.warm", rank=cfg.lora.rank, target_modules=cfg.lora.target_modules,
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
    return {"adapter_id": ref.adapter_id, "version": ref.version, "cached": resp.cached, "losses": losses,
            "tokens": resp.tokens, "fit_seconds": resp.fit_seconds, "examples": len(examples),
            "digest": resp.digest, "seconds": time.perf_counter() - start}


def warm_ref_pb(ctx: RunContext, init_result: dict) -> common_pb2.AdapterRef | None:
    """The warm-start adapter an init phase recorded, as the ref members and seeding start from (None: no warm
    start, members start at B = 0 and the base model seeds the buffers)."""
    warm = init_result.get("warm_start")
    if not warm:
        return None
    return ref_to_pb(ctx.store.ref(warm["adapter_id"], warm["version"]))
