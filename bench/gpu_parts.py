"""The three parts bench.gpu times on the model of bench.gpu_model: multi-LoRA generation, trainer updates
(batched against sequential) and the evolver's operators. Each reports its figures as it takes them."""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.gpu_model import N_ADAPTERS, RANK, TARGETS, Shape, free, lora_layer, sync
from bench.gpu_workload import (
    PRESET,
    build_batches,
    decode_forced,
    eos_bias,
    eos_biased,
    rows_per_adapter,
    sandbox_backend,
)
from bench.harness import Reporter, best_of, peak_mb, random_adapters, reset_peak, rss_mb

# ---------------------------------------------------------------- generation

@dataclass
class Generated:
    """What the generation part sampled, for the trainer part: the preset's config, and each (batch index, request,
    result) of the 8-adapter run (batch 0 is the propose batch, 1 the solve batch)."""

    cfg: object
    results: list[tuple[int, object, object]]


def bench_generation(base, shape: Shape, args, report: Reporter, device) -> Generated:
    """One step's propose and solve batches (bench.gpu_workload) through HfBackend.generate with 8 adapters, sampled
    with end-of-sequence honoured; the bare base on the same rows at the same lengths; one adapter's rows alone.
    Returns the adapters' rollouts, which the trainer part trains on."""
    from populora.store import ArtifactStore
    from services.inference.hf import HfBackend

    new_tokens = args.new_tokens or shape.new_tokens
    mean_tokens = args.mean_new_tokens or shape.mean_new_tokens
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        store = ArtifactStore(Path(tmp) / "store")
        # in the model's dtype (bfloat16 on a GPU, as the trainer's GPU adapters compute); std 0.01 keeps the random
        # model's activations finite
        refs = random_adapters(store, base.model, TARGETS, RANK, N_ADAPTERS, "gpu-", dtype=base.model.dtype)
        sandbox, why = sandbox_backend(args.sandbox)
        report("gpu_workload_sandbox", f"{sandbox} ({why})")
        start = time.perf_counter()
        batches, cfg = build_batches(store, refs, args.proposals or shape.proposals, new_tokens, sandbox, Path(tmp),
                                     shape.seed_programs)
        report("gpu_workload_build_s", time.perf_counter() - start)
        g = cfg.generation
        report("gpu_generation_preset", PRESET)
        report("gpu_generation_requests", {"propose": len(batches[0]), "solve": len(batches[1]) if len(batches) > 1
                                           else 0})
        report("gpu_generation_rows_per_adapter", rows_per_adapter(batches, refs))
        report("gpu_generation_new_tokens", {"propose": cfg.teacher_max_new_tokens, "solve": g.max_new_tokens})
        report("gpu_generation_sampling", {"temperature": g.temperature, "top_p": g.top_p,
                                           "n_samples": cfg.tasks.n_samples, "ignore_eos": False,
                                           "logprobs": any(r.sampling.logprobs for b in batches for r in b)})
        report("gpu_generation_mean_new_tokens", mean_tokens)
        bias = eos_bias(base, batches[0], g.temperature, mean_tokens)
        report("gpu_generation_eos_bias", bias)
        # not packed: eos_biased edits the base's LM head after the backend is built, and a packed copy would not
        # see it (a GPU never packs; this keeps the CPU shape the same path)
        backend = HfBackend(base, store, TARGETS, max_rank=RANK, max_resident=N_ADAPTERS,
                            max_batch=max(sum(r.sampling.n for r in b) for b in batches), prepack=False)
        results: list[tuple[int, object, object]] = []
        try:
            with eos_biased(base, bias):
                _generate_sides(backend, refs, batches, args, report, device, results)
        finally:
            backend.host.multi.restore()  # the plain model again, for the trainer
    return Generated(cfg, results)


def _generate_sides(backend, refs: list, batches: list[list], args, report: Reporter, device,
                    results: list[tuple[int, object, object]]) -> None:
    """Best wall time of each side over the same requests: `8_adapters` (HfBackend.generate, the phases' batches),
    `base` (every row of the adapter run just before it, with no adapter, to the length it had there:
    bench.gpu_workload.decode_forced) and `1_adapter` (the rows of the adapter with the most, alone, sampled).
    `results` gets the last 8-adapter run's (batch index, request, result)s."""
    for ref in refs:
        backend.load_adapter(ref)
    most = max(refs, key=lambda r: sum(q.sampling.n for b in batches for q in b if q.adapter.key == r.key))
    alone = [b for b in ([q for q in batch if q.adapter.key == most.key] for batch in batches) if b]
    lengths: dict[tuple[str, int], int] = {}
    seen: list[tuple] = []  # the lengths of every adapter run: sampling is seeded, so they should all be the same
    tokens: dict[str, int] = {}
    ended: dict[str, int] = {}
    prompts: list[int] = []

    def adapters() -> None:
        lengths.clear()
        ended["eos"] = 0
        prompts.clear()
        results.clear()
        for i, batch in enumerate(batches):
            by_id = {r.request_id: r for r in batch}
            for result in backend.generate(batch):
                results.append((i, by_id[result.request_id], result))
                prompts.append(len(result.prompt_token_ids))
                for c in result.completions:
                    lengths[(result.request_id, c.index)] = len(c.token_ids)
                    ended["eos"] += c.finish_reason == "stop"
        tokens["8_adapters"] = sum(lengths.values())
        seen.append(tuple(sorted(lengths.items())))

    def bare() -> None:
        tokens["base"] = sum(decode_forced(backend, batch, lengths) for batch in batches)

    def one() -> None:
        tokens["1_adapter"] = sum(len(c.token_ids) for batch in alone for result in backend.generate(batch)
                                  for c in result.completions)

    sides = {"8_adapters": adapters, "base": bare, "1_adapter": one}
    wall = best_of(args.repeats, sides, lambda: sync(device))
    rows = list(lengths.values())
    report("gpu_generation_rows", len(rows))
    report("gpu_generation_1_adapter_rows", sum(q.sampling.n for b in alone for q in b))
    report("gpu_generation_prompt_tokens", [min(prompts), max(prompts)])
    report("gpu_generation_row_tokens", {"min": min(rows), "mean": round(sum(rows) / len(rows), 2),
                                         "max": max(rows)})
    report("gpu_generation_finished_by_eos", ended["eos"] / len(rows))
    report("gpu_generation_runs_with_other_lengths", sum(s != seen[0] for s in seen))
    for name in sides:
        report(f"gpu_wall_s_{name}", wall[name])
        report(f"gpu_tokens_{name}", tokens[name])
        report(f"gpu_tokens_per_s_{name}", tokens[name] / wall[name])
    report("gpu_lora_overhead", report.out["gpu_tokens_per_s_base"] / report.out["gpu_tokens_per_s_8_adapters"])
    report("gpu_eight_vs_one_wall_ratio", wall["8_adapters"] / wall["1_adapter"])


# ---------------------------------------------------------------- trainer

def trainer_rollouts(generated: Generated) -> dict[str, list]:
    """The generation part's completions as the trainer's rollouts, by adapter id: the prompt and response token ids
    and the log-probabilities they were sampled with; proposals (batch 0) are the teachers', attempts the students'.

    A random model's programs are all malformed, which would make every reward equal and every advantage 0 (no pass
    at all), so the rewards are 0, 1, 0, ... within each (adapter, task type, role) group: every group of two or
    more rollouts trains, a group of one does not, as in a run."""
    from populora.config import TASK_TYPES
    from services.trainer.trr import Rollout

    out: dict[str, list] = {}
    seen: dict[tuple[str, str, str], int] = {}
    for batch, request, result in generated.results:
        role = "teacher" if batch == 0 else "student"
        task_type = next(t for t in TASK_TYPES if f"/{t}/" in request.request_id)  # the phases' ids carry it
        adapter = request.adapter.adapter_id
        for c in result.completions:
            k = seen[(adapter, task_type, role)] = seen.get((adapter, task_type, role), -1) + 1
            old = list(c.logprobs) if len(c.logprobs) == len(c.token_ids) else None
            out.setdefault(adapter, []).append(Rollout(list(result.prompt_token_ids), list(c.token_ids), float(k % 2),
                                                       task_type, role, old))
    return out


def _update(pool, rollouts: dict[str, list], batched: bool) -> float:
    """One UpdateBatch through AdapterPool.update, every adapter at its held version; the compute seconds it reports
    (a batched update's shared passes once, one by one the sum), store writes apart. Older versions are deleted."""
    from services.trainer.pool import UpdateItem

    done = pool.update([UpdateItem(a, pool.held[a].version, rs) for a, rs in rollouts.items()], batched)
    for ref, _ in done:
        shutil.rmtree(pool.store.version_dir(ref.adapter_id, ref.version - 1), ignore_errors=True)
    seconds = [stats.seconds for _, stats in done]
    return max(seconds) if batched else sum(seconds)


def _rounds(repeats: int, sides: dict[str, Callable[[], float]], device, measured: str = ""
            ) -> tuple[dict[str, float], float]:
    """Each side once untimed, then `repeats` rounds in turn: the least compute seconds of each side, and what the
    first timed call of side `measured` added to the device's memory at its peak (MiB; NaN without one)."""
    for run in sides.values():
        run()
    best, extra = {name: math.inf for name in sides}, math.nan
    for k in range(repeats):
        for name, run in sides.items():
            if k == 0 and name == measured:
                extra, seconds = peak_extra_mb(run, device)
            else:
                seconds = run()
            best[name] = min(best[name], seconds)
    return best, extra


def peak_extra_mb(fn: Callable[[], float], device) -> tuple[float, float]:
    """(MiB `fn` added at its peak, its result): CUDA's allocated memory, or this process's resident set (VmHWM,
    reset just before, over the resident set then)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20, result
    before = rss_mb(trim=True)
    reset_peak()
    result = fn()
    return peak_mb() - before, result


def predicted_extra_mb(pool, rollouts: dict[str, list]) -> tuple[float, int]:
    """The memory model's peak for a batched update of `rollouts` on `pool` (services/trainer/memory.py), its
    micro-batches packed as trr_update packs them; and how many micro-batches that is."""
    from services.trainer import memory
    from services.trainer.trr import UpdateJob, make_rows, pack

    s = pool.trr
    rows, _ = make_rows([UpdateJob(a, rs, [], None) for a, rs in rollouts.items()], s.adv_eps)
    batches = pack([r for r in rows if r.advantage != 0 or s.entropy_coef > 0], s.micro_batch_tokens)
    model = memory.ModelShape.of(pool.host.causal_lm)
    adapters = [memory.AdapterShape.of(list(pool.held[a].params.values()), model.layers, True) for a in rollouts]
    shapes = [(len(b), max(len(r.ids) for r in b), sum(r.n_response for r in b)) for b in batches]
    peak = memory.update_bytes(model, adapters, shapes, s.logprob_chunk_tokens, s.activation_checkpointing,
                               s.entropy_coef > 0, pool.host.device.type == "cpu")
    return peak / memory.MB, len(batches)


def version_dir(model) -> str | None:
    """Where the trainer part's stores go: /dev/shm when it has room for three rounds of versions (every update
    writes each adapter's float32 weights and two moments, 7.4 GB for the 7B shape, and the one before is deleted
    after), else the default temporary directory (a container's /dev/shm is often 64 MB)."""
    from services.trainer import memory

    adapter = memory.AdapterShape.fresh(memory.ModelShape.of(model), RANK, TARGETS)
    need = 3 * N_ADAPTERS * adapter.params * 3 * memory.F32
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > need else None


def _mode(cfg, mode: str):
    return cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"batch_mode": mode})})


def bench_trainer(base, shape: Shape, args, report: Reporter, device, generated: Generated | None) -> None:
    """The 8 adapters' updates on the generation part's rollouts through AdapterPool.update, on trainers built by
    TrainerService.from_config from the preset's config (its trainer settings: micro-batch budget, chunked
    log-probabilities, checkpointing, attention, memory limit): `batched` (every adapter's rows in shared passes on
    the batched layer), `one_by_one_same_layer` (one adapter per pass on that layer) and `sequential` (one adapter
    per pass on PEFT, trainer.batch_mode sequential). The adapters are the generation part's (same seeds)."""
    if generated is None:
        raise RuntimeError("the trainer part trains on the generation part's rollouts, and that part failed")
    from populora.store import ArtifactStore
    from services.trainer.service import TrainerService

    rollouts = trainer_rollouts(generated)
    cfg = generated.cfg
    with tempfile.TemporaryDirectory(prefix="bench-gpu-trainer-", dir=version_dir(base.model)) as tmp:
        stores = {mode: ArtifactStore(Path(tmp) / mode) for mode in ("batched", "sequential")}
        # made before any trainer: PEFT's layers hide the model's nn.Linear once they are in
        refs = {mode: random_adapters(store, base.model, TARGETS, RANK, N_ADAPTERS, "gpu-", dtype=base.model.dtype)
                for mode, store in stores.items()}
        svc = TrainerService.from_config(_mode(cfg, "batched"), base=base, store=stores["batched"])
        try:
            for ref in refs["batched"]:
                svc.pool.adopt(ref, "both")
            predicted, micro_batches = predicted_extra_mb(svc.pool, rollouts)
            pool = svc.pool
            seconds, extra = _rounds(args.repeats, {"batched": lambda: _update(pool, rollouts, True),
                                                    "one_by_one_same_layer": lambda: _update(pool, rollouts, False)},
                                     device, measured="batched")
        finally:
            svc.pool.host.multi.restore()  # PEFT wraps plain nn.Linear layers
        svc = pool = None
        free(device)
        # last: PEFT's layers stay in the model, which is not used after this
        svc = TrainerService.from_config(_mode(cfg, "sequential"), base=base, store=stores["sequential"])
        for ref in refs["sequential"]:
            svc.pool.adopt(ref, "both")
        seconds.update(_rounds(args.repeats, {"sequential": lambda: _update(svc.pool, rollouts, False)}, device)[0])
        svc = None
        free(device)
    lengths = [len(r.prompt) + len(r.response) for rs in rollouts.values() for r in rs]
    tokens = sum(len(r.response) for rs in rollouts.values() for r in rs)
    t = cfg.trainer
    report("gpu_update_adapters", len(rollouts))
    report("gpu_update_rollouts_per_adapter", [len(rollouts[r.adapter_id]) for r in refs["batched"]])
    report("gpu_update_tokens_per_rollout", {"min": min(lengths), "mean": round(sum(lengths) / len(lengths), 2),
                                             "max": max(lengths)})
    report("gpu_update_response_tokens", tokens)
    report("gpu_update_micro_batches", micro_batches)
    report("gpu_update_settings", {"micro_batch_tokens": t.micro_batch_tokens, "logprob_chunk_tokens":
                                   t.logprob_chunk_tokens, "activation_checkpointing": t.activation_checkpointing,
                                   "attention": t.attention, "memory_limit_mb": t.memory_limit_mb})
    for name in ("batched", "sequential", "one_by_one_same_layer"):
        report(f"gpu_update_s_{name}", seconds[name])
        report(f"gpu_update_response_tokens_per_s_{name}", tokens / seconds[name])
    report("gpu_batched_update_gain", seconds["sequential"] / seconds["batched"])
    report("gpu_batched_update_gain_same_layer", seconds["one_by_one_same_layer"] / seconds["batched"])
    report("gpu_update_extra_mb_batched", extra)
    report("gpu_update_predicted_extra_mb_batched", predicted)
    report("gpu_update_memory_model_ratio", predicted / extra)


# ---------------------------------------------------------------- evolver

def bench_evolver(shape: Shape, args, report: Reporter, device) -> None:
    from bench.evolver import make_parent
    from populora.config import EvolutionConfig
    from populora.store import ArtifactStore
    from services.evolver.adapters import open_parent
    from services.evolver.breed import breed
    from services.evolver.operators import OPERATORS

    layer = lora_layer(shape.config)
    layers = args.evolver_layers or shape.evolver_layers
    ops = sorted(OPERATORS)

    def breed_and_save(store, parents: list[str], op: str, where: str, child_id: str) -> float:
        """What EvolverService.Breed does (open, breed, one atomic save with fsync) minus the proto."""
        sync(device)
        start = time.perf_counter()
        opened = [open_parent(store.path_of(store.ref(p, 1)), label=p) for p in parents]
        try:
            child = breed(opened, op, {}, args.seed, EvolutionConfig(device=where))
        finally:
            for p in opened:
                p.close()
        store.save(child_id, child.weights, child.config, version=1, meta=child.meta(parents))
        seconds = time.perf_counter() - start
        shutil.rmtree(store.adapter_dir(child_id), ignore_errors=True)
        return seconds

    with tempfile.TemporaryDirectory(prefix="bench-gpu-evolver-") as tmp:
        store = ArtifactStore(tmp)
        for name, n_layers, seed in (("W1", 1, 3), ("W2", 1, 4), ("P1", layers, 1), ("P2", layers, 2)):
            make_parent(store, name, n_layers, RANK, seed=seed, layer=layer)
        wheres = [("gpu", str(device))] if device.type == "cuda" else []
        wheres.append(("cpu", "cpu"))
        for prefix, where in wheres:
            for op in ops:  # warm-up: every operator once on a one-layer pair
                breed_and_save(store, ["W1", "W2"][:OPERATORS[op].n_parents], op, where, f"warm-{op}")
            seconds = {op: breed_and_save(store, ["P1", "P2"][:OPERATORS[op].n_parents], op, where, f"child-{op}")
                       for op in ops}
            report(f"{prefix}_evolver_seconds", {op: round(s, 3) for op, s in seconds.items()})
            report(f"{prefix}_evolver_max_seconds", max(seconds.values()))
    report("evolver_adapter", f"rank {RANK}, {layers} layers x {len(layer)} modules (d_in, d_out as the model's), "
           "float32")
    if device.type != "cuda":
        # no GPU (--shape tiny on a CPU, `device` says so): the gpu_ keys carry the CPU figures, as every other
        # gpu_ key of such a run does
        report("gpu_evolver_seconds", report.out["cpu_evolver_seconds"])
        report("gpu_evolver_max_seconds", report.out["cpu_evolver_max_seconds"])
