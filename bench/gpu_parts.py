"""The three parts bench.gpu times on the model of bench.gpu_model: multi-LoRA generation, trainer updates
(batched against sequential) and the evolver's operators. Each reports its figures as it takes them."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable

from bench.gpu_model import N_ADAPTERS, RANK, TARGETS, Shape, free, lora_layer, sync
from bench.harness import Reporter, best_of, random_adapters

TOPICS = ["reverse a string", "sum of squares", "count vowels", "fibonacci numbers", "merge two sorted lists",
          "remove duplicates", "binary search", "the greatest common divisor", "is a number prime",
          "flatten a nested list", "run-length encoding", "the longest word", "rotate a list", "matrix transpose",
          "balanced parentheses", "sort a dictionary by value"]



# ---------------------------------------------------------------- generation

def chat(j: int) -> list[dict[str, str]]:
    """Prompt j: a coding request, longer for some j, so the batch is left-padded as in training."""
    detail = " Explain each step briefly and give two examples of its use." * (j % 4)
    return [{"role": "user", "content": f"Write a Python function for {TOPICS[j % len(TOPICS)]}.{detail}"}]


def bench_generation(base, shape: Shape, args, report: Reporter, device) -> None:
    from populora.store import ArtifactStore
    from services.inference.hf import HfBackend

    k, new_tokens = args.rows_per_adapter or shape.rows_per_adapter, args.new_tokens or shape.new_tokens
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        store = ArtifactStore(tmp)
        # in the model's dtype (bfloat16 on a GPU, as the trainer's GPU adapters compute); std 0.01 keeps the random
        # model's activations finite
        refs = random_adapters(store, base.model, TARGETS, RANK, N_ADAPTERS, "gpu-", dtype=base.model.dtype)
        backend = HfBackend(base, store, TARGETS, max_rank=RANK, max_batch=N_ADAPTERS * k, max_resident=N_ADAPTERS)
        try:
            wall, produced = _generate_sides(backend, refs, k, new_tokens, args, device)
        finally:
            backend.host.multi.restore()  # the plain model again, for the trainer
    report("gpu_generation_rows_per_adapter", k)
    report("gpu_generation_new_tokens", new_tokens)
    for name in wall:
        report(f"gpu_wall_s_{name}", wall[name])
        report(f"gpu_tokens_per_s_{name}", produced[name] / wall[name])
    report("gpu_eight_vs_one_wall_ratio", wall["8_adapters"] / wall["1_adapter"])
    report("gpu_lora_overhead", report.out["gpu_tokens_per_s_base"] / report.out["gpu_tokens_per_s_8_adapters"])


def _generate_sides(backend, refs: list, k: int, new_tokens: int, args,
                    device) -> tuple[dict[str, float], dict[str, int]]:
    """Best wall time and tokens produced of the 8-adapter, 1-adapter and base batches, k rows per adapter."""
    from services.inference.backend import Request, Sampling

    for ref in refs:
        backend.load_adapter(ref)

    def requests(adapters: list, tokens: int) -> list:
        sampling = Sampling(max_new_tokens=tokens, ignore_eos=True)
        return [Request(f"r{i}-{j}", ref, messages=chat(j), sampling=sampling)
                for j in range(k) for i, ref in enumerate(adapters)]

    batches = {"8_adapters": requests(refs, new_tokens), "1_adapter": requests(refs[:1], new_tokens),
               "base": requests([None] * N_ADAPTERS, new_tokens)}
    produced: dict[str, int] = {}

    def side(name: str) -> Callable[[], float]:
        def run() -> float:
            produced[name] = sum(len(c.token_ids) for result in backend.generate(batches[name])
                                 for c in result.completions)
            return produced[name]
        return run

    return best_of(args.repeats, {name: side(name) for name in batches}, lambda: sync(device)), produced


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
