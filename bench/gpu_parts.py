"""The three parts bench.gpu times on the model of bench.gpu_model: multi-LoRA generation, trainer updates
(batched against sequential) and the evolver's operators. Each reports its figures as it takes them."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
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
from bench.harness import Reporter, best_of, random_adapters

# ---------------------------------------------------------------- generation

def bench_generation(base, shape: Shape, args, report: Reporter, device) -> None:
    """One step's propose and solve batches (bench.gpu_workload) through HfBackend.generate with 8 adapters, sampled
    with end-of-sequence honoured; the bare base on the same rows at the same lengths; one adapter's rows alone."""
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
        try:
            with eos_biased(base, bias):
                _generate_sides(backend, refs, batches, args, report, device)
        finally:
            backend.host.multi.restore()  # the plain model again, for the trainer


def _generate_sides(backend, refs: list, batches: list[list], args, report: Reporter, device) -> None:
    """Best wall time of each side over the same requests: `8_adapters` (HfBackend.generate, the phases' batches),
    `base` (every row of the adapter run just before it, with no adapter, to the length it had there:
    bench.gpu_workload.decode_forced) and `1_adapter` (the rows of the adapter with the most, alone, sampled)."""
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
        for batch in batches:
            for result in backend.generate(batch):
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

def rollouts(shape: Shape, vocab: int, seed: int) -> list:
    """Rollouts of prompt + response random tokens with rewards 0, 1, 0, 1, ... (every advantage nonzero)."""
    import torch

    from services.trainer.trr import Rollout

    gen = torch.Generator().manual_seed(seed)
    out = []
    for j in range(shape.rollouts):
        ids = torch.randint(100, min(vocab, 30000), (shape.prompt_tokens + shape.response_tokens,),
                            generator=gen).tolist()
        out.append(Rollout(prompt=ids[:shape.prompt_tokens], response=ids[shape.prompt_tokens:],
                           reward=float(j % 2), task_type="code_o", role="student"))
    return out


def make_jobs(policy, causal_lm, shape: Shape) -> list:
    """N_ADAPTERS adapters on `policy`, each with its AdapterAdamW and rollouts, as AdapterPool attaches them."""
    from populora.lora import random_lora_weights
    from populora.store import lora_config_dict
    from services.trainer.optim import AdapterAdamW
    from services.trainer.trr import UpdateJob

    config = lora_config_dict(RANK, 2.0 * RANK, TARGETS)
    # every adapter's weights before the first is added: PEFT's layers hide the model's nn.Linear once it is in
    all_weights = [random_lora_weights(causal_lm, TARGETS, RANK, seed=100 + i, std=0.01) for i in range(N_ADAPTERS)]
    jobs = []
    for i, weights in enumerate(all_weights):
        params = policy.add(f"a{i}", weights, config, trainable=True)
        optimizer = AdapterAdamW(params, masters=weights, lr=1e-5)
        jobs.append(UpdateJob(f"a{i}", rollouts(shape, policy.vocab_size, seed=i), list(params.values()), optimizer))
    return jobs


def bench_trainer(base, shape: Shape, args, report: Reporter, device) -> None:
    from populora.adapters import BatchedHost, PeftHost
    from services.trainer.trr import TrrSettings, trr_update

    settings = TrrSettings(micro_batch_tokens=shape.micro_batch_tokens)
    model = base.model

    def one_by_one(policy, jobs) -> Callable[[], None]:
        return lambda: [trr_update(policy, [job], settings, device) for job in jobs]

    def all_at_once(policy, jobs) -> Callable[[], None]:
        return lambda: trr_update(policy, jobs, settings, device)

    batched = BatchedHost(model, TARGETS, RANK)
    try:
        jobs = make_jobs(batched, model, shape)
        wall = best_of(args.repeats, {"batched": all_at_once(batched, jobs),
                                      "one_by_one_same_layer": one_by_one(batched, jobs)}, lambda: sync(device))
    finally:
        batched.multi.restore()  # PEFT wraps plain nn.Linear layers
    del batched, jobs
    free(device)
    sequential = PeftHost(model, TARGETS, RANK)  # last: PEFT's layers stay in the model, which is not used after this
    jobs = make_jobs(sequential, model, shape)
    wall.update(best_of(args.repeats, {"sequential": one_by_one(sequential, jobs)}, lambda: sync(device)))
    del sequential, jobs
    free(device)
    tokens = N_ADAPTERS * shape.rollouts * shape.response_tokens
    report("gpu_update_adapters", N_ADAPTERS)
    report("gpu_update_rollouts_per_adapter", shape.rollouts)
    report("gpu_update_tokens_per_rollout", shape.prompt_tokens + shape.response_tokens)
    for name in ("batched", "sequential", "one_by_one_same_layer"):
        report(f"gpu_update_s_{name}", wall[name])
        report(f"gpu_update_response_tokens_per_s_{name}", tokens / wall[name])
    report("gpu_batched_update_gain", wall["sequential"] / wall["batched"])
    report("gpu_batched_update_gain_same_layer", wall["one_by_one_same_layer"] / wall["batched"])


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
