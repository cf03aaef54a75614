"""Evolution (spec 8-9): the worst members of each sub-population replaced by children of survivors."""

from __future__ import annotations

import json
import math

from coordinator.run.phases.run import Run
from coordinator.run.phases.update import member_digests, refresh_inference
from populora.pb import evolver_pb2, league_pb2, trainer_pb2
from populora.records import EvolutionEvent, Evolved, Member, Population
from populora.rpc import ref_from_pb, ref_to_pb


def _pick_operator(run: Run, step: int, i: int) -> str:
    mix = {k: v for k, v in run.cfg.evolution.operator_mix.items() if v > 0}
    names = sorted(mix)
    return run.rng("operator", step, i).choices(names, weights=[mix[n] for n in names])[0]


def _rank_params(run: Run, op: str, ranks: list[int], step: int, i: int) -> dict[str, float]:
    """The child's rank when it is not its one parent's (spec 9, "Mixed ranks"): R1 moves to the next larger or the
    next smaller of the run's ranks (each with probability 1/2 where both exist), a crossover of parents of different
    ranks follows evolution.crossover_rank. Given to the evolver explicitly, so an evolver server with another
    config makes the same child; nothing is given in a run of one rank."""
    if op == "R1":
        below = [r for r in run.cfg.ranks if r < ranks[0]]
        above = [r for r in run.cfg.ranks if r > ranks[0]]
        options = ([max(below)] if below else []) + ([min(above)] if above else [])
        return {"rank": float(run.rng("rank", step, i).choice(options))}
    if len(set(ranks)) > 1:
        return {"rank": float(run.cfg.evolution.crossover_child_rank(ranks))}
    return {}


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
        parent_ranks = [run.store.rank(p) for p in parents]
        if run.store.versions(child_id):  # a retried evolve: the child was written already, its record with it
            child = run.store.ref(child_id, 1)
            meta = run.store.read(child).meta
            params_json = json.dumps(meta.get("params", {}), sort_keys=True)
            change, eff_rank = meta.get("relative_change", math.nan), meta.get("effective_rank", math.nan)
        else:
            bred = s.evolver.Breed(evolver_pb2.BreedRequest(
                parents=[run.ref(p, after[p].version) for p in parents], operator=op, seed=seed_, child_id=child_id,
                params=_rank_params(run, op, parent_ranks, step, i)))
            child = ref_from_pb(bred.child)
            params_json, change, eff_rank = bred.params_json, bred.relative_change, bred.effective_rank
        rank = run.store.rank(child_id)
        s.league.RecordChild(league_pb2.RecordChildRequest(
            run_id=run.run_id, child_id=child_id, role=rep.role, parent_ids=parents, operator=op,
            params_json=params_json, seed=seed_, step=step, retire_id=rep.retire_id, rank=rank))
        s.trainer.AdoptAdapter(trainer_pb2.AdoptAdapterRequest(adapter=ref_to_pb(child), role=rep.role))
        s.trainer.DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id=rep.retire_id))
        after.pop(rep.retire_id, None)
        after[child_id] = Member(rep.role, child.version)
        mixed = len(cfg.ranks) > 1
        events.append(EvolutionEvent(step, rep.role, rep.retire_id, child_id, parents, op, change, eff_rank,
                                     rank=rank if mixed else 0, parent_ranks=parent_ranks if mixed else []))
    refresh_inference(run, population, after)
    return Evolved(after, events, member_digests(run.store, after))
