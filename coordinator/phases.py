"""The phases of a run (DESIGN.md "One training step"), each a function of typed records returning a typed record.

coordinator.step calls them in order through the journal, which stores each result before the next phase starts.
A phase talks to the services only through `run.services` (in-process objects or gRPC proxies alike) and never to
the journal, so each can be called, and unit-tested, on its own. Running a phase again after a crash is safe:
generation is seeded, league reports are idempotent by match id, a trainer update is recognised by the version it
wrote, an evolver child by its id.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from tqdm import tqdm

from coordinator.services import Services
from populora.config import Config
from populora.pb import common_pb2, evolver_pb2, inference_pb2, league_pb2, sandbox_pb2, trainer_pb2
from populora.records import (
    Accounted,
    Attempt,
    Checked,
    EvolutionEvent,
    Evolved,
    Initialized,
    Matched,
    Member,
    Pairing,
    Population,
    Proposal,
    Proposed,
    Rated,
    Rating,
    Rollout,
    Seeded,
    Solved,
    Updated,
    UpdateStats,
    Usage,
    Validated,
    Verdict,
    WarmStarted,
)
from populora.rpc import ServiceError, ref_from_pb, ref_to_pb
from populora.seeds import derive_seed
from populora.store import AdapterRef, ArtifactStore
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


@dataclass
class Run:
    """What every phase reads: the run's id and configuration, the services, the artifact store."""

    run_id: str
    cfg: Config
    services: Services
    store: ArtifactStore
    progress: bool = False

    def seed(self, *parts: object) -> int:
        """A seed for one random choice of this run: same parts, same seed, in any process (resume-safe)."""
        return derive_seed(self.cfg.run.seed, self.run_id, *parts)

    def rng(self, *parts: object) -> random.Random:
        return random.Random(self.seed(*parts))

    def ref(self, adapter_id: str, version: int) -> common_pb2.AdapterRef:
        return ref_to_pb(self.store.ref(adapter_id, version))

    def evaluates(self, step: int) -> bool:
        """The population is scored on the held-out benchmark every eval.every steps, step 0 included (0 = never)."""
        return self.cfg.eval.every > 0 and step % self.cfg.eval.every == 0

    def evolves(self, step: int) -> bool:
        """Evolution replaces members every k steps, in population mode only (spec 8)."""
        return self.cfg.run.mode == "population" and step % self.cfg.evolution.every_k == 0


# ---------------------------------------------------------------- generation: one multi-LoRA batch per call

@dataclass(frozen=True)
class Generation:
    prompt_token_ids: list[int]
    completions: list[inference_pb2.Completion]


def generate(run: Run, requests: list[inference_pb2.GenerationRequest], desc: str) -> dict[str, Generation]:
    """Send every request in ONE Generate call; results by request id. A progress bar shows rows and tokens/s."""
    if not requests:
        return {}
    rows = sum(max(1, r.sampling.n) for r in requests)
    out: dict[str, Generation] = {}
    tokens = 0
    start = time.perf_counter()
    bar = tqdm(total=rows, desc=f"{desc:8s}", unit="row", disable=not run.progress, leave=False, dynamic_ncols=True)
    try:
        for res in run.services.inference.Generate(inference_pb2.GenerateRequest(requests=requests)):
            out[res.request_id] = Generation(list(res.prompt_token_ids), list(res.completions))
            tokens += sum(len(c.token_ids) for c in res.completions)
            bar.update(len(res.completions))
            bar.set_postfix_str(f"{tokens / max(time.perf_counter() - start, 1e-9):.1f} tok/s")
    finally:
        bar.close()
    missing = [r.request_id for r in requests if r.request_id not in out]
    if missing:
        raise RuntimeError(f"inference returned no result for {len(missing)} request(s), e.g. {missing[:3]}")
    seconds = time.perf_counter() - start
    log.info("%s: %d rows, %d tokens in %.1fs (%.1f tok/s)", desc, rows, tokens, seconds, tokens / max(seconds, 1e-9))
    return out


def _sampling(run: Run, n: int, max_new: int, seed: int) -> inference_pb2.SamplingParams:
    g = run.cfg.generation
    return inference_pb2.SamplingParams(temperature=g.temperature, top_p=g.top_p, max_new_tokens=max_new,
                                        seed=seed, n=n)


def _messages(msgs: list[dict[str, str]]) -> list[inference_pb2.ChatMessage]:
    return [inference_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in msgs]


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
        request_id=slot.id, adapter=adapter, messages=_messages(msgs),
        sampling=_sampling(run, 1, cfg.teacher_max_new_tokens, run.seed("gen", step, slot.id))), given


def teacher_requests(run: Run, buffers: BufferSet, slots: list[Slot], step: int
                     ) -> tuple[list[inference_pb2.GenerationRequest], dict[str, str]]:
    """The generation requests of every slot, and the program each code_f slot was given (by slot id)."""
    requests, given = [], {}
    for slot in slots:
        request, given[slot.id] = _teacher_request(run, buffers, slot, step)
        requests.append(request)
    return requests, given


def _proposals(run: Run, buffers: BufferSet, slots: list[Slot], step: int, desc: str) -> list[Proposal]:
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
                            given_program=given[s.id]))
    return out


def _verdicts(run: Run, proposals: list[Proposal]) -> tuple[dict[str, Verdict], int]:
    """The sandbox's verdict on every proposal (spec 3), in one call, and the sandbox jobs it took."""
    request = sandbox_pb2.ValidateProposalsRequest(proposals=[
        sandbox_pb2.Proposal(proposal_id=p.id, task_type=p.task_type, response_text=p.text,
                             given_program=p.given_program, teacher_id=p.teacher) for p in proposals])
    resp = run.services.sandbox.ValidateProposals(request)
    return {r.proposal_id: Verdict(r.valid, r.reason, r.detail[:500], Triplet.from_pb(r.task) if r.valid else None)
            for r in resp.results}, resp.jobs


# ---------------------------------------------------------------- step 0

def init(run: Run, warmed: WarmStarted) -> Initialized:
    """Create the run in the league, initialise every adapter in the trainer (B = 0, or the warm start's weights:
    spec 13), register them."""
    cfg, league, trainer = run.cfg, run.services.league, run.services.trainer
    league.CreateRun(league_pb2.CreateRunRequest(run_id=run.run_id, config_yaml=cfg.to_yaml(), mode=cfg.run.mode))
    if cfg.run.mode == "baseline":
        members = [(f"{run.run_id}.B0", "both")]
    else:
        members = [(f"{run.run_id}.T{i}", "teacher") for i in range(cfg.population.n_teachers)]
        members += [(f"{run.run_id}.S{i}", "student") for i in range(cfg.population.n_students)]
    population: Population = {}
    start_from = run.ref(warmed.adapter_id, warmed.version) if warmed.adapter_id else None
    for adapter_id, role in members:
        if run.store.versions(adapter_id):  # a retried init: the adapter was written already
            ref = run.store.ref(adapter_id, 1)
            trainer.AdoptAdapter(trainer_pb2.AdoptAdapterRequest(adapter=ref_to_pb(ref), role=role))
        else:
            resp = trainer.InitAdapter(trainer_pb2.InitAdapterRequest(
                adapter_id=adapter_id, role=role, rank=cfg.lora.rank, target_modules=cfg.lora.target_modules,
                seed=run.seed("init", adapter_id), lora_alpha=cfg.lora.alpha, init_from=start_from))
            ref = ref_from_pb(resp.adapter)
        population[adapter_id] = Member(role, ref.version)
    league.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id=run.run_id, adapters=[
        league_pb2.AdapterSpec(adapter_id=a, role=m.role, rank=cfg.lora.rank, created_step=0)
        for a, m in population.items()]))
    return Initialized(population)


def seed(run: Run, warmed: WarmStarted) -> Seeded:
    """The members' starting policy (the warm start's adapter, else the bare base model) proposes, without updates,
    until each buffer holds seed_buffer_size valid triplets (spec 10, 13)."""
    cfg = run.cfg
    buffers = BufferSet(cfg.tasks.buffer_cap, seed=cfg.run.seed)
    target = cfg.tasks.seed_buffer_size
    rounds, reasons, tried, tokens, jobs = 0, Counter(), 0, 0, 0
    per_round = max(2, cfg.tasks.proposals_per_teacher * max(1, cfg.population.n_teachers))
    for rounds in range(1, cfg.tasks.seed_max_rounds + 1):
        # the identity seed counts as one entry; stop once every type holds `target` beyond it
        needed = {tt: target - (buffers.size(tt) - 1) for tt in cfg.tasks.task_types}
        needed = {tt: n for tt, n in needed.items() if n > 0}
        if not needed:
            break
        slots = [Slot(f"seed/{rounds}/{tt}/{k}", tt, version=warmed.version, writer=warmed.adapter_id)
                 for tt, n in needed.items() for k in range(min(n, per_round))]
        proposals = _proposals(run, buffers, slots, 0, f"seed {rounds}")
        verdicts, n_jobs = _verdicts(run, proposals)
        tried += len(proposals)
        tokens += sum(len(p.response_token_ids) for p in proposals)
        jobs += n_jobs
        for p in proposals:
            v = verdicts[p.id]
            reasons[v.reason] += 1
            if v.valid:
                buffers.add(v.task)
    sizes = {tt: buffers.size(tt) for tt in cfg.tasks.task_types}
    log.info("seeding: %d rounds, %d proposals, buffers %s, reasons %s", rounds, tried, sizes, dict(reasons))
    return Seeded(buffers, rounds, tried, dict(reasons), sizes, tokens, jobs)


# ---------------------------------------------------------------- steps 1..N

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
    return Proposed(_proposals(run, buffers, propose_slots(run, matched, population), step, "propose"))


def validate(run: Run, proposed: Proposed, buffers: BufferSet) -> Validated:
    """Sandbox validation of every proposal (spec 3); valid ones enter their type's buffer (spec 10)."""
    verdicts, jobs = _verdicts(run, proposed.proposals)
    buffers = BufferSet.from_json(buffers.to_json())  # the step's input stays as it was
    for p in proposed.proposals:
        v = verdicts[p.id]
        if v.valid:
            v = verdicts[p.id] = replace(v, task=replace(v.task, teacher_id=p.teacher, task_id=p.id))
            buffers.add(v.task)
    return Validated(verdicts, buffers, jobs)


def solve(run: Run, step: int, matched: Matched, proposed: Proposed, validated: Validated,
          population: Population) -> Solved:
    """Every matched student x valid task x n samples, in one multi-LoRA batch (spec 2)."""
    requests, tasks = student_requests(run, step, matched, proposed, validated, population)
    gen = generate(run, requests, "solve")
    attempts = []
    for p, rid, student in tasks:
        g = gen[rid]
        for k, c in enumerate(g.completions):
            attempts.append(Attempt(id=f"{p.id}/a{k}", task_id=p.id, student=student, match_id=p.match_id,
                                    text=c.text, prompt_token_ids=g.prompt_token_ids,
                                    response_token_ids=list(c.token_ids), finish_reason=c.finish_reason))
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
            messages=_messages(student_messages(v.task)),
            sampling=_sampling(run, n, run.cfg.generation.max_new_tokens, run.seed("gen", step, rid))))
        tasks.append((p, rid, student))
    return requests, tasks


def check(run: Run, solved: Solved, validated: Validated) -> Checked:
    """The sandbox (or an external verifier) checks each attempt; rho per task = mean correctness (spec 2, 4)."""
    outcomes: dict[str, str] = {}
    jobs = 0
    if solved.attempts:
        request = sandbox_pb2.CheckAnswersRequest(attempts=[
            sandbox_pb2.Attempt(attempt_id=a.id, task=validated.verdicts[a.task_id].task.to_pb(),
                                response_text=a.text) for a in solved.attempts])
        resp = run.services.sandbox.CheckAnswers(request)
        outcomes, jobs = {r.attempt_id: r.outcome for r in resp.results}, resp.jobs
    by_task: dict[str, list[str]] = defaultdict(list)
    for a in solved.attempts:
        by_task[a.task_id].append(outcomes[a.id])
    return Checked(outcomes, {task_id: mean_rho(outs) for task_id, outs in by_task.items()}, jobs)


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
        applied, duplicates = resp.applied, resp.duplicates
    ratings = league.GetRatings(league_pb2.GetRatingsRequest(run_id=run.run_id)).ratings
    return Rated(applied, duplicates, [r.match_id for r in results],
                 {r.adapter_id: Rating(r.role, r.mu, r.sigma, r.conservative_skill) for r in ratings})


def rollouts(rewards, proposed: Proposed, validated: Validated, solved: Solved, checked: Checked
             ) -> dict[str, list[Rollout]]:
    """Rewards of spec 4 attached to every proposal and attempt, grouped by the adapter that wrote them; empty
    responses and attempts the verifier could not judge are left out."""
    out: dict[str, list[Rollout]] = defaultdict(list)
    for p in proposed.proposals:
        v = validated.verdicts[p.id]
        reward = teacher_reward(v.valid, checked.rho.get(p.id), rewards.teacher_reward, rewards)
        out[p.teacher].append(Rollout("teacher", p.task_type, reward, p.prompt_token_ids, p.response_token_ids))
    task_type = {p.id: p.task_type for p in proposed.proposals}
    for a in solved.attempts:
        reward = student_reward(checked.outcomes[a.id], rewards)
        if reward is not None:  # verifier_error: excluded from rewards
            out[a.student].append(Rollout("student", task_type[a.task_id], reward, a.prompt_token_ids,
                                          a.response_token_ids))
    return {k: [r for r in v if r.response_token_ids] for k, v in out.items()}


def usage(proposed: Proposed, validated: Validated, solved: Solved, checked: Checked,
          batch: dict[str, list[Rollout]], updated: Updated) -> Accounted:
    """The compute of one step (spec 14), from its records: tokens each adapter generated (its proposals or
    attempts) and was trained on (prompt and response of its rollouts, for the adapters that were updated), and the
    sandbox jobs of validation and checking."""
    generated: Counter = Counter()
    for p in proposed.proposals:
        generated[p.teacher] += len(p.response_token_ids)
    for a in solved.attempts:
        generated[a.student] += len(a.response_token_ids)
    trained = Counter({adapter_id: sum(len(r.prompt_token_ids) + len(r.response_token_ids) for r in rows)
                       for adapter_id, rows in batch.items() if adapter_id in updated.stats})
    adapters = {a: Usage(generated[a], trained[a]) for a in sorted(set(generated) | set(trained))}
    total = sum(adapters.values(), Usage()) + Usage(sandbox_jobs=validated.sandbox_jobs + checked.sandbox_jobs)
    return Accounted(adapters, total)


def seed_usage(warmed: WarmStarted, seeded: Seeded) -> Accounted:
    """The compute of step 0: the warm start's fit (counted whether this run fitted it or found it cached: every
    run that starts from it pays for it, so two arms compare alike) and the seeding proposals with their
    validation, written by the warm adapter or the bare base model ("base")."""
    adapters = {}
    if warmed.tokens:
        adapters["warmstart"] = Usage(trained_tokens=warmed.tokens)
    if seeded.generated_tokens:
        adapters[warmed.adapter_id or "base"] = Usage(generated_tokens=seeded.generated_tokens)
    return Accounted(adapters, sum(adapters.values(), Usage()) + Usage(sandbox_jobs=seeded.sandbox_jobs))


def account(run: Run, step: int, spent: Accounted) -> Accounted:
    """Record what the step spent in the league (per adapter, and the sandbox jobs at run level)."""
    rows = [league_pb2.Usage(adapter_id=a, generated_tokens=u.generated_tokens, trained_tokens=u.trained_tokens)
            for a, u in spent.adapters.items()]
    rows.append(league_pb2.Usage(adapter_id="", sandbox_jobs=spent.total.sandbox_jobs))
    run.services.league.RecordCompute(league_pb2.RecordComputeRequest(run_id=run.run_id, step=step, usage=rows))
    return spent


def _already_updated(store: ArtifactStore, adapter_id: str, version: int, step: int) -> AdapterRef | None:
    """The version a crashed earlier attempt of this update already wrote, if any (recognised by its step)."""
    nxt = store.ref(adapter_id, version + 1)
    if store.exists(nxt) and store.read(nxt).meta.get("step") == step:
        return nxt
    return None


def update(run: Run, step: int, population: Population, batch: dict[str, list[Rollout]]) -> Updated:
    """One TRR++ step per adapter with rollouts, all in one UpdateBatch (batched across adapters where it pays,
    spec 5); the new versions are loaded into inference."""
    after = dict(population)
    requests, stats, reused = [], {}, []
    for adapter_id, rows in sorted(batch.items()):
        if not rows or adapter_id not in after:
            continue
        version = after[adapter_id].version
        done = _already_updated(run.store, adapter_id, version, step)
        if done is not None:
            after[adapter_id] = Member(after[adapter_id].role, done.version)
            stats[adapter_id] = UpdateStats(**run.store.read(done).meta.get("stats", {}))
            reused.append(adapter_id)
            continue
        requests.append(trainer_pb2.UpdateRequest(
            adapter=run.ref(adapter_id, version), seed=run.seed("update", step, adapter_id), step=step,
            rollouts=[trainer_pb2.Rollout(prompt_token_ids=r.prompt_token_ids, response_token_ids=r.response_token_ids,
                                          reward=r.reward, task_type=r.task_type, role=r.role) for r in rows]))
    mode = ""
    if requests:
        resp = run.services.trainer.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=requests))
        mode = resp.mode
        for r in resp.results:
            ref = ref_from_pb(r.adapter)
            after[ref.adapter_id] = Member(after[ref.adapter_id].role, ref.version)
            s = r.stats
            stats[ref.adapter_id] = UpdateStats(s.loss, s.grad_norm, s.mean_abs_advantage, s.tokens, s.seconds,
                                                s.rollouts)
    _refresh_inference(run, population, after)
    return Updated(after, stats, mode, reused)


def _refresh_inference(run: Run, before: Population, after: Population) -> None:
    """Load every new version into inference and drop the versions no one will ask for again."""
    inference = run.services.inference
    for adapter_id, m in after.items():
        old = before.get(adapter_id)
        if old is not None and old.version == m.version:
            continue
        inference.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=run.ref(adapter_id, m.version)))
        if old is not None:
            _unload(run, adapter_id, old.version)
    for adapter_id in before:
        if adapter_id not in after:
            _unload(run, adapter_id, 0)


def _unload(run: Run, adapter_id: str, version: int) -> None:
    try:
        run.services.inference.UnloadAdapter(inference_pb2.UnloadAdapterRequest(
            adapter=common_pb2.AdapterRef(adapter_id=adapter_id, version=version)))
    except ServiceError as e:  # not resident (evicted already): nothing to drop
        log.debug("unload %s v%d: %s", adapter_id, version, e.message)


def _pick_operator(run: Run, step: int, i: int) -> str:
    mix = {k: v for k, v in run.cfg.evolution.operator_mix.items() if v > 0}
    names = sorted(mix)
    return run.rng("operator", step, i).choices(names, weights=[mix[n] for n in names])[0]


def evolve(run: Run, step: int, population: Population) -> Evolved:
    """Replace the worst ceil(gamma N) of each sub-population by children of survivors (spec 8-9)."""
    cfg, s = run.cfg, run.services
    after = dict(population)
    selection = s.league.SelectForReplacement(league_pb2.SelectForReplacementRequest(
        run_id=run.run_id, step=step, seed=run.seed("select", step)))
    n_parents = {o.name: o.n_parents for o in s.evolver.ListOperators(evolver_pb2.ListOperatorsRequest()).operators}
    events = []
    for i, rep in enumerate(selection.replacements):
        op = _pick_operator(run, step, i)
        parents = list(rep.parent_ids)[: n_parents.get(op, 1)]
        if len(parents) < n_parents.get(op, 1):
            op = next(o for o in sorted(n_parents) if n_parents[o] == 1)
            parents = parents[:1]
        child_id = f"{run.run_id}.{rep.role[0].upper()}{step}c{i}"
        seed_ = run.seed("breed", step, i)
        if run.store.versions(child_id):  # a retried evolve: the child was written already
            child = run.store.ref(child_id, 1)
            params_json = json.dumps(run.store.read(child).meta.get("params", {}), sort_keys=True)
            change, eff_rank = math.nan, math.nan
        else:
            bred = s.evolver.Breed(evolver_pb2.BreedRequest(
                parents=[run.ref(p, after[p].version) for p in parents], operator=op, seed=seed_, child_id=child_id))
            child = ref_from_pb(bred.child)
            params_json, change, eff_rank = bred.params_json, bred.relative_change, bred.effective_rank
        s.league.RecordChild(league_pb2.RecordChildRequest(
            run_id=run.run_id, child_id=child_id, role=rep.role, parent_ids=parents, operator=op,
            params_json=params_json, seed=seed_, step=step, retire_id=rep.retire_id, rank=cfg.lora.rank))
        s.trainer.AdoptAdapter(trainer_pb2.AdoptAdapterRequest(adapter=ref_to_pb(child), role=rep.role))
        s.trainer.DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id=rep.retire_id))
        after.pop(rep.retire_id, None)
        after[child_id] = Member(rep.role, child.version)
        events.append(EvolutionEvent(step, rep.role, rep.retire_id, child_id, parents, op, change, eff_rank))
    _refresh_inference(run, population, after)
    return Evolved(after, events)
