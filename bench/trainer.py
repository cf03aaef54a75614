"""Trainer throughput and memory: TRR++ updates of N adapters (rank r), k rollouts each, sequential (PEFT, one
adapter per pass) vs batched (every adapter's rows in one pass), and the resident memory each extra adapter costs.
Prints one JSON object.

    python -m bench.trainer --json [--model smollm2-135m] [--adapters 8] [--rank 32] [--rollouts 2] [--tokens 128]

tokens_per_s counts response tokens trained on (UpdateStats.tokens) per second of update compute, in the default
mode (`trainer.batch_mode=auto`: batched on GPU, sequential on CPU); store writes are timed apart (store_write_s).
per_adapter_mb_expected = LoRA parameters x (weight + grad + 2 Adam moments) x bytes per element; the measured value
is (RSS with N adapters - RSS with 1) / (N - 1), each adapter having made one update (its Adam state allocated).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch


def _rss_mb() -> float:
    gc.collect()
    try:  # give freed heap pages back, so RSS shows what is held rather than what was once used
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    return psutil.Process().memory_info().rss / 2**20


def _rollouts(n_adapters: int, per_adapter: int, tokens: int, vocab: int, seed: int = 0):
    """Rollouts of `tokens` tokens each (a quarter prompt, the rest response), rewards spread over [0, 1]."""
    from populora.pb import trainer_pb2

    gen = torch.Generator().manual_seed(seed)
    n_prompt = max(1, tokens // 4)
    out = []
    for _ in range(n_adapters):
        rows = []
        for k in range(per_adapter):
            ids = torch.randint(100, min(vocab, 30000), (tokens,), generator=gen).tolist()
            rows.append(trainer_pb2.Rollout(prompt_token_ids=ids[:n_prompt], response_token_ids=ids[n_prompt:],
                                            reward=float(k % 2), task_type="code_o", role="student"))
        out.append(rows)
    return out


def _prune(store_root: Path, refs) -> None:
    """Keep only the latest version of each adapter: every version holds weights and two Adam moments."""
    for ref in refs:
        for old in range(1, ref.version):
            shutil.rmtree(store_root / "adapters" / ref.adapter_id / f"v{old}", ignore_errors=True)


def run_mode(mode: str, args, workdir: Path, measure_memory: bool) -> dict:
    from populora.config import load_config
    from populora.models import load_base_model
    from populora.pb import trainer_pb2
    from populora.store import ArtifactStore
    from services.trainer.service import TrainerService

    cfg = load_config(overrides=[f"model.name={args.model}", f"lora.rank={args.rank}", f"lora.alpha={2 * args.rank}",
                                 f"trainer.batch_mode={mode}", "trainer.lr=1e-5",
                                 f"trainer.micro_batch_tokens={max(4096, args.tokens * args.rollouts)}"], env=False)
    root = workdir / mode
    store = ArtifactStore(root)
    base = load_base_model(args.model, device=args.device)
    svc = TrainerService.from_config(cfg, base=base, store=store)
    rows = _rollouts(args.adapters, args.rollouts, args.tokens, svc.pool.host.vocab_size)
    refs, out = [], {}

    def add_and_update(i: int):
        ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=f"a{i}", role="student", seed=i)).adapter
        refs.append(svc.Update(trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[i], seed=0, step=0)).adapter)
        _prune(store.root, refs[-1:])

    add_and_update(0)
    if measure_memory:
        out["rss_mb_1_adapter"] = _rss_mb()
    for i in range(1, args.adapters):
        add_and_update(i)
    if measure_memory:
        out["rss_mb_8_adapters" if args.adapters == 8 else f"rss_mb_{args.adapters}_adapters"] = _rss_mb()
        n_params = sum(p.numel() for p in svc.pool.held["a0"].params.values())
        elem = next(iter(svc.pool.held["a0"].params.values())).element_size()
        out["lora_params_per_adapter"] = n_params
        out["per_adapter_mb_expected"] = n_params * 4 * elem / 2**20
        rss = [v for k, v in out.items() if k.startswith("rss_mb_")]
        out["per_adapter_mb_measured"] = (rss[1] - rss[0]) / (args.adapters - 1)

    compute, wall, tokens = [], [], 0
    for rep in range(args.repeats):
        req = trainer_pb2.UpdateBatchRequest(updates=[
            trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[i], seed=rep, step=rep + 1)
            for i, ref in enumerate(refs)])
        if svc.pool.host.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        resp = svc.UpdateBatch(req)
        wall.append(time.perf_counter() - start)
        secs = [r.stats.seconds for r in resp.results]
        compute.append(max(secs) if resp.mode == "batched" else sum(secs))
        tokens = sum(r.stats.tokens for r in resp.results)
        refs = [r.adapter for r in resp.results]
        _prune(store.root, refs)
    best = min(compute)
    out.update({"mode": mode, "seconds_per_update_batch": best, "compute_s_all": compute,
                "store_write_s": min(w - c for w, c in zip(wall, compute, strict=True)),
                "response_tokens": tokens, "tokens_per_s": tokens / best,
                "processed_tokens_per_s": args.adapters * args.rollouts * args.tokens / best})
    svc = base = None  # free this mode's model before the next one loads
    gc.collect()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print only the JSON object")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--rollouts", type=int, default=2, help="rollouts per adapter")
    p.add_argument("--tokens", type=int, default=128, help="tokens per rollout (prompt + response)")
    p.add_argument("--repeats", type=int, default=2, help="timed UpdateBatch calls per mode (the best counts)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    args = p.parse_args(argv)
    if args.adapters < 2:
        p.error("--adapters must be at least 2 (memory is measured between 1 and N)")
    if args.threads:
        torch.set_num_threads(args.threads)
    from populora.models import _device
    from services.trainer.service import resolve_batch_mode

    device = _device(args.device)
    default = resolve_batch_mode("auto", device)
    result = {"model": args.model, "device": str(device), "adapters": args.adapters, "rank": args.rank,
              "rollouts_per_adapter": args.rollouts, "tokens_per_rollout": args.tokens,
              "torch_threads": torch.get_num_threads(), "default_mode": default}
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        modes = {}
        for mode in ("sequential", "batched"):
            modes[mode] = run_mode(mode, args, Path(tmp), measure_memory=mode == default)
            if not args.json:
                print(mode, json.dumps(modes[mode]), file=sys.stderr)
    mem = {k: v for k, v in modes[default].items() if k.startswith(("rss_", "per_adapter", "lora_params"))}
    result.update({"tokens_per_s": modes[default]["tokens_per_s"],
                   "sequential_tokens_per_s": modes["sequential"]["tokens_per_s"],
                   "batched_tokens_per_s": modes["batched"]["tokens_per_s"],
                   "batched_over_sequential": modes["batched"]["tokens_per_s"] / modes["sequential"]["tokens_per_s"],
                   **mem,
                   "sequential": {k: v for k, v in modes["sequential"].items() if k not in mem},
                   "batched": {k: v for k, v in modes["batched"].items() if k not in mem}})
    result["per_adapter_mb_ratio"] = result["per_adapter_mb_measured"] / result["per_adapter_mb_expected"]
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
