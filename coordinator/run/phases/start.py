"""Step 0 of a run: the population created and initialised, then the buffers seeded (spec 10, 13)."""

from __future__ import annotations

import logging
from collections import Counter

from coordinator.run.phases.proposals import Slot, sandbox_verdicts, write_proposals
from coordinator.run.phases.run import Run
from populora.config.schema import public_yaml
from populora.pb import common_pb2, evolver_pb2, league_pb2, trainer_pb2
from populora.records import Initialized, Member, Population, Seeded, WarmStarted
from populora.rpc import ref_from_pb, ref_to_pb
from populora.tasks import BufferSet

log = logging.getLogger(__name__)


def init(run: Run, warmed: WarmStarted) -> Initialized:
    """Create the run in the league, initialise every adapter in the trainer (B = 0, or the warm start's weights:
    spec 13) at its initial rank (lora.teacher_ranks / student_ranks, spec 9 "Mixed ranks"), register them."""
    cfg, league, trainer = run.cfg, run.services.league, run.services.trainer
    league.CreateRun(league_pb2.CreateRunRequest(run_id=run.run_id, config_yaml=public_yaml(cfg), mode=cfg.run.mode))
    if cfg.run.mode == "baseline":
        members = [(f"{run.run_id}.B0", "both", cfg.lora.rank)]
    else:
        members = [(f"{run.run_id}.T{i}", "teacher", cfg.lora.initial_rank("teacher", i))
                   for i in range(cfg.population.n_teachers)]
        members += [(f"{run.run_id}.S{i}", "student", cfg.lora.initial_rank("student", i))
                    for i in range(cfg.population.n_students)]
    population: Population = {}
    ranks: dict[str, int] = {}
    for adapter_id, role, rank in members:
        if run.store.versions(adapter_id):  # a retried init: the adapter was written already
            ref = run.store.ref(adapter_id, 1)
            trainer.AdoptAdapter(trainer_pb2.AdoptAdapterRequest(adapter=ref_to_pb(ref), role=role))
        else:
            resp = trainer.InitAdapter(trainer_pb2.InitAdapterRequest(
                adapter_id=adapter_id, role=role, rank=rank, target_modules=cfg.lora.target_modules,
                seed=run.seed("init", adapter_id), lora_alpha=cfg.lora.alpha, init_from=_start(run, warmed, rank)))
            ref = ref_from_pb(resp.adapter)
        population[adapter_id] = Member(role, ref.version)
        ranks[adapter_id] = rank
    league.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id=run.run_id, adapters=[
        league_pb2.AdapterSpec(adapter_id=a, role=m.role, rank=ranks[a], created_step=0)
        for a, m in population.items()]))
    return Initialized(population)


def _start(run: Run, warmed: WarmStarted, rank: int) -> common_pb2.AdapterRef | None:
    """What a member of `rank` starts from: the warm start's adapter (spec 13), brought to that rank by the evolver's
    R1 at ε = 0 when it has another (every component kept, B = 0 for the new ones, when it grows; its top `rank`
    singular triplets when it shrinks: spec 9, "Mixed ranks"), made once per rank and reused; None without one."""
    if not warmed.adapter_id:
        return None
    warm = run.ref(warmed.adapter_id, warmed.version)
    if run.store.rank(warmed.adapter_id) == rank:
        return warm
    copy_id = f"{warmed.adapter_id}-r{rank}"
    if not run.store.versions(copy_id):
        bred = run.services.evolver.Breed(evolver_pb2.BreedRequest(
            parents=[warm], operator="R1", params={"rank": float(rank), "epsilon": 0.0}, seed=run.seed("warm", rank),
            child_id=copy_id))
        log.info("warm start brought to rank %d as %s: relative change %.4g", rank, copy_id, bred.relative_change)
    return run.ref(copy_id, 1)


def seed(run: Run, warmed: WarmStarted) -> Seeded:
    """The members' starting policy (the warm start's adapter, else the bare base model) proposes, without updates,
    until each buffer holds seed_buffer_size valid triplets (spec 10, 13)."""
    cfg = run.cfg
    buffers = BufferSet(cfg.tasks.buffer_cap, seed=cfg.run.seed, task_types=cfg.tasks.task_types)
    target = cfg.tasks.seed_buffer_size
    rounds, reasons, tried, tokens, jobs, cpu = 0, Counter(), 0, 0, 0, 0.0
    per_round = max(2, cfg.tasks.proposals_per_teacher * max(1, cfg.population.n_teachers))
    for rounds in range(1, cfg.tasks.seed_max_rounds + 1):
        # the identity seed counts as one entry; stop once every type holds `target` beyond it
        needed = {tt: target - (buffers.size(tt) - 1) for tt in cfg.tasks.task_types}
        needed = {tt: n for tt, n in needed.items() if n > 0}
        if not needed:
            break
        slots = [Slot(f"seed/{rounds}/{tt}/{k}", tt, version=warmed.version, writer=warmed.adapter_id)
                 for tt, n in needed.items() for k in range(min(n, per_round))]
        proposals = write_proposals(run, buffers, slots, 0, f"seed {rounds}")
        verdicts, n_jobs, n_cpu = sandbox_verdicts(run, proposals)
        tried += len(proposals)
        tokens += sum(len(p.response_token_ids) for p in proposals)
        jobs += n_jobs
        cpu += n_cpu
        for p in proposals:
            v = verdicts[p.id]
            reasons[v.reason] += 1
            if v.valid:
                buffers.add(v.task)
    sizes = {tt: buffers.size(tt) for tt in cfg.tasks.task_types}
    log.info("seeding: %d rounds, %d proposals, buffers %s, reasons %s", rounds, tried, sizes, dict(reasons))
    return Seeded(buffers, rounds, tried, dict(reasons), sizes, tokens, jobs, cpu)
