"""The workload of bench.inference: the batches a training step sends (coordinator/phases.py builds them) from a
population of random adapters, buffers of warm-start seed tasks and a seeded draw of which proposals are valid."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

from bench.harness import random_adapters

N_ADAPTERS = 8
RANK = 32
STEP = 1  # the step the batches are seeded for
VALID_SHARE = 0.6  # of proposals drawn valid (bench.step measured 0.63 on SmolLM2 after the warm start)
WARMUP_TOKENS = 4


@dataclass(frozen=True)
class Shape:
    """Who plays in one workload: teacher and student adapter indices, proposals per teacher and task type."""

    teachers: tuple[int, ...]
    students: tuple[int, ...]
    proposals: int


SHAPES = {"large": Shape(tuple(range(N_ADAPTERS)), tuple(range(N_ADAPTERS)), 1),
          "small": Shape((0, 1), (2, 3), 2)}
SUFFIX = {"large": "", "small": "_small"}


def make_store(model, root: Path):
    from populora.config import ALL_TARGET_MODULES
    from populora.store import ArtifactStore

    store = ArtifactStore(root)
    return store, random_adapters(store, model, ALL_TARGET_MODULES, RANK, N_ADAPTERS, "bench-")


def bench_config(model: str | None, workdir: Path, new_tokens: int, preset: str = "cpu-smol",
                 extra: tuple[str, ...] = ()):
    """A preset (`cpu-smol` unless told) on this model (None: the preset's own), with the bench's adapters (rank 32,
    all projections), store and SQLite database, then the `extra` overrides."""
    from populora.config import ALL_TARGET_MODULES, load_config

    overrides = [f"run.output_dir={workdir}", f"store.root={workdir / 'store'}",
                 f"league.db_url=sqlite:///{workdir / 'league.sqlite'}", f"lora.rank={RANK}",
                 f"lora.alpha={2 * RANK}", f"generation.max_lora_rank={RANK}",
                 f"generation.max_resident_adapters={N_ADAPTERS}",
                 "services.tls.enabled=false",  # in one process: the preset's TLS between services has no connection
                 *extra]
    if model is not None:
        overrides.insert(0, f"model.name={model}")
    cfg = load_config(preset=preset, overrides=overrides, env=False)
    cfg.lora.target_modules = list(ALL_TARGET_MODULES)
    if new_tokens:
        g = cfg.generation
        g.max_new_tokens = min(g.max_new_tokens, new_tokens)
        g.teacher_max_new_tokens = min(g.teacher_max_new_tokens, new_tokens)
    return cfg


@dataclass
class Workload:
    """One step's generation as the loop sees it: the matches, the population, the buffers, and which proposals
    turn out valid (with the task each becomes)."""

    name: str
    matched: object  # populora.records.Matched
    population: dict
    buffers: object  # populora.tasks.BufferSet
    valid: dict  # proposal id -> Triplet

    def validated(self, proposed):
        """The Validated record of the proposals: those drawn valid carry their seed task."""
        from populora.records import Validated, Verdict

        verdicts = {p.id: Verdict(True, "ok", "", self.valid[p.id]) if p.id in self.valid else
                    Verdict(False, "no_answer", "drawn invalid by the benchmark") for p in proposed.proposals}
        return Validated(verdicts, self.buffers)


def seed_tasks(run) -> dict:
    """Per task type, the warm start's seed tasks, outputs computed by the sandbox service."""
    from coordinator.run.phases.warmstart import verified_seed_tasks

    return {tt: [task for _, task in pairs] for tt, pairs in verified_seed_tasks(run).items()}


def make_workload(run, name: str, shape: Shape, ids: list[str], tasks: dict,
                  versions: dict[str, int] | None = None) -> Workload:
    """Matches of every teacher x task type, students drawn with weights 1/(k+1) (uneven rows per student), buffers
    holding seed_buffer_size seed tasks per type, a VALID_SHARE draw of valid proposals. Members play version 1
    unless `versions` names theirs."""
    from coordinator.run.phases import propose_slots
    from populora.records import Matched, Member, Pairing
    from populora.tasks import BufferSet

    cfg = run.cfg
    rng = random.Random(f"bench.inference/{name}")
    buffers = BufferSet(cfg.tasks.buffer_cap, seed=cfg.run.seed)
    n_buffered = cfg.tasks.seed_buffer_size
    for tt in cfg.tasks.task_types:
        for task in tasks[tt][:n_buffered]:
            buffers.add(task)
    students = [ids[k] for k in shape.students]
    weights = [1.0 / (k + 1) for k in range(len(students))]
    pairings = [Pairing(f"{name}/{ids[t]}/{tt}", ids[t], rng.choices(students, weights)[0], tt)
                for t in shape.teachers for tt in cfg.tasks.task_types]
    population = {ids[k]: Member("both", (versions or {}).get(ids[k], 1))
                  for k in sorted(set(shape.teachers) | set(shape.students))}
    matched = Matched(pairings)
    valid, cursor = {}, {tt: n_buffered for tt in cfg.tasks.task_types}
    for slot in propose_slots(run, matched, population):
        if rng.random() < VALID_SHARE:
            pool = tasks[slot.task_type]
            valid[slot.id] = pool[cursor[slot.task_type] % len(pool)]
            cursor[slot.task_type] += 1
    return Workload(name, matched, population, buffers, valid)


def phase_requests(run, w: Workload) -> list[list]:
    """The propose and the solve batch of a workload as the phases build them: the GenerationRequest messages a
    step sends to inference."""
    from coordinator.run.phases import propose_slots, student_requests, teacher_requests
    from populora.records import Proposal, Proposed

    slots = propose_slots(run, w.matched, w.population)
    propose, _ = teacher_requests(run, w.buffers, slots, STEP)
    as_slots = Proposed([Proposal(s.id, s.task_type, s.teacher, s.match_id, s.version, "", [], []) for s in slots])
    solve, _ = student_requests(run, STEP, w.matched, as_slots, w.validated(as_slots), w.population)
    return [list(batch) for batch in (propose, solve) if batch]


def phase_batches(run, w: Workload) -> list[list]:
    """The propose and the solve batch of a workload as the phases build them, as the inference service reads them."""
    from services.inference.service import request_from_pb

    default = run.cfg.generation.max_new_tokens
    return [[request_from_pb(r, default) for r in batch] for batch in phase_requests(run, w)]


def warmup_batch(batches: list[list]) -> list:
    """The warm-up every engine runs: the first batch with WARMUP_TOKENS new tokens per row."""
    return [dataclasses.replace(r, sampling=dataclasses.replace(r.sampling, max_new_tokens=WARMUP_TOKENS))
            for r in batches[0]]


def without_adapters(batches: list[list]) -> list[list]:
    return [[dataclasses.replace(r, adapter=None) for r in batch] for batch in batches]


def by_adapter(batches: list[list]) -> list[list]:
    """Each batch split into one batch per adapter, in order of first appearance."""
    out = []
    for batch in batches:
        keys = list(dict.fromkeys(r.adapter.key for r in batch))
        out += [[r for r in batch if r.adapter.key == key] for key in keys]
    return out


def open_run(cfg, store, base):
    """A Run whose services are the ones generation needs, built as the embedded run builds them: the sandbox (the
    seed tasks' outputs) and, given a base model, the inference service on it. The step's other services are not
    called by these phases."""
    from coordinator.clients.services import Services
    from coordinator.run.phases import Run
    from services.sandbox.service import SandboxService

    inference = None
    if base is not None:
        from services.inference.service import InferenceService

        inference = InferenceService.from_config(cfg, store=store, base=base)
    services = Services(inference=inference, trainer=None, league=None, sandbox=SandboxService.from_config(cfg),
                        evolver=None)
    return Run("bench-inference", cfg, services, store), services

