"""Evolver operators on a 7B-shaped adapter: seconds per operator (store read and write included), peak memory, and
the estimated cost of doing the same with a dense ΔW and torch.linalg.svd. Prints one JSON object.

    python -m bench.evolver --json [--rank 32] [--layers 28] [--operators M1,X1] [--dense-sample full|quick]

The synthetic adapter has the LoRA shapes of Qwen2.5-7B (hidden 3584, intermediate 18944, key/value 512; q, k, v,
o, gate, up, down in each of 28 layers). Each operator runs in a fresh subprocess so its peak RSS is its own;
`baseline_rss_mb` is that process's resident size after its imports, before any adapter is touched.
`cpu_seconds` is the processor time of the same call (`time.process_time`): on a shared machine the wall time
mostly measures the other jobs, the processor time much less so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from bench.harness import cores, emit, load_average, module_command, peak_mb, progress, run_json, status_mb

HIDDEN, INTERMEDIATE, KV = 3584, 18944, 512
# (module suffix, d_in, d_out) of one Qwen2.5-7B decoder layer.
QWEN7B_LAYER = [("self_attn.q_proj", HIDDEN, HIDDEN), ("self_attn.k_proj", HIDDEN, KV),
                ("self_attn.v_proj", HIDDEN, KV), ("self_attn.o_proj", HIDDEN, HIDDEN),
                ("mlp.gate_proj", HIDDEN, INTERMEDIATE), ("mlp.up_proj", HIDDEN, INTERMEDIATE),
                ("mlp.down_proj", INTERMEDIATE, HIDDEN)]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def module_shapes(layers: int, layer: list[tuple[str, int, int]] = QWEN7B_LAYER) -> list[tuple[str, int, int]]:
    return [(f"model.layers.{i}.{suffix}", d_in, d_out) for i in range(layers) for suffix, d_in, d_out in layer]


def make_parent(store, adapter_id: str, layers: int, rank: int, seed: int,
                layer: list[tuple[str, int, int]] = QWEN7B_LAYER) -> None:
    """A trained-looking adapter: A ~ kaiming-scale noise, B small nonzero (as after some training steps); `layer`
    gives each decoder layer's (module suffix, d_in, d_out)."""
    import torch

    from populora.lora import lora_keys
    from populora.store import lora_config_dict

    g = torch.Generator().manual_seed(seed)
    weights = {}
    for module, d_in, d_out in module_shapes(layers, layer):
        key_a, key_b = lora_keys(module)
        weights[key_a] = torch.randn(rank, d_in, generator=g) / d_in ** 0.5
        weights[key_b] = torch.randn(d_out, rank, generator=g) * 1e-3
    store.save(adapter_id, weights, lora_config_dict(rank, 2.0 * rank, TARGETS, base_model="Qwen2.5-7B"),
               meta={"epsilon": 0.1})


def worker(store_root: str, operator: str, seed: int) -> dict:
    """One Breed through the service, in this (fresh) process."""
    import torch  # noqa: F401 - imported before the baseline is taken

    from populora.config import EvolutionConfig
    from populora.pb import common_pb2, evolver_pb2
    from populora.store import ArtifactStore
    from services.evolver.operators import OPERATORS
    from services.evolver.service import EvolverService

    baseline = status_mb("VmRSS")
    service = EvolverService(ArtifactStore(store_root), EvolutionConfig())
    parents = ["P1", "P2"][:OPERATORS[operator].n_parents]
    request = evolver_pb2.BreedRequest(parents=[common_pb2.AdapterRef(adapter_id=p, version=1) for p in parents],
                                       operator=operator, seed=seed, child_id=f"child-{operator}")
    start, cpu_start = time.perf_counter(), time.process_time()
    response = service.Breed(request)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "inner_seconds": response.seconds,
            "baseline_rss_mb": baseline,
            "peak_rss_mb": peak_mb(), "relative_change": response.relative_change,
            "effective_rank": response.effective_rank}


def dense_estimate(layers: int, rank: int, sample: str) -> dict:
    """Seconds for dense ΔW = B·A plus torch.linalg.svd, timed on one module per sampled shape, scaled to all.

    `full` times the k/v (512 x 3584) and q/o (3584 x 3584) shapes and scales the MLP shapes (18944 x 3584) from
    the square one by LAPACK's flop count 4·m·n² + 22·n³ (m >= n); `quick` times k/v only and scales everything
    by that count (less reliable, faster).
    """
    import torch

    def flops(d_out: int, d_in: int) -> float:
        m, n = max(d_out, d_in), min(d_out, d_in)
        return 4.0 * m * n * n + 22.0 * n ** 3

    def timed(d_out: int, d_in: int) -> float:
        g = torch.Generator().manual_seed(0)
        b, a = torch.randn(d_out, rank, generator=g), torch.randn(rank, d_in, generator=g)
        start = time.perf_counter()
        delta_w = b @ a
        torch.linalg.svd(delta_w, full_matrices=False)
        return time.perf_counter() - start

    measured = {(KV, HIDDEN): timed(KV, HIDDEN)}
    if sample == "full":
        measured[(HIDDEN, HIDDEN)] = timed(HIDDEN, HIDDEN)
    reference = max(measured, key=lambda s: flops(*s))
    total = 0.0
    for _, d_in, d_out in module_shapes(layers):
        shape = (d_out, d_in)
        total += measured[shape] if shape in measured else measured[reference] * flops(*shape) / flops(*reference)
    return {"dense_seconds_estimate": total,
            "dense_sampled_seconds": {f"{o}x{i}": round(s, 3) for (o, i), s in measured.items()},
            "dense_method": f"timed {sorted(f'{o}x{i}' for o, i in measured)}; other shapes scaled by 4mn^2+22n^3"}


def run(args: argparse.Namespace) -> dict:
    from populora.config import EvolutionConfig
    from populora.store import ADAPTER_WEIGHTS, ArtifactStore
    from services.evolver.operators import OPERATORS

    operators = args.operators.split(",") if args.operators else sorted(OPERATORS)
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-evolver-") as tmp:
        store = ArtifactStore(tmp)
        make_parent(store, "P1", args.layers, args.rank, seed=1)
        make_parent(store, "P2", args.layers, args.rank, seed=2)
        adapter_mb = (store.version_dir("P1", 1) / ADAPTER_WEIGHTS).stat().st_size / 2**20
        results = {}
        for k, op in enumerate(operators):
            progress("bench.evolver", "operator", f"{op} ({k + 1} of {len(operators)}, its own process)")
            results[op] = run_json(module_command("bench.evolver", "--worker", op, "--store", tmp, "--seed",
                                                  str(args.seed)), f"worker for {op}",
                                   env={**os.environ, "POPULORA_LOG_JSON": "0"}, tail=4000)
    progress("bench.evolver", "dense estimate", f"B A and its SVD, {args.dense_sample} sample")
    dense = dense_estimate(args.layers, args.rank, args.dense_sample)
    seconds = {op: round(r["seconds"], 3) for op, r in results.items()}
    max_seconds = max(seconds.values())
    peak = max(r["peak_rss_mb"] for r in results.values())
    baseline = max(r["baseline_rss_mb"] for r in results.values())
    return {
        "adapter": f"Qwen2.5-7B LoRA shapes, rank {args.rank}, {args.layers} layers, float32",
        "seconds": seconds, "max_seconds": round(max_seconds, 3),
        "cpu_seconds": {op: round(r["cpu_seconds"], 3) for op, r in results.items()},
        "max_cpu_seconds": round(max(r["cpu_seconds"] for r in results.values()), 3),
        "dense_seconds_estimate": round(dense["dense_seconds_estimate"], 1),
        "speedup_vs_dense": round(dense["dense_seconds_estimate"] / max_seconds, 1),
        "peak_rss_mb": round(peak, 1), "baseline_rss_mb": round(baseline, 1), "adapter_mb": round(adapter_mb, 1),
        "peak_rss_over_baseline_in_adapters": round((peak - baseline) / adapter_mb, 2),
        "peak_rss_mb_by_operator": {op: round(r["peak_rss_mb"], 1) for op, r in results.items()},
        "relative_change": {op: round(r["relative_change"], 4) for op, r in results.items()},
        "effective_rank": {op: round(r["effective_rank"], 2) for op, r in results.items()},
        "dense_sampled_seconds": dense["dense_sampled_seconds"], "dense_method": dense["dense_method"],
        "targets_met": {"max_seconds<=5": max_seconds <= 5,
                        "speedup_vs_dense>=100": dense["dense_seconds_estimate"] / max_seconds >= 100,
                        "peak_rss_mb<=4*adapter_mb+baseline": peak <= 4 * adapter_mb + baseline},
        "evolver_threads": EvolutionConfig().threads, "cpus": cores(),
        "load_average_1min": [load_start, load_average()],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--operators", default="", help="comma-separated subset (default: all)")
    p.add_argument("--dense-sample", choices=["full", "quick"], default="full")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.store, args.worker, args.seed)))
        return 0
    emit(run(args), indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
