"""Multi-LoRA generation throughput: our batched LoRA path vs PEFT's adapter_names vs one adapter at a time vs the
bare base, on two workloads, plus resident memory per adapter. Prints one JSON object.

    python -m bench.inference --json [--model smollm2-135m] [--new-tokens 64] [--threads N] [--skip-vllm]

8 adapters of rank 32 on all seven projections; greedy; every row decodes exactly --new-tokens tokens (eos
ignored) so each method does the same work. Workloads: large = 16 prompts per adapter (128 rows), small = 2 per
adapter (16 rows). Keys (large; `_small` suffix for small):
  mixed_tokens_per_s          the hf backend (our batched LoRA layer), all adapters in one batch
  mixed_gather_tokens_per_s   the same with the gather+bmm variant of the layer (kept for comparison)
  peft_mixed_tokens_per_s     plain PEFT `generate` with `adapter_names`, all adapters in one batch
  sequential_tokens_per_s     the hf backend, one adapter's rows at a time
  base_tokens_per_s           the same rows with no adapter (the ceiling)
  lora_overhead               base / mixed
and rss_mb_1_adapter, rss_mb_8_adapters, adapter_mb (one adapter's tensors), rss_mb_per_extra_adapter.
When .venv-vllm exists (make test-vllm), vllm_cpu_mixed_tokens_per_s: vLLM for CPU, bf16, large workload.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N_ADAPTERS = 8
RANK = 32
WORKLOADS = {"": 16, "_small": 2}  # key suffix -> prompts per adapter
TOPICS = ["reverse a string", "sum of squares", "count vowels", "fibonacci numbers", "merge two sorted lists",
          "remove duplicates", "binary search", "the greatest common divisor", "is a number prime",
          "flatten a nested list", "run-length encoding", "the longest word", "rotate a list", "matrix transpose",
          "balanced parentheses", "sort a dictionary by value"]


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def prompts(per_adapter: int) -> list[list[dict]]:
    """per_adapter chat prompts of varied length (so left padding is exercised)."""
    out = []
    for i in range(per_adapter):
        topic = TOPICS[i % len(TOPICS)]
        detail = " Explain each step briefly." * (i % 3)
        out.append([{"role": "user", "content": f"Write a Python function for {topic}.{detail}"}])
    return out


def make_store(model, root: Path):
    from populora.config import ALL_TARGET_MODULES
    from populora.lora import random_lora_weights
    from populora.store import ArtifactStore, lora_config_dict

    store = ArtifactStore(root)
    config = lora_config_dict(RANK, 2.0 * RANK, ALL_TARGET_MODULES)
    refs = [store.save(f"bench-{i}", random_lora_weights(model, ALL_TARGET_MODULES, RANK, seed=i, std=0.01), config)
            for i in range(N_ADAPTERS)]
    return store, refs


def requests_for(refs, per_adapter: int, new_tokens: int, with_adapter: bool = True):
    from services.inference.backend import Request, Sampling

    sampling = Sampling(max_new_tokens=new_tokens, ignore_eos=True)
    out = []
    for j, msgs in enumerate(prompts(per_adapter)):
        for i, ref in enumerate(refs):  # adapters interleaved, as a scheduler would send them
            out.append(Request(f"r{i}-{j}", ref if with_adapter else None, messages=msgs, sampling=sampling))
    return out


def progress(what: str, value: float) -> None:
    print(f"bench.inference: {what} = {value:.1f}", file=sys.stderr, flush=True)


def tokens_per_s(backend, batches) -> float:
    start, tokens = time.perf_counter(), 0
    for batch in batches:
        for result in backend.generate(batch):
            tokens += sum(len(c.token_ids) for c in result.completions)
    return tokens / (time.perf_counter() - start)


def measure(out: dict, key: str, value: float) -> None:
    out[key] = value
    progress(key, value)


def bench_hf(base, store, refs, new_tokens: int, out: dict) -> None:
    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK, max_resident=N_ADAPTERS)
    for ref in refs:
        backend.load_adapter(ref)
    tokens_per_s(backend, [requests_for(refs, 1, 4)])  # warm-up
    for suffix, per_adapter in WORKLOADS.items():
        mixed = requests_for(refs, per_adapter, new_tokens)
        measure(out, f"mixed_tokens_per_s{suffix}", tokens_per_s(backend, [mixed]))
        measure(out, f"base_tokens_per_s{suffix}", tokens_per_s(backend, [requests_for(refs, per_adapter, new_tokens,
                                                                                       with_adapter=False)]))
        one_at_a_time = [[r for r in mixed if r.adapter.key == ref.key] for ref in refs]
        measure(out, f"sequential_tokens_per_s{suffix}", tokens_per_s(backend, one_at_a_time))
        backend.path.lora.mode = "gather"
        measure(out, f"mixed_gather_tokens_per_s{suffix}", tokens_per_s(backend, [mixed]))
        backend.path.lora.mode = "segments"
    backend.path.lora.restore()


def bench_peft(base, store, refs, new_tokens: int, out: dict) -> None:
    """Plain PEFT: every adapter loaded into one PeftModel, `generate(..., adapter_names=...)`."""
    import torch
    from peft import PeftModel

    from services.inference.backend import encode_prompt

    model = None
    for ref in refs:
        path = str(store.path_of(ref))
        if model is None:
            model = PeftModel.from_pretrained(base.model, path, adapter_name=ref.key)
        else:
            model.load_adapter(path, adapter_name=ref.key)
    model.eval()
    tok = base.tokenizer
    for suffix, per_adapter in WORKLOADS.items():
        reqs = requests_for(refs, per_adapter, new_tokens)
        enc = tok.pad({"input_ids": [encode_prompt(tok, r) for r in reqs]}, padding=True, return_tensors="pt")
        names = [r.adapter.key for r in reqs]
        start = time.perf_counter()
        with torch.inference_mode():
            seqs = model.generate(**enc, adapter_names=names, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  do_sample=False, pad_token_id=tok.pad_token_id)
        elapsed = time.perf_counter() - start
        measure(out, f"peft_mixed_tokens_per_s{suffix}", (seqs.shape[1] - enc["input_ids"].shape[1]) * len(reqs) / elapsed)
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
    backend.path.lora.restore()


def bench_vllm(name: str, new_tokens: int) -> dict:
    """Runs inside .venv-vllm: vLLM for CPU (bf16), the large workload in one batch."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from populora.models import load_base_model
    from services.inference.vllm_backend import VllmBackend

    base = load_base_model(name)
    with tempfile.TemporaryDirectory() as tmp:
        store, refs = make_store(base.model, Path(tmp))
        backend = VllmBackend(base.path, name, store, max_loras=N_ADAPTERS, max_lora_rank=RANK,
                              max_cpu_loras=N_ADAPTERS, max_batch=256, max_resident=N_ADAPTERS, dtype="bfloat16",
                              gpu_memory_utilization=0.3, max_model_len=1024)
        for ref in refs:
            backend.load_adapter(ref)
        tokens_per_s(backend, [requests_for(refs, 1, 4)])
        return {"vllm_cpu_mixed_tokens_per_s": tokens_per_s(backend, [requests_for(refs, 16, new_tokens)])}


def run_vllm_subprocess(name: str, new_tokens: int) -> dict:
    python = ROOT / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        return {}
    cmd = [str(python), "-m", "bench.inference", "--vllm-only", "--model", name, "--new-tokens", str(new_tokens)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"vllm_cpu_error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--vllm-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.vllm_only:
        print(json.dumps(bench_vllm(args.model, args.new_tokens)))
        return 0
    from populora.models import load_base_model

    out: dict = {"model": args.model, "adapters": N_ADAPTERS, "rank": RANK, "new_tokens": args.new_tokens,
                 "rows_large": N_ADAPTERS * WORKLOADS[""], "rows_small": N_ADAPTERS * WORKLOADS["_small"],
                 "threads": torch.get_num_threads(), "dtype": "float32"}
    with tempfile.TemporaryDirectory() as tmp:
        base = load_base_model(args.model)
        store, refs = make_store(base.model, Path(tmp))
        bench_memory(base, store, refs, out)
        bench_hf(base, store, refs, args.new_tokens, out)
        bench_peft(base, store, refs, args.new_tokens, out)
    for suffix in WORKLOADS:
        out[f"lora_overhead{suffix}"] = out[f"base_tokens_per_s{suffix}"] / out[f"mixed_tokens_per_s{suffix}"]
        out[f"mixed_vs_peft{suffix}"] = out[f"mixed_tokens_per_s{suffix}"] / out[f"peft_mixed_tokens_per_s{suffix}"]
    if not args.skip_vllm:
        out.update(run_vllm_subprocess(args.model, args.new_tokens))
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
