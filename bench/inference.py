"""Multi-LoRA generation throughput on the batches a training step sends: our batched LoRA path vs PEFT's
adapter_names vs one adapter at a time vs the bare base, and the training loop's own generation phases on the same
batches; plus resident memory per adapter. Prints one JSON object.

    python -m bench.inference --json [--model smollm2-135m] [--new-tokens N] [--threads N] [--skip-vllm]
                              [--workloads large,small] [--rounds N]

The batches are the loop's (coordinator/phases/ builds them): `propose` (every match's teacher prompts, built from
the buffers by populora/tasks/prompts.py) then `solve` (every valid task x n samples for its match's student), with
the `cpu-smol` preset's sampling (temperature, top-p, per-request seeds, its token budgets unless --new-tokens caps
them) and end-of-sequence, so rows finish early and unevenly. 8 random adapters of rank 32 on all seven projections.
The buffers hold warm-start seed tasks whose outputs the sandbox service computed; a seeded draw makes a share of the
proposals valid (their tasks are seed tasks), and each match's student is drawn with uneven weights, so students
get uneven numbers of rows. Workloads (key suffix):
  large ("")      every adapter teaches every task type (1 proposal each) and students are drawn from all 8
  small (_small)  one `cpu-smol` step: 2 teachers x 3 task types x 2 proposals, 2 students
Every engine runs the same warm-up batch (the small propose batch, 4 new tokens) before it is measured. Keys:
  mixed_tokens_per_s          the hf backend (our batched LoRA layer), each phase's batch as one batch
  mixed_gather_tokens_per_s   the same with the gather+bmm variant of the layer (kept for comparison)
  peft_mixed_tokens_per_s     plain PEFT `generate` with `adapter_names`, same rows (a request's n samples as n rows),
                              same sampling and eos; tokens up to each row's end
  sequential_tokens_per_s     the hf backend, one adapter's rows at a time
  base_tokens_per_s           the same rows with no adapter (the ceiling)
  loop_tokens_per_s           `phases.propose` then `phases.solve` through the inference service built from the config
                              as the embedded run builds it (its `generation.threads`), tokens counted from the records
  lora_overhead = base / mixed, mixed_vs_peft = mixed / peft, loop_vs_bench = loop / mixed; mixed and base alternate
                              for --rounds rounds (default 2), each over all its rounds; lora_overhead_rounds is
                              the ratio in each round, the spread of the measurement
  rows, tokens, finished_early   rows of the workload (requests x n), tokens mixed generated, and the share of its
                              rows that ended on eos or a stop string before their budget
and rss_mb_1_adapter, rss_mb_8_adapters, adapter_mb (one adapter's tensors), rss_mb_per_extra_adapter. Threads are
torch's default unless --threads; `loop_threads` is the loop's (-1: the cores other processes leave free, measured
before each batch). `targets_met` checks lora_overhead <= 1.25, lora_overhead_small <= 1.6, mixed_vs_peft(_small)
>= 1.2, rss_mb_per_extra_adapter <= 1.2 adapter_mb and loop_vs_bench(_small) >= 0.8. When .venv-vllm exists
(make test-vllm), vllm_cpu_mixed_tokens_per_s: vLLM for CPU, bf16, the large workload.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def make_store(model, root: Path):
    from populora.config import ALL_TARGET_MODULES
    from populora.lora import random_lora_weights
    from populora.store import ArtifactStore, lora_config_dict

    store = ArtifactStore(root)
    config = lora_config_dict(RANK, 2.0 * RANK, ALL_TARGET_MODULES)
    refs = [store.save(f"bench-{i}", random_lora_weights(model, ALL_TARGET_MODULES, RANK, seed=i, std=0.01), config)
            for i in range(N_ADAPTERS)]
    return store, refs


def bench_config(model: str, workdir: Path, new_tokens: int):
    """The `cpu-smol` preset on this model, with the bench's adapters (rank 32, all projections) and store."""
    from populora.config import ALL_TARGET_MODULES, load_config

    overrides = [f"model.name={model}", f"run.output_dir={workdir}", f"store.root={workdir / 'store'}",
                 f"league.db_url=sqlite:///{workdir / 'league.sqlite'}", f"lora.rank={RANK}",
                 f"lora.alpha={2 * RANK}", f"generation.max_lora_rank={RANK}",
                 f"generation.max_resident_adapters={N_ADAPTERS}"]
    cfg = load_config(preset="cpu-smol", overrides=overrides, env=False)
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
    from coordinator.warmstart import verified_seed_tasks

    return {tt: [task for _, task in pairs] for tt, pairs in verified_seed_tasks(run).items()}


def make_workload(run, name: str, shape: Shape, ids: list[str], tasks: dict) -> Workload:
    """Matches of every teacher x task type, students drawn with weights 1/(k+1) (uneven rows per student), buffers
    holding seed_buffer_size seed tasks per type, a VALID_SHARE draw of valid proposals."""
    from coordinator.phases import propose_slots
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
    population = {ids[k]: Member("both", 1) for k in sorted(set(shape.teachers) | set(shape.students))}
    matched = Matched(pairings)
    valid, cursor = {}, {tt: n_buffered for tt in cfg.tasks.task_types}
    for slot in propose_slots(run, matched, population):
        if rng.random() < VALID_SHARE:
            pool = tasks[slot.task_type]
            valid[slot.id] = pool[cursor[slot.task_type] % len(pool)]
            cursor[slot.task_type] += 1
    return Workload(name, matched, population, buffers, valid)


def phase_batches(run, w: Workload) -> list[list]:
    """The propose and the solve batch of a workload as the phases build them, as the inference service reads them."""
    from coordinator.phases import propose_slots, student_requests, teacher_requests
    from populora.records import Proposal, Proposed
    from services.inference.service import request_from_pb

    slots = propose_slots(run, w.matched, w.population)
    propose, _ = teacher_requests(run, w.buffers, slots, STEP)
    as_slots = Proposed([Proposal(s.id, s.task_type, s.teacher, s.match_id, s.version, "", [], []) for s in slots])
    solve, _ = student_requests(run, STEP, w.matched, as_slots, w.validated(as_slots), w.population)
    default = run.cfg.generation.max_new_tokens
    return [[request_from_pb(r, default) for r in batch] for batch in (propose, solve) if batch]


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


@dataclass
class Measured:
    tokens: int = 0
    rows: int = 0
    early: int = 0  # rows that ended on eos or a stop string before their budget
    seconds: float = 0.0
    prompt_lengths: list = dataclasses.field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def run_backend(backend, batches: list[list]) -> Measured:
    m = Measured()
    start = time.perf_counter()
    for batch in batches:
        for result in backend.generate(batch):
            m.prompt_lengths.append(len(result.prompt_token_ids))
            for c in result.completions:
                m.tokens += len(c.token_ids)
                m.rows += 1
                m.early += c.finish_reason == "stop"
    m.seconds = time.perf_counter() - start
    return m


def progress(what: str, value) -> None:
    print(f"bench.inference: {what} = {value}", file=sys.stderr, flush=True)


def measure(out: dict, key: str, value: float) -> None:
    out[key] = value
    progress(key, round(value, 2))


def over_runs(runs: list[Measured]) -> float:
    """Tokens per second over several runs of the same batches: all their tokens over all their time."""
    return sum(m.tokens for m in runs) / sum(m.seconds for m in runs)


def bench_hf(base, store, refs, workloads: dict, out: dict, rounds: int = 2) -> None:
    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK, max_resident=N_ADAPTERS)
    for ref in refs:
        backend.load_adapter(ref)
    warm = warmup_batch(workloads["small" if "small" in workloads else "large"])
    try:
        for name, batches in workloads.items():
            sfx = SUFFIX[name]
            # mixed and base alternate for `rounds` rounds and each figure is over all of its rounds, so a change
            # in the machine's speed during the run weighs on both sides of lora_overhead alike
            mixed_runs, base_runs = [], []
            for _ in range(rounds):
                run_backend(backend, [warm])
                mixed_runs.append(run_backend(backend, batches))
                run_backend(backend, [warm])
                base_runs.append(run_backend(backend, without_adapters(batches)))
            mixed = mixed_runs[0]
            measure(out, f"mixed_tokens_per_s{sfx}", over_runs(mixed_runs))
            out[f"rows_{name}"], out[f"tokens_{name}"] = mixed.rows, mixed.tokens
            out[f"finished_early_{name}"] = mixed.early / mixed.rows
            out[f"prompt_tokens_{name}"] = [min(mixed.prompt_lengths), max(mixed.prompt_lengths)]
            measure(out, f"base_tokens_per_s{sfx}", over_runs(base_runs))
            out[f"lora_overhead_rounds{sfx}"] = [round(b.tokens_per_s / m.tokens_per_s, 3)
                                                 for m, b in zip(mixed_runs, base_runs, strict=True)]
            run_backend(backend, [warm])
            measure(out, f"sequential_tokens_per_s{sfx}", run_backend(backend, by_adapter(batches)).tokens_per_s)
            backend.host.multi.mode = "gather"
            run_backend(backend, [warm])
            measure(out, f"mixed_gather_tokens_per_s{sfx}", run_backend(backend, batches).tokens_per_s)
            backend.host.multi.mode = "segments"
    finally:
        backend.host.multi.restore()


def bench_loop(run_of, refs, workloads: dict, plans: dict, out: dict) -> None:
    """The loop's generation: phases.propose then phases.solve through an InferenceService built from the config
    (as the embedded run builds it), adapters loaded through LoadAdapter as the update phase loads them."""
    from coordinator import phases
    from populora.pb import inference_pb2
    from populora.rpc import ref_to_pb

    run = run_of()
    service = run.services.inference
    for ref in refs:
        service.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=ref_to_pb(ref)))
    warm = warmup_batch(workloads["small" if "small" in workloads else "large"])
    out["loop_threads"] = service.backend.threads
    try:
        for name, w in plans.items():
            run_backend(service.backend, [warm])
            t0 = time.perf_counter()
            proposed = phases.propose(run, STEP, w.matched, w.population, w.buffers)
            t1 = time.perf_counter()
            validated = w.validated(proposed)  # the sandbox's verdicts, drawn (not timed: not generation)
            t2 = time.perf_counter()
            solved = phases.solve(run, STEP, w.matched, proposed, validated, w.population)
            seconds = (t1 - t0) + (time.perf_counter() - t2)
            tokens = (sum(len(p.response_token_ids) for p in proposed.proposals) +
                      sum(len(a.response_token_ids) for a in solved.attempts))
            measure(out, f"loop_tokens_per_s{SUFFIX[name]}", tokens / seconds)
            out[f"loop_tokens_{name}"] = tokens
    finally:
        service.backend.host.multi.restore()


def peft_generate(model, tok, eos: list[int], batch: list) -> int:
    """One batch through PEFT's generate: a request's n samples as n rows; the tokens each row generated up to and
    including its first eos."""
    import torch

    from services.inference.backend import encode_prompt

    rows = [r for r in batch for _ in range(r.sampling.n)]
    s = rows[0].sampling
    enc = tok.pad({"input_ids": [encode_prompt(tok, r) for r in rows]}, padding=True, return_tensors="pt")
    torch.manual_seed(s.seed)
    with torch.inference_mode():
        seqs = model.generate(**enc, adapter_names=[r.adapter.key for r in rows], max_new_tokens=s.max_new_tokens,
                              do_sample=s.temperature > 0, temperature=s.temperature or None,
                              top_p=s.top_p if s.temperature > 0 else None, top_k=None,
                              eos_token_id=eos, pad_token_id=tok.pad_token_id)
    new = seqs[:, enc["input_ids"].shape[1]:]
    tokens = 0
    for row in new.tolist():
        ends = [i for i, t in enumerate(row) if t in eos]
        tokens += ends[0] + 1 if ends else len(row)
    return tokens


def bench_peft(base, store, refs, workloads: dict, out: dict) -> None:
    """Plain PEFT: every adapter loaded into one PeftModel, `generate(..., adapter_names=...)`, warmed like ours."""
    from peft import PeftModel

    model = None
    for ref in refs:
        path = str(store.path_of(ref))
        if model is None:
            model = PeftModel.from_pretrained(base.model, path, adapter_name=ref.key)
        else:
            model.load_adapter(path, adapter_name=ref.key)
    model.eval()
    tok, eos = base.tokenizer, base.eos_token_ids
    warm = warmup_batch(workloads["small" if "small" in workloads else "large"])
    try:
        for name, batches in workloads.items():
            peft_generate(model, tok, eos, warm)
            start, tokens = time.perf_counter(), 0
            for batch in batches:
                tokens += peft_generate(model, tok, eos, batch)
            measure(out, f"peft_mixed_tokens_per_s{SUFFIX[name]}", tokens / (time.perf_counter() - start))
    finally:
        model.unload()


def bench_memory(base, store, refs, out: dict) -> None:
    """RSS with the base + 1 adapter resident, then + 7 more (before any generation)."""
    import gc

    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK, max_resident=N_ADAPTERS)
    backend.load_adapter(refs[0])
    gc.collect()
    out["rss_mb_1_adapter"] = rss_mb()
    for ref in refs[1:]:
        backend.load_adapter(ref)
    gc.collect()
    out["rss_mb_8_adapters"] = rss_mb()
    weights = store.read(refs[0]).weights
    out["adapter_mb"] = sum(t.numel() * t.element_size() for t in weights.values()) / 2**20
    out["rss_mb_per_extra_adapter"] = (out["rss_mb_8_adapters"] - out["rss_mb_1_adapter"]) / (N_ADAPTERS - 1)
    backend.host.multi.restore()


def bench_vllm(name: str, new_tokens: int) -> dict:
    """Runs inside .venv-vllm: vLLM for CPU (bf16), the large workload's batches."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from populora.models import load_base_model
    from services.inference.vllm_backend import VllmBackend

    base = load_base_model(name)
    with tempfile.TemporaryDirectory() as tmp:
        store, refs = make_store(base.model, Path(tmp) / "store")
        run, _ = open_run(bench_config(name, Path(tmp), new_tokens), store, None)
        try:
            batches = phase_batches(run, make_workload(run, "large", SHAPES["large"], [r.adapter_id for r in refs],
                                                       seed_tasks(run)))
        finally:
            run.services.close()
        backend = VllmBackend(base.path, name, store, max_loras=N_ADAPTERS, max_lora_rank=RANK,
                              max_cpu_loras=N_ADAPTERS, max_batch=256, max_resident=N_ADAPTERS, dtype="bfloat16",
                              gpu_memory_utilization=0.3, max_model_len=2048)
        for ref in refs:
            backend.load_adapter(ref)
        run_backend(backend, [warmup_batch(batches)])
        return {"vllm_cpu_mixed_tokens_per_s": run_backend(backend, batches).tokens_per_s}


def run_vllm_subprocess(name: str, new_tokens: int) -> dict:
    python = ROOT / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        return {}
    cmd = [str(python), "-m", "bench.inference", "--vllm-only", "--model", name, "--new-tokens", str(new_tokens)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"vllm_cpu_error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def open_run(cfg, store, base):
    """A Run whose services are the ones generation needs, built as the embedded run builds them: the sandbox (the
    seed tasks' outputs) and, given a base model, the inference service on it. The step's other services are not
    called by these phases."""
    from coordinator.phases import Run
    from coordinator.services import Services
    from services.sandbox.service import SandboxService

    inference = None
    if base is not None:
        from services.inference.service import InferenceService

        inference = InferenceService.from_config(cfg, store=store, base=base)
    services = Services(inference=inference, trainer=None, league=None, sandbox=SandboxService.from_config(cfg),
                        evolver=None)
    return Run("bench-inference", cfg, services, store), services


TARGETS = {  # name -> (key, check)
    "lora_overhead<=1.25": ("lora_overhead", lambda v: v <= 1.25),
    "lora_overhead_small<=1.6": ("lora_overhead_small", lambda v: v <= 1.6),
    "mixed_vs_peft>=1.2": ("mixed_vs_peft", lambda v: v >= 1.2),
    "mixed_vs_peft_small>=1.2": ("mixed_vs_peft_small", lambda v: v >= 1.2),
    "rss_mb_per_extra_adapter<=1.2x_adapter_mb": ("extra_adapter_vs_adapter_mb", lambda v: v <= 1.2),
    "loop_vs_bench>=0.8": ("loop_vs_bench", lambda v: v >= 0.8),
    "loop_vs_bench_small>=0.8": ("loop_vs_bench_small", lambda v: v >= 0.8),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--new-tokens", type=int, default=0,
                        help="cap both token budgets at N (0 = the preset's: teacher 160, student 96)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads of the bench (0 = torch's default)")
    parser.add_argument("--workloads", default="large,small", help="comma-separated: large, small")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating rounds of mixed and base behind lora_overhead (default 2)")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--vllm-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        parser.error(f"--workloads: unknown {unknown}; allowed: {sorted(SHAPES)}")
    if args.new_tokens < 0:
        parser.error("--new-tokens must be >= 0")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.vllm_only:
        print(json.dumps(bench_vllm(args.model, args.new_tokens)))
        return 0
    from populora.models import load_base_model

    out: dict = {"model": args.model, "adapters": N_ADAPTERS, "rank": RANK,
                 "threads": torch.get_num_threads(), "dtype": "float32",
                 "load_average_1m_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(args.model, Path(tmp), args.new_tokens)
        out["new_tokens"] = {"propose": cfg.generation.teacher_max_new_tokens, "solve": cfg.generation.max_new_tokens}
        out["sampling"] = {"temperature": cfg.generation.temperature, "top_p": cfg.generation.top_p,
                           "n_samples": cfg.tasks.n_samples}
        base = load_base_model(args.model)
        store, refs = make_store(base.model, Path(tmp) / "store")
        run, services = open_run(cfg, store, None)
        try:
            tasks = seed_tasks(run)
            ids = [r.adapter_id for r in refs]
            plans = {n: make_workload(run, n, SHAPES[n], ids, tasks) for n in names}
            workloads = {n: phase_batches(run, w) for n, w in plans.items()}
        finally:
            services.close()
        for n, batches in workloads.items():
            per_adapter: dict[str, int] = {}
            for r in (r for batch in batches for r in batch):
                per_adapter[r.adapter.adapter_id] = per_adapter.get(r.adapter.adapter_id, 0) + r.sampling.n
            out[f"rows_per_adapter_{n}"] = [per_adapter.get(i, 0) for i in ids]
        bench_memory(base, store, refs, out)
        bench_hf(base, store, refs, workloads, out, rounds=args.rounds)
        loop_run = None

        def run_of():
            nonlocal loop_run
            loop_run, _ = open_run(cfg, store, base)
            return loop_run

        try:
            bench_loop(run_of, refs, workloads, plans, out)
        finally:
            if loop_run is not None:
                loop_run.services.close()
        bench_peft(base, store, refs, workloads, out)
    for n in names:
        sfx = SUFFIX[n]
        out[f"lora_overhead{sfx}"] = out[f"base_tokens_per_s{sfx}"] / out[f"mixed_tokens_per_s{sfx}"]
        out[f"mixed_vs_peft{sfx}"] = out[f"mixed_tokens_per_s{sfx}"] / out[f"peft_mixed_tokens_per_s{sfx}"]
        out[f"loop_vs_bench{sfx}"] = out[f"loop_tokens_per_s{sfx}"] / out[f"mixed_tokens_per_s{sfx}"]
    out["extra_adapter_vs_adapter_mb"] = out["rss_mb_per_extra_adapter"] / out["adapter_mb"]
    if not args.skip_vllm and "large" in names:
        out.update(run_vllm_subprocess(args.model, args.new_tokens))
    out["targets_met"] = {name: check(out[key]) for name, (key, check) in TARGETS.items() if key in out}
    out["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
