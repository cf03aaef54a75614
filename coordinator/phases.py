"""The phases of one training step (DESIGN.md "One training step"), each a function of persisted inputs.

Step 0 holds `init` (adapters, league registration) and `seed` (the base model fills the buffers, spec 10).
Steps 1..N run match -> propose -> validate -> solve -> check -> rate -> update, and `evolve` every k steps.
A phase reads earlier phases' results from the state store and returns a JSON-able result that is persisted before
the next phase starts. Re-running a phase after a crash is safe: generation is seeded, league reports are
idempotent by match id, trainer updates are recognised by the version they wrote, children by their id.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from tqdm import tqdm

from coordinator.context import RunContext
from coordinator.warmstart import warm_ref_pb, warm_start
from populora.pb import common_pb2, evolver_pb2, inference_pb2, league_pb2, sandbox_pb2, trainer_pb2
from populora.rpc import ServiceError, ref_from_pb, ref_to_pb
from populora.store import AdapterRef
from populora.tasks import (
    BufferSet,
    Triplet,
    mean_rho,
    student_messages,
    student_reward,
    teacher_messages,
    teacher_reward,
)

log = logging.getLogger(__name__)
TRAIN_PHASES = ("match", "propose", "validate", "solve", "check", "rate", "update")
INIT_PHASES = ("init", "seed")


def phases_of(step: int, cfg) -> tuple[str, ...]:
    if step == 0:
        return INIT_PHASES
    evolve = cfg.run.mode == "population" and step % cfg.evolution.every_k == 0
    return TRAIN_PHASES + (("evolve",) if evolve else ())


# ---------------------------------------------------------------- population and buffers as of a step

def population_before(ctx: RunContext, step: int) -> dict[str, dict]:
    """Active members {adapter_id: {"role", "version"}} at the start of `step`."""
    for s in range(step - 1, 0, -1):
        for phase in ("evolve", "update"):
            got = ctx.maybe_result(s, phase)
            if got is not None:
                return got["population"]
    return ctx.result(0, "init")["population"]


def buffers_before(ctx: RunContext, step: int) -> BufferSet:
    for s in range(step - 1, 0, -1):
        got = ctx.maybe_result(s, "validate")
        if got is not None:
            return BufferSet.from_json(got["buffers"])
    return BufferSet.from_json(ctx.result(0, "seed")["buffers"])


def ref_of(ctx: RunContext, adapter_id: str, version: int) -> AdapterRef:
    return ctx.store.ref(adapter_id, version)


# ---------------------------------------------------------------- generation (one multi-LoRA batch per phase)

def generate(ctx: RunContext, requests: list[inference_pb2.GenerationRequest], desc: str) -> dict[str, dict]:
    """Send every request in ONE Generate call; results by request id. A progress bar shows rows and tokens/s."""
    if not requests:
        return {}
    rows = sum(max(1, r.sampling.n) for r in requests)
    out: dict[str, dict] = {}
    tokens = 0
    start = time.perf_counter()
    bar = tqdm(total=rows, desc=f"{desc:8s}", unit="row", disable=not ctx.progress, leave=False, dynamic_ncols=True)
    try:
        for res in ctx.clients.inference.generate(inference_pb2.GenerateRequest(requests=requests)):
            comps = [{"text": c.text, "token_ids": list(c.token_ids), "finish_reason": c.finish_reason}
                     for c in res.completions]
            out[res.request_id] = {"prompt_token_ids": list(res.prompt_token_ids), "completions": comps}
            tokens += sum(len(c["token_ids"]) for c in comps)
            bar.update(len(comps))
            bar.set_postfix_str(f"{tokens / max(time.perf_counter() - start, 1e-9):.1f} tok/s")
    finally:
        bar.close()
    missing = [r.request_id for r in requests if r.request_id not in out]
    if missing:
        raise RuntimeError(f"inference returned no result for {len(missing)} request(s), e.g. {missing[:3]}")
    seconds = time.perf_counter() - start
    log.info("%s: %d rows, %d tokens in %.1fs (%.1f tok/s)", desc, rows, tokens, seconds, tokens / max(seconds, 1e-9))
    return out


def _sampling(ctx: RunContext, n: int, max_new: int, seed: int) -> inference_pb2.SamplingParams:
    g = ctx.cfg.generation
    return inference_pb2.SamplingParams(temperature=g.temperature, top_p=g.top_p, max_new_tokens=max_new,
                                        seed=seed, n=n)


def _messages(msgs: list[dict[str, str]]) -> list[inference_pb2.ChatMessage]:
    return [inference_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in msgs]


def _proposal_requests(ctx: RunContext, buffers: BufferSet, slots: list[dict], adapter_of: Callable[[dict], object],
                       step: int) -> tuple[list, dict[str, dict]]:
    """Teacher prompts for each slot {"id", "task_type", "teacher"}: K references without replacement; code_f
    teachers are also given one program from the buffers (spec 2, 10)."""
    cfg = ctx.cfg
    requests, meta = [], {}
    for slot in slots:
        rng = ctx.rng("propose", step, slot["id"])
        tt = slot["task_type"]
        refs = buffers.sample(tt, cfg.tasks.n_references, rng)
        given = None
        if tt == "code_f":
            pool = buffers.sample("code_f", 1, rng) or buffers.sample("code_o", 1, rng)
            given = pool[0].program
        msgs = teacher_messages(tt, refs, given_program=given, n_inputs=cfg.tasks.code_f_inputs)
        adapter = adapter_of(slot)
        requests.append(inference_pb2.GenerationRequest(
            request_id=slot["id"], adapter=adapter, messages=_messages(msgs),
            sampling=_sampling(ctx, 1, cfg.teacher_max_new_tokens, ctx.seed("gen", step, slot["id"]))))
        meta[slot["id"]] = {"given_program": given or ""}
    return requests, meta


def _validate(ctx: RunContext, proposals: list[dict]) -> dict[str, dict]:
    req = sandbox_pb2.ValidateProposalsRequest(proposals=[
        sandbox_pb2.Proposal(proposal_id=p["id"], task_type=p["task_type"], response_text=p["text"],
                             given_program=p.get("given_program", ""), teacher_id=p.get("teacher", ""))
        for p in proposals])
    out = {}
    for r in ctx.clients.sandbox.validate_proposals(req).results:
        task = Triplet.from_pb(r.task).to_dict() if r.valid else None
        out[r.proposal_id] = {"valid": r.valid, "reason": r.reason, "detail": r.detail[:500], "task": task}
    return out


# ---------------------------------------------------------------- step 0

def phase_init(ctx: RunContext, step: int) -> dict:
    """Create the run in the league, initialise every adapter (B = 0, or the warm start's weights: spec 13) in the
    trainer, register them."""
    cfg = ctx.cfg
    league, trainer = ctx.clients.league, ctx.clients.trainer
    league.create_run(league_pb2.CreateRunRequest(run_id=ctx.run_id, config_yaml=cfg.to_yaml(), mode=cfg.run.mode))
    if cfg.run.mode == "baseline":
        members = [(f"{ctx.run_id}.B0", "both")]
    else:
        members = [(f"{ctx.run_id}.T{i}", "teacher") for i in range(cfg.population.n_teachers)]
        members += [(f"{ctx.run_id}.S{i}", "student") for i in range(cfg.population.n_students)]
    population = {}
    warm = warm_start(ctx)  # spec 13: every member starts from this adapter (None: from B = 0)
    start = {"warm_start": warm}
    for adapter_id, role in members:
        if ctx.store.versions(adapter_id):  # a retried init: the adapter was written already
            ref = ctx.store.ref(adapter_id, 1)
            trainer.adopt_adapter(trainer_pb2.AdoptAdapterRequest(adapter=ref_to_pb(ref), role=role))
        else:
            resp = trainer.init_adapter(trainer_pb2.InitAdapterRequest(
                adapter_id=adapter_id, role=role, rank=cfg.lora.rank, target_modules=cfg.lora.target_modules,
                seed=ctx.seed("init", adapter_id), lora_alpha=cfg.lora.alpha, init_from=warm_ref_pb(ctx, start)))
            ref = ref_from_pb(resp.adapter)
        population[adapter_id] = {"role": role, "version": ref.version}
    league.register_adapters(league_pb2.RegisterAdaptersRequest(run_id=ctx.run_id, adapters=[
        league_pb2.AdapterSpec(adapter_id=a, role=m["role"], rank=cfg.lora.rank, created_step=0)
        for a, m in population.items()]))
    return {"population": population, **start}


def phase_seed(ctx: RunContext, step: int) -> dict:
    """The base model (or, after a warm start, the adapter every member starts from) proposes, without updates,
    until each buffer holds seed_buffer_size valid triplets (spec 10, 13)."""
    cfg = ctx.cfg
    buffers = BufferSet(cfg.tasks.buffer_cap, seed=cfg.run.seed)
    target = cfg.tasks.seed_buffer_size
    rounds, reasons, tried = 0, Counter(), 0
    per_round = max(2, cfg.tasks.proposals_per_teacher * max(1, cfg.population.n_teachers))
    warm = warm_ref_pb(ctx, ctx.result(0, "init"))  # the members' starting policy proposes (spec 13)
    for rounds in range(1, cfg.tasks.seed_max_rounds + 1):
        # the identity seed counts as one entry; stop once every type holds `target` beyond it
        needed = {tt: target - (buffers.size(tt) - 1) for tt in cfg.tasks.task_types}
        needed = {tt: n for tt, n in needed.items() if n > 0}
        if not needed:
            break
        slots = [{"id": f"seed/{rounds}/{tt}/{k}", "task_type": tt, "teacher": ""}
                 for tt, n in needed.items() for k in range(min(n, per_round))]
        requests, meta = _proposal_requests(ctx, buffers, slots, lambda s: warm, 0)
        gen = generate(ctx, requests, f"seed {rounds}")
        proposals = [{"id": s["id"], "task_type": s["task_type"], "text": gen[s["id"]]["completions"][0]["text"],
                      **meta[s["id"]]} for s in slots]
        verdicts = _validate(ctx, proposals)
        tried += len(proposals)
        for p in proposals:
            v = verdicts[p["id"]]
            reasons[v["reason"]] += 1
            if v["valid"]:
                buffers.add(Triplet.from_dict(v["task"]))
    sizes = {tt: buffers.size(tt) for tt in cfg.tasks.task_types}
    log.info("seeding: %d rounds, %d proposals, buffers %s, reasons %s", rounds, tried, sizes, dict(reasons))
    return {"buffers": buffers.to_json(), "rounds": rounds, "proposals": tried, "reasons": dict(reasons),
            "sizes": sizes}


# ---------------------------------------------------------------- steps 1..N

def phase_match(ctx: RunContext, step: int) -> dict:
    """League PFSP: each teacher draws one student per task type (spec 7)."""
    resp = ctx.clients.league.matchmake(league_pb2.MatchmakeRequest(
        run_id=ctx.run_id, step=step, task_types=ctx.cfg.tasks.task_types, seed=ctx.seed("match", step)))
    pairings = [{"match_id": p.match_id, "teacher": p.teacher_id, "student": p.student_id,
                 "task_type": p.task_type, "p_student": p.p_student} for p in resp.pairings]
    if not pairings:
        raise RuntimeError(f"run {ctx.run_id} step {step}: the league made no pairings (no active adapters?)")
    return {"pairings": pairings}


def phase_propose(ctx: RunContext, step: int) -> dict:
    """Every teacher's proposals for every match, in one multi-LoRA batch."""
    pop = population_before(ctx, step)
    buffers = buffers_before(ctx, step)
    slots = []
    for m in ctx.result(step, "match")["pairings"]:
        for k in range(ctx.cfg.tasks.proposals_per_teacher):
            slots.append({"id": f"{m['match_id']}/p{k}", "task_type": m["task_type"], "teacher": m["teacher"],
                          "match_id": m["match_id"]})

    def adapter(slot):
        return ref_to_pb(ref_of(ctx, slot["teacher"], pop[slot["teacher"]]["version"]))

    requests, meta = _proposal_requests(ctx, buffers, slots, adapter, step)
    gen = generate(ctx, requests, "propose")
    proposals = []
    for s in slots:
        g = gen[s["id"]]
        c = g["completions"][0]
        proposals.append({**s, **meta[s["id"]], "text": c["text"], "prompt_token_ids": g["prompt_token_ids"],
                          "response_token_ids": c["token_ids"], "finish_reason": c["finish_reason"],
                          "version": pop[s["teacher"]]["version"]})
    return {"proposals": proposals}


def phase_validate(ctx: RunContext, step: int) -> dict:
    """Sandbox validation of every proposal (spec 3); valid ones enter their type's buffer (spec 10)."""
    proposals = ctx.result(step, "propose")["proposals"]
    verdicts = _validate(ctx, proposals)
    buffers = buffers_before(ctx, step)
    for p in proposals:
        v = verdicts[p["id"]]
        if v["valid"]:
            t = Triplet.from_dict(v["task"])
            t.teacher_id, t.task_id = p["teacher"], p["id"]
            v["task"] = t.to_dict()
            buffers.add(t)
    return {"verdicts": verdicts, "buffers": buffers.to_json()}


def phase_solve(ctx: RunContext, step: int) -> dict:
    """Every matched student x valid task x n samples, in one multi-LoRA batch."""
    pop = population_before(ctx, step)
    verdicts = ctx.result(step, "validate")["verdicts"]
    students = {m["match_id"]: m["student"] for m in ctx.result(step, "match")["pairings"]}
    n = ctx.cfg.tasks.n_samples
    requests, tasks = [], []
    for p in ctx.result(step, "propose")["proposals"]:
        v = verdicts[p["id"]]
        if not v["valid"]:
            continue
        student = students[p["match_id"]]
        task = Triplet.from_dict(v["task"])
        rid = f"{p['id']}/solve"
        requests.append(inference_pb2.GenerationRequest(
            request_id=rid, adapter=ref_to_pb(ref_of(ctx, student, pop[student]["version"])),
            messages=_messages(student_messages(task)),
            sampling=_sampling(ctx, n, ctx.cfg.generation.max_new_tokens, ctx.seed("gen", step, rid))))
        tasks.append({"task_id": p["id"], "request_id": rid, "student": student, "match_id": p["match_id"]})
    gen = generate(ctx, requests, "solve")
    attempts = []
    for t in tasks:
        g = gen[t["request_id"]]
        for k, c in enumerate(g["completions"]):
            attempts.append({"id": f"{t['task_id']}/a{k}", "task_id": t["task_id"], "student": t["student"],
                             "match_id": t["match_id"], "text": c["text"], "prompt_token_ids": g["prompt_token_ids"],
                             "response_token_ids": c["token_ids"], "finish_reason": c["finish_reason"]})
    return {"attempts": attempts}


def phase_check(ctx: RunContext, step: int) -> dict:
    """Sandbox (or external verifier) checks each attempt; rho per task = mean correctness (spec 4)."""
    verdicts = ctx.result(step, "validate")["verdicts"]
    attempts = ctx.result(step, "solve")["attempts"]
    outcomes: dict[str, str] = {}
    if attempts:
        req = sandbox_pb2.CheckAnswersRequest(attempts=[
            sandbox_pb2.Attempt(attempt_id=a["id"], task=Triplet.from_dict(verdicts[a["task_id"]]["task"]).to_pb(),
                                response_text=a["text"]) for a in attempts])
        for r in ctx.clients.sandbox.check_answers(req).results:
            outcomes[r.attempt_id] = r.outcome
    by_task: dict[str, list[str]] = defaultdict(list)
    for a in attempts:
        by_task[a["task_id"]].append(outcomes[a["id"]])
    rho = {task_id: mean_rho(outs) for task_id, outs in by_task.items()}
    return {"outcomes": outcomes, "rho": rho}


def phase_rate(ctx: RunContext, step: int) -> dict:
    """Report every match that played at least one valid task; the league applies TrueSkill once per match id."""
    rho = ctx.result(step, "check")["rho"]
    per_match: dict[str, list[float]] = defaultdict(list)
    for p in ctx.result(step, "propose")["proposals"]:
        r = rho.get(p["id"])
        if r is not None:
            per_match[p["match_id"]].append(r)
    results = [league_pb2.MatchResult(match_id=m["match_id"], teacher_id=m["teacher"], student_id=m["student"],
                                      task_type=m["task_type"], step=step, rhos=per_match[m["match_id"]])
               for m in ctx.result(step, "match")["pairings"] if per_match.get(m["match_id"])]
    applied = duplicates = 0
    if results:
        resp = ctx.clients.league.report_matches(league_pb2.ReportMatchesRequest(run_id=ctx.run_id, matches=results))
        applied, duplicates = resp.applied, resp.duplicates
    ratings = ctx.clients.league.get_ratings(league_pb2.GetRatingsRequest(run_id=ctx.run_id))
    return {"applied": applied, "duplicates": duplicates, "reported": [r.match_id for r in results],
            "ratings": {r.adapter_id: {"role": r.role, "mu": r.mu, "sigma": r.sigma,
                                       "skill": r.conservative_skill} for r in ratings.ratings}}


def rollouts_of(ctx: RunContext, step: int) -> dict[str, list[dict]]:
    """Rewards of spec 4 attached to every proposal and attempt, grouped by the adapter that wrote them."""
    cfg = ctx.cfg
    verdicts = ctx.result(step, "validate")["verdicts"]
    check = ctx.result(step, "check")
    out: dict[str, list[dict]] = defaultdict(list)
    for p in ctx.result(step, "propose")["proposals"]:
        v = verdicts[p["id"]]
        reward = teacher_reward(v["valid"], check["rho"].get(p["id"]), cfg.rewards.teacher_reward, cfg.rewards)
        out[p["teacher"]].append({"prompt_token_ids": p["prompt_token_ids"], "response_token_ids":
                                  p["response_token_ids"], "reward": reward, "task_type": p["task_type"],
                                  "role": "teacher"})
    task_type = {p["id"]: p["task_type"] for p in ctx.result(step, "propose")["proposals"]}
    for a in ctx.result(step, "solve")["attempts"]:
        reward = student_reward(check["outcomes"][a["id"]], cfg.rewards)
        if reward is None:  # verifier_error: excluded from rewards
            continue
        out[a["student"]].append({"prompt_token_ids": a["prompt_token_ids"], "response_token_ids":
                                  a["response_token_ids"], "reward": reward, "task_type": task_type[a["task_id"]],
                                  "role": "student"})
    return {k: [r for r in v if r["response_token_ids"]] for k, v in out.items()}


def _already_updated(ctx: RunContext, adapter_id: str, version: int, step: int) -> AdapterRef | None:
    """The version a crashed earlier attempt of this update already wrote, if any (recognised by its step)."""
    nxt = ctx.store.ref(adapter_id, version + 1)
    if ctx.store.exists(nxt) and ctx.store.read(nxt).meta.get("step") == step:
        return nxt
    return None


def phase_update(ctx: RunContext, step: int) -> dict:
    """One TRR++ step per adapter with rollouts, all in one UpdateBatch (batched across adapters where it pays)."""
    pop = {k: dict(v) for k, v in population_before(ctx, step).items()}
    rollouts = rollouts_of(ctx, step)
    updates, stats, reused = [], {}, []
    for adapter_id, rows in sorted(rollouts.items()):
        if not rows or adapter_id not in pop:
            continue
        version = pop[adapter_id]["version"]
        done = _already_updated(ctx, adapter_id, version, step)
        if done is not None:
            pop[adapter_id]["version"] = done.version
            stats[adapter_id] = ctx.store.read(done).meta.get("stats", {})
            reused.append(adapter_id)
            continue
        updates.append(trainer_pb2.UpdateRequest(
            adapter=ref_to_pb(ref_of(ctx, adapter_id, version)), seed=ctx.seed("update", step, adapter_id),
            step=step, rollouts=[trainer_pb2.Rollout(**r) for r in rows]))
    mode = ""
    if updates:
        resp = ctx.clients.trainer.update_batch(trainer_pb2.UpdateBatchRequest(updates=updates))
        mode = resp.mode
        for r in resp.results:
            ref = ref_from_pb(r.adapter)
            pop[ref.adapter_id]["version"] = ref.version
            s = r.stats
            stats[ref.adapter_id] = {"loss": s.loss, "grad_norm": s.grad_norm, "mean_abs_advantage":
                                     s.mean_abs_advantage, "tokens": s.tokens, "seconds": s.seconds,
                                     "rollouts": s.rollouts}
    _refresh_inference(ctx, population_before(ctx, step), pop)
    return {"population": pop, "stats": stats, "mode": mode, "reused": reused}


def _refresh_inference(ctx: RunContext, before: dict[str, dict], after: dict[str, dict]) -> None:
    """Load every new version into inference and drop the versions no one will ask for again."""
    inf = ctx.clients.inference
    for adapter_id, m in after.items():
        old = before.get(adapter_id)
        if old is not None and old["version"] == m["version"]:
            continue
        inf.load_adapter(inference_pb2.LoadAdapterRequest(adapter=ref_to_pb(ref_of(ctx, adapter_id, m["version"]))))
        if old is not None:
            _unload(ctx, adapter_id, old["version"])
    for adapter_id in before:
        if adapter_id not in after:
            _unload(ctx, adapter_id, 0)


def _unload(ctx: RunContext, adapter_id: str, version: int) -> None:
    try:
        ctx.clients.inference.unload_adapter(inference_pb2.UnloadAdapterRequest(
            adapter=common_pb2.AdapterRef(adapter_id=adapter_id, version=version)))
    except ServiceError as e:  # not resident (evicted already): nothing to drop
        log.debug("unload %s v%d: %s", adapter_id, version, e.message)


def _pick_operator(ctx: RunContext, step: int, i: int) -> str:
    mix = {k: v for k, v in ctx.cfg.evolution.operator_mix.items() if v > 0}
    names = sorted(mix)
    return ctx.rng("operator", step, i).choices(names, weights=[mix[n] for n in names])[0]


def phase_evolve(ctx: RunContext, step: int) -> dict:
    """Replace the worst ceil(gamma N) of each sub-population by children of survivors (spec 8-9)."""
    cfg = ctx.cfg
    pop = {k: dict(v) for k, v in ctx.result(step, "update")["population"].items()}
    sel = ctx.clients.league.select_for_replacement(league_pb2.SelectForReplacementRequest(
        run_id=ctx.run_id, step=step, seed=ctx.seed("select", step)))
    n_parents = {o.name: o.n_parents for o in
                 ctx.clients.evolver.list_operators(evolver_pb2.ListOperatorsRequest()).operators}
    events = []
    for i, rep in enumerate(sel.replacements):
        op = _pick_operator(ctx, step, i)
        parents = list(rep.parent_ids)[: n_parents.get(op, 1)]
        if len(parents) < n_parents.get(op, 1):
            op = next(o for o in sorted(n_parents) if n_parents[o] == 1)
            parents = parents[:1]
        child_id = f"{ctx.run_id}.{rep.role[0].upper()}{step}c{i}"
        seed = ctx.seed("breed", step, i)
        if ctx.store.versions(child_id):  # a retried evolve: the child was written already
            child = ctx.store.ref(child_id, 1)
            params_json = json.dumps(ctx.store.read(child).meta.get("params", {}), sort_keys=True)
            change, eff_rank = float("nan"), float("nan")
        else:
            bred = ctx.clients.evolver.breed(evolver_pb2.BreedRequest(
                parents=[ref_to_pb(ref_of(ctx, p, pop[p]["version"])) for p in parents], operator=op, seed=seed,
                child_id=child_id))
            child = ref_from_pb(bred.child)
            params_json, change, eff_rank = bred.params_json, bred.relative_change, bred.effective_rank
        ctx.clients.league.record_child(league_pb2.RecordChildRequest(
            run_id=ctx.run_id, child_id=child_id, role=rep.role, parent_ids=parents, operator=op,
            params_json=params_json, seed=seed, step=step, retire_id=rep.retire_id, rank=cfg.lora.rank))
        ctx.clients.trainer.adopt_adapter(trainer_pb2.AdoptAdapterRequest(adapter=ref_to_pb(child), role=rep.role))
        ctx.clients.trainer.drop_adapter(trainer_pb2.DropAdapterRequest(adapter_id=rep.retire_id))
        pop.pop(rep.retire_id, None)
        pop[child_id] = {"role": rep.role, "version": child.version}
        events.append({"step": step, "role": rep.role, "retired": rep.retire_id, "child": child_id,
                       "parents": parents, "operator": op, "relative_change": change, "effective_rank": eff_rank})
    _refresh_inference(ctx, ctx.result(step, "update")["population"], pop)
    return {"population": pop, "events": events}


PHASES: dict[str, Callable[[RunContext, int], dict]] = {
    "init": phase_init, "seed": phase_seed, "match": phase_match, "propose": phase_propose,
    "validate": phase_validate, "solve": phase_solve, "check": phase_check, "rate": phase_rate,
    "update": phase_update, "evolve": phase_evolve,
}
