"""The update of a step: rewards attached to the step's rollouts (spec 4), one TRR++ step per adapter (spec 5), and
the new versions loaded into inference."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import replace

from coordinator.run.phases.run import Run
from coordinator.run.phases.staleness import Staleness, behaviour_logprobs, bound
from populora.pb import common_pb2, inference_pb2, trainer_pb2
from populora.records import (
    AdapterDigest,
    Checked,
    Member,
    Population,
    Proposed,
    Rollout,
    Solved,
    Updated,
    UpdateStats,
    Validated,
)
from populora.rpc import ServiceError, ref_from_pb
from populora.store import AdapterRef, ArtifactStore
from populora.tasks import student_reward, teacher_reward

log = logging.getLogger(__name__)


def rollouts(rewards, proposed: Proposed, validated: Validated, solved: Solved, checked: Checked
             ) -> dict[str, list[Rollout]]:
    """Rewards of spec 4 attached to every proposal and attempt, grouped by the adapter that wrote them; empty
    responses and attempts the verifier could not judge are left out."""
    out: dict[str, list[Rollout]] = defaultdict(list)
    for p in proposed.proposals:
        v = validated.verdicts[p.id]
        reward = teacher_reward(v.valid, checked.rho.get(p.id), rewards.teacher_reward, rewards, p.task_type)
        out[p.teacher].append(Rollout("teacher", p.task_type, reward, p.prompt_token_ids, p.response_token_ids,
                                      p.version, p.logprobs, p.truncated_fraction))
    task_type = {p.id: p.task_type for p in proposed.proposals}
    for a in solved.attempts:
        reward = student_reward(checked.outcomes[a.id], rewards)
        if reward is not None:  # verifier_error: excluded from rewards
            out[a.student].append(Rollout("student", task_type[a.task_id], reward, a.prompt_token_ids,
                                          a.response_token_ids, a.version, a.logprobs, a.truncated_fraction))
    return {k: [r for r in v if r.response_token_ids] for k, v in out.items()}


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
    requests, stats, reused, mode = [], {}, [], ""
    k = run.cfg.loop.max_staleness
    temperature = run.cfg.generation.temperature  # every proposal and attempt was sampled at it (sampling_params)
    stale: dict[str, Staleness] = {}
    for adapter_id, rows in sorted(batch.items()):
        if not rows or adapter_id not in after:
            continue
        version = after[adapter_id].version
        if k:  # spec 16: rollouts of versions more than k behind are dropped
            stale[adapter_id] = bound(rows, version, k)
            rows = stale[adapter_id].kept
            if not rows:
                continue
        done = _already_updated(run.store, adapter_id, version, step)
        if done is not None:
            meta = run.store.read(done).meta
            after[adapter_id] = Member(after[adapter_id].role, done.version)
            stats[adapter_id] = UpdateStats(**meta.get("stats", {}))
            mode = meta.get("mode", "")  # how the trainer made it, as the record of an uninterrupted update says
            reused.append(adapter_id)
            continue
        requests.append(trainer_pb2.UpdateRequest(
            adapter=run.ref(adapter_id, version), seed=run.seed("update", step, adapter_id), step=step,
            rollouts=[trainer_pb2.Rollout(prompt_token_ids=r.prompt_token_ids, response_token_ids=r.response_token_ids,
                                          reward=r.reward, task_type=r.task_type, role=r.role,
                                          old_logprobs=behaviour_logprobs(r, k), temperature=temperature,
                                          truncated_fraction=r.truncated_fraction) for r in rows]))
    trained = time.perf_counter()
    if requests:
        resp = run.services.trainer.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=requests))
        trained = time.perf_counter()
        mode = resp.mode
        for r in resp.results:
            ref = ref_from_pb(r.adapter)
            after[ref.adapter_id] = Member(after[ref.adapter_id].role, ref.version)
            s = r.stats
            stats[ref.adapter_id] = UpdateStats(s.loss, s.grad_norm, s.mean_abs_advantage, s.tokens, s.seconds,
                                                s.rollouts, ratio_dev=s.ratio_dev, clipped_fraction=s.clipped_fraction,
                                                truncated_fraction=s.truncated_fraction)
    for adapter_id, st in stale.items():
        if adapter_id in stats:
            stats[adapter_id] = replace(stats[adapter_id], staleness=st.histogram, dropped=st.dropped)
    refresh_inference(run, population, after)
    served_ms = (time.perf_counter() - trained) * 1000 if k else 0.0  # update_to_served_ms (a clock: overlap only)
    return Updated(after, stats, mode, reused, served_ms, member_digests(run.store, after))


def member_digests(store: ArtifactStore, population: Population) -> dict[str, AdapterDigest]:
    """Every member's stored version, exactly: its weights' and optimizer state's digests (populora.store)."""
    return {a: AdapterDigest(*store.digests(store.ref(a, m.version))) for a, m in sorted(population.items())}


def refresh_inference(run: Run, before: Population, after: Population) -> None:
    """Load every new version into inference and drop the versions no one will ask for again."""
    inference = run.services.inference
    for adapter_id, m in after.items():
        old = before.get(adapter_id)
        if old is not None and old.version == m.version:
            continue
        inference.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=run.ref(adapter_id, m.version)))
        if old is not None and not run.cfg.loop.max_staleness:  # overlapped: the next games may still play it (LRU)
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
