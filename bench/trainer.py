"""Trainer throughput and memory: TRR++ updates of N adapters (rank r), k rollouts each, sequential (PEFT, one
adapter per pass) vs batched (every adapter's rows in one pass), and the resident memory each extra adapter costs.
Prints one JSON object.

    python -m bench.trainer --json [--model smollm2-135m] [--adapters 8] [--rank 32] [--rollouts 2] [--tokens 128]

tokens_per_s counts response tokens trained on (UpdateStats.tokens) per second of update compute, in the default
mode (`trainer.batch_mode=auto`: batched on GPU, sequential on CPU); store writes are timed apart (store_write_s).
per_adapter_mb_expected = LoRA parameters x (weight + grad + 2 Adam moments) x bytes per element; the measured value
is (RSS with N adapters - RSS with 1) / (N - 1), each adapter having made one update (its Adam state allocated).

Memory of an update (docs/trainer.md, Memory): each figure comes from a fresh process (`--probe`), so peaks do not
mix. The probe holds 4 adapters, 2 rollouts each of micro_batch_tokens / 8 tokens (a quarter prompt), and makes one
batched update whose only micro-batch holds all 8 rows, after a small first update (lazy imports, Adam state); its
peak is the process's peak resident set (VmHWM, reset just before it). peak_mb_1k / peak_mb_4k: 1,024- and 4,096-token micro-batches with the
memory settings on (the defaults: chunked log-probabilities, per-layer activation checkpointing, SDPA attention,
freed memory returned to the system); *_plain: all four off (whole logits, no checkpointing, eager attention,
glibc's own mmap threshold). mb_per_1k_tokens = (peak_mb_4k -
peak_mb_1k) / 3; tokens_per_s_saving / tokens_per_s_plain: the 1,024-token updates' response tokens per second.
max_abs_logprob_diff: chunked against whole-logits log-probabilities of the 1,024-token probe's rows.
Each probe also reports extra_mb (its peak over the resident set just before the update) and predicted_extra_mb,
the memory model's figure for that update (services/trainer/memory.py); memory_model_error is the largest
|predicted - measured| / measured over the probes with the settings on, saving_over_plain_1k = peak_mb_1k /
peak_mb_1k_plain. Both are targets: the settings must lower the peak, the model must hold within 25%.

update_mfu (target >= 0.5, with the memory settings on, as every mode runs): the useful executed FLOPs of the default
mode's update (populora/analysis/work.py: forward and backward over every row's prompt and response, activation
gradients through the frozen base, weight gradients for the adapters only, the head on the response tokens; not
spec 14's charged 6N) per second over the float32 peak of the model's products measured in this process on its
threads (bench.roofline); update_mfu_sequential / _batched per mode, update_mfu_saving_1k / update_mfu_plain_1k for
the 1,024-token probes (their own processes, the same thread count); peak_gflops; update_useful_flops_per_token and
update_recomputed_flops_per_token (activation checkpointing and the chunked head run again: executed, not useful).
Progress lines go to stderr.

mixed_rank_update_ratio (spec 9, "Mixed ranks"; target >= 0.9): response tokens per second of a batched update of 4
adapters of ranks 8, 16, 32, 64 over the same of 4 adapters of rank 30 (the same total rank), on the same rollouts in
one trainer, the two alternating (mixed_rank_update_rounds: each round's ratio; mixed_rank_update_load_average_1m:
the machine's load before and after). Not with --skip-modes.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.harness import emit, load_average, progress, rss_mb, update_workload_parser
from bench.trainer_memory import memory, probe, rollouts


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
    rows = rollouts(args.adapters, args.rollouts, args.tokens, svc.pool.host.vocab_size)
    refs, out = [], {}

    def add_and_update(i: int):
        ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=f"a{i}", role="student", seed=i)).adapter
        refs.append(svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
            trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[i], seed=0, step=0)])).results[0].adapter)
        _prune(store.root, refs[-1:])

    add_and_update(0)
    if measure_memory:
        out["rss_mb_1_adapter"] = rss_mb(trim=True)
    for i in range(1, args.adapters):
        add_and_update(i)
    if measure_memory:
        out["rss_mb_8_adapters" if args.adapters == 8 else f"rss_mb_{args.adapters}_adapters"] = rss_mb(trim=True)
        n_params = sum(p.numel() for p in svc.pool.held["a0"].params.values())
        elem = next(iter(svc.pool.held["a0"].params.values())).element_size()
        out["lora_params_per_adapter"] = n_params
        out["per_adapter_mb_expected"] = n_params * 4 * elem / 2**20
        rss = [v for k, v in out.items() if k.startswith("rss_mb_")]
        out["per_adapter_mb_measured"] = (rss[1] - rss[0]) / (args.adapters - 1)

    compute, wall, tokens = [], [], 0
    for rep in range(args.repeats):
        progress("bench.trainer", f"{mode} update", f"{rep + 1} of {args.repeats}")
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
    n_prompt = len(rows[0][0].prompt_token_ids)
    out.update({"mode": mode, "seconds_per_update_batch": best, "compute_s_all": compute,
                "rows": args.adapters * args.rollouts, "row_prompt_tokens": n_prompt,
                "row_response_tokens": args.tokens - n_prompt, "checkpointing": cfg.trainer.activation_checkpointing,
                "lora_targets": list(cfg.lora.target_modules),
                "store_write_s": min(w - c for w, c in zip(wall, compute, strict=True)),
                "response_tokens": tokens, "tokens_per_s": tokens / best,
                "processed_tokens_per_s": args.adapters * args.rollouts * args.tokens / best})
    svc = base = None  # free this mode's model before the next one loads
    gc.collect()
    return out


MIXED_RANKS = [8, 16, 32, 64]
UNIFORM_RANK = 30  # 4 x 30 = 8 + 16 + 32 + 64: the same total rank as the mixed population


def run_mixed_rank(args, workdir: Path) -> dict:
    """Spec 9, "Mixed ranks": the batched update of 4 adapters of ranks 8, 16, 32, 64 against 4 of rank 30 (the same
    total rank) on the same rollouts, in one trainer (one model, one process), one lora_alpha as a run gives its
    members; the two UpdateBatch calls alternate for 1 + args.repeats rounds, the first (Adam state, lazy imports)
    not counted. Response tokens per second of update compute, each over all its counted rounds."""
    from populora.config import load_config
    from populora.models import load_base_model
    from populora.pb import trainer_pb2
    from populora.store import ArtifactStore
    from services.trainer.service import TrainerService

    cfg = load_config(overrides=[f"model.name={args.model}", "lora.rank=32", "lora.alpha=64",
                                 "trainer.batch_mode=batched", "trainer.lr=1e-5",
                                 f"trainer.micro_batch_tokens={max(4096, 4 * args.tokens * args.rollouts)}"], env=False)
    store = ArtifactStore(workdir / "ranks")
    svc = TrainerService.from_config(cfg, base=load_base_model(args.model, device=args.device), store=store)
    rows = rollouts(len(MIXED_RANKS), args.rollouts, args.tokens, svc.pool.host.vocab_size, seed=3)
    sides = {"mixed": MIXED_RANKS, "uniform": [UNIFORM_RANK] * len(MIXED_RANKS)}
    refs = {name: [svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=f"{name}{i}", role="student", seed=i,
                                                                  rank=r)).adapter for i, r in enumerate(ranks)]
            for name, ranks in sides.items()}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, list[int]] = {name: [] for name in sides}
    for rep in range(1 + args.repeats):
        progress("bench.trainer", "mixed-rank round", f"{rep + 1} of {1 + args.repeats} (the first not counted)")
        for name in ("mixed", "uniform") if rep % 2 == 0 else ("uniform", "mixed"):
            resp = svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
                trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[i], seed=rep, step=rep + 1)
                for i, ref in enumerate(refs[name])]))
            refs[name] = [r.adapter for r in resp.results]
            _prune(store.root, refs[name])
            if rep:
                seconds[name].append(max(r.stats.seconds for r in resp.results))
                tokens[name].append(sum(r.stats.tokens for r in resp.results))
    rate = {name: sum(tokens[name]) / sum(seconds[name]) for name in sides}
    svc = None
    gc.collect()
    return {"mixed_rank_update_tokens_per_s": rate["mixed"], "uniform_rank_update_tokens_per_s": rate["uniform"],
            "mixed_rank_update_ratio": rate["mixed"] / rate["uniform"],
            "mixed_rank_update_rounds": [round((tm / sm) / (tu / su), 3) for tm, sm, tu, su in zip(
                tokens["mixed"], seconds["mixed"], tokens["uniform"], seconds["uniform"], strict=True)],
            "mixed_rank_update_ranks": sides, "mixed_rank_update_mode": "batched"}


TARGETS = {"mb_per_1k_tokens<=400": ("mb_per_1k_tokens", lambda v: v <= 400),
           "max_abs_logprob_diff<=1e-5": ("max_abs_logprob_diff", lambda v: v <= 1e-5),
           # the memory settings must lower the peak, and the memory model must predict what they leave
           "peak_mb_1k<peak_mb_1k_plain": ("saving_over_plain_1k", lambda v: v < 1),
           "memory_model_error<=0.25": ("memory_model_error", lambda v: v <= 0.25),
           "mixed_rank_update_ratio>=0.9": ("mixed_rank_update_ratio", lambda v: v >= 0.9)}


def main(argv: list[str] | None = None) -> int:
    p = update_workload_parser(__doc__, "print only the JSON object", rollouts_help="rollouts per adapter",
                               tokens_help="tokens per rollout (prompt + response)")
    p.add_argument("--repeats", type=int, default=2, help="timed UpdateBatch calls per mode (the best counts)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    p.add_argument("--plain-tokens", type=lambda v: [int(x) for x in v.split(",") if x], default=[1024, 4096],
                   help="micro-batch sizes probed with the memory settings off (comma-separated; empty = none)")
    p.add_argument("--skip-modes", action="store_true", help="only the memory probes (no sequential/batched runs)")
    p.add_argument("--probe", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--probe-settings", choices=("saving", "plain"), default="saving", help=argparse.SUPPRESS)
    p.add_argument("--probe-rows", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--probe-prompt", type=float, default=0.25, help=argparse.SUPPRESS)
    p.add_argument("--probe-override", action="append", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        if args.threads:
            torch.set_num_threads(args.threads)
        print(json.dumps(probe(args)))
        return 0
    if any(t < 16 for t in args.plain_tokens):
        p.error("--plain-tokens are micro-batch sizes of at least 16 tokens")
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
    result.update(memory(args))
    if not args.skip_modes:
        start = load_average()
        with tempfile.TemporaryDirectory(prefix="bench-trainer-ranks-") as tmp:
            result.update(run_mixed_rank(args, Path(tmp)))
        result["mixed_rank_update_load_average_1m"] = [start, load_average()]
    result["targets_met"] = {name: check(result[key]) for name, (key, check) in TARGETS.items() if key in result}
    if args.skip_modes:
        emit(result, indent=None if args.json else 2)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        modes = {}
        for mode in ("sequential", "batched"):
            modes[mode] = run_mode(mode, args, Path(tmp), measure_memory=mode == default)
            if not args.json:
                print(mode, json.dumps(modes[mode]), file=sys.stderr)
    mem = {k: v for k, v in modes[default].items() if k.startswith(("rss_", "per_adapter", "lora_params"))}
    result["lora_targets"] = modes[default]["lora_targets"]
    result.update({"tokens_per_s": modes[default]["tokens_per_s"],
                   "sequential_tokens_per_s": modes["sequential"]["tokens_per_s"],
                   "batched_tokens_per_s": modes["batched"]["tokens_per_s"],
                   "batched_over_sequential": modes["batched"]["tokens_per_s"] / modes["sequential"]["tokens_per_s"],
                   **mem,
                   "sequential": {k: v for k, v in modes["sequential"].items() if k not in mem},
                   "batched": {k: v for k, v in modes["batched"].items() if k not in mem}})
    result["per_adapter_mb_ratio"] = result["per_adapter_mb_measured"] / result["per_adapter_mb_expected"]
    from bench.roofline import update_fractions

    result.update(update_fractions(args.model, result, str(device)))  # the peak measured here, on these threads
    result["targets_met"]["update_mfu>=0.5"] = result["update_mfu"] >= 0.5
    emit(result, indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
