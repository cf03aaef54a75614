"""The ceiling this machine reaches in the operations a step is made of, measured in this process on its threads:
dense matrix products at the model's shapes (float32, and bfloat16 where the cores multiply it natively) and the
bandwidth of reading every weight once (what a decode step waits on). Prints one JSON object.

    python -m bench.roofline --json [--model smollm2-135m] [--threads 0] [--quick] [--rank 32]

Keys: peak_gflops_fp32, peak_gflops_bf16 (null where the cores have no native bfloat16 product), bandwidth_gb_s
(GB/s reading a float32 buffer of the model's weight bytes, at least 256 MiB and at most 1 GiB), threads (torch's
intra-op threads: --threads, else torch's default), cores (the cores this process may run on), methods (per dtype,
the product that reached the peak: F.linear or the oneDNN-packed weight of the inference path, and at how many rows),
weight_bytes (the weights a decode step reads in float32: the projections, the head and the norms), model_params
(N of the base, spec 14: the embedding in), and best_known_*: the same figures merged with the best this machine
has reached before (populora/peaks.py: the populora cache holds the highest per host, CPU model, cores, threads,
torch and model shapes, each dated; runs measure their fractions against it). decode_ceiling_tokens_per_s_at_rows:
the roofline's decode rate at 1, 8, 32 and 128 rows at a context of DECODE_CONTEXT tokens (the lower of the compute
peak's for the step's useful FLOPs and of reading every weight once and the rows' KV cache per step), and the row
count where the two meet. flops_per_token: per token, the FLOPs spec 14 charges (2N forward, 6N trained) beside the
useful executed FLOPs of populora/analysis/work.py for a prompt pass of PROMPT_TOKENS tokens, a decode step at
DECODE_CONTEXT and an update of UPDATE_ROW (prompt, response) tokens, with an adapter of --rank on every projection.
load_average_1m_start / _end say how busy the machine was; progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from bench.harness import cores, emit, load_average, progress

DECODE_CONTEXT = 400  # about a propose prompt (~300 tokens) and 100 generated
PROMPT_TOKENS = 300
UPDATE_ROW = (300, 100)


def model_figures(name: str, rank: int = 0, targets: tuple[str, ...] = ()) -> tuple[list, object, int]:
    """The model's products as measured (populora.peaks.model_shapes), its shapes for the useful FLOPs' counter
    (with an adapter of `rank` on `targets`) and N of its base (spec 14), from its config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from populora.analysis.work import Shapes
    from populora.models import resolve_model_dir
    from populora.peaks import model_shapes

    config = AutoConfig.from_pretrained(resolve_model_dir(name))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model_shapes(config), Shapes.of(config, rank, targets), sum(p.numel() for p in model.parameters())


def weight_bytes(shapes, precision) -> int:
    """Every weight a decode step reads once, no adapter and no KV cache (populora.analysis.work.decode_bytes)."""
    from populora.analysis.work import decode_bytes

    return decode_bytes(dataclasses.replace(shapes, rank=0, targets=()), [], [], precision)


def decode_ceiling(peaks, shapes, precision, context: int = DECODE_CONTEXT) -> dict:
    """Tokens per second the roofline allows a decode step of b rows (b tokens a step) at `context`, and the rows
    where compute and bandwidth meet (None where a row's KV cache alone takes longer to read than its products)."""
    from populora.analysis.roofline import compute_seconds, step_seconds
    from populora.analysis.work import decode_bytes, decode_step

    ceiling = peaks.ceiling()
    rates = {}
    for b in (1, 8, 32, 128):
        count = decode_step(shapes, [context] * b)
        rates[str(b)] = b / step_seconds(count, decode_bytes(shapes, [context] * b, [shapes.rank], precision),
                                         precision, ceiling)
    row_compute = compute_seconds(decode_step(shapes, [context]), precision, ceiling)
    fixed = decode_bytes(shapes, [], [shapes.rank], precision) / ceiling.bytes_per_s
    per_row = (decode_bytes(shapes, [context], [], precision) - decode_bytes(shapes, [], [], precision)
               ) / ceiling.bytes_per_s
    meet = fixed / (row_compute - per_row) if row_compute > per_row else None
    return {"decode_ceiling_tokens_per_s_at_rows": rates, "decode_rows_where_compute_meets_bandwidth": meet,
            "decode_context": context}


def flops_per_token(shapes, n_base: int) -> dict:
    """Charged (spec 14) against useful executed FLOPs per token, for the passes named in this module's keys."""
    from populora.analysis.work import decode_step, prompt_pass, update

    n = n_base + shapes.adapter_params()
    prompt = prompt_pass(shapes, PROMPT_TOKENS)
    trained = update(shapes, [UPDATE_ROW])
    tokens = sum(UPDATE_ROW)
    return {"charged_forward": 2 * n, "charged_trained": 6 * n, "n_params": n,
            "prompt_pass_useful": prompt.useful / PROMPT_TOKENS,
            "decode_step_useful": decode_step(shapes, [DECODE_CONTEXT]).useful,
            "update_useful": trained.useful / tokens, "update_recomputed_head": trained.recomputed / tokens,
            "update_recomputed_checkpointing": (update(shapes, [UPDATE_ROW], checkpointing=True).recomputed
                                                - trained.recomputed) / tokens}


def measured_here(model: str, device: str = "cpu", dtype: str = "float32"):
    """(peaks, shapes) for a bench that reports fractions: the ceiling measured in the calling process on torch's
    threads as they are set now, merged into the machine's best known (what runs measure against too), with the
    product rows and repeats of this module's full measurement; the model's shapes without an adapter."""
    from populora.analysis.work import Precision
    from populora.peaks import best_known, measure

    products, shapes, _ = model_figures(model)
    dtypes = ("float32",) if dtype == "float32" else ("float32", dtype)
    progress("bench.roofline", "measuring the peak", f"{model}'s products in {', '.join(dtypes)}")
    peaks = best_known(measure(products, weight_bytes(shapes, Precision(dtype)), 0, device, dtypes=dtypes))
    return peaks, shapes


def update_fractions(model: str, result: dict, device: str = "cpu") -> dict:
    """bench.trainer's update_mfu: the useful executed FLOPs of an update (populora/analysis/work.py: its rows'
    prompt and response, the adapter's rank and targets, activation checkpointing as the mode ran it) per second of
    update compute, over the float32 peak measured here; for the default mode (update_mfu), each mode, and the
    1,024-token probes with the memory settings on and off (each probe ran in its own process on the same thread
    count). update_useful_flops_per_token and update_recomputed_flops_per_token: the default mode's."""
    from populora.analysis.roofline import mfu
    from populora.analysis.work import Precision, update

    peaks, shapes = measured_here(model, device)
    shapes = dataclasses.replace(shapes, rank=result["rank"], targets=tuple(result["lora_targets"]))
    precision, ceiling = Precision(), peaks.ceiling()
    out = {"peak_gflops": peaks.gflops["float32"], "peak_threads": peaks.threads}
    for mode in ("sequential", "batched"):
        m = result.get(mode)
        if m:
            row = (m["row_prompt_tokens"], m["row_response_tokens"])
            count = update(shapes, [row] * m["rows"], m["checkpointing"])
            out[f"update_mfu_{mode}"] = mfu(count, m["seconds_per_update_batch"], precision, ceiling)
            if mode == result.get("default_mode"):
                out["update_mfu"] = out[f"update_mfu_{mode}"]
                out["update_useful_flops_per_token"] = count.useful / (m["rows"] * sum(row))
                out["update_recomputed_flops_per_token"] = count.recomputed / (m["rows"] * sum(row))
    for settings in ("saving", "plain"):
        probe = result.get("memory_probes", {}).get(f"{settings}_1024")
        if probe:
            response = probe["response_tokens"] // probe["rows"]
            count = update(shapes, [(probe["row_tokens"] - response, response)] * probe["rows"],
                           probe["checkpointing"])
            out[f"update_mfu_{settings}_1k"] = mfu(count, probe["seconds"], precision, ceiling)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the JSON object on one line")
    p.add_argument("--model", default="smollm2-135m", help="the model whose shapes are measured")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true", help="the short measurement a run takes at its start")
    p.add_argument("--rank", type=int, default=32, help="the adapter's rank in flops_per_token and the decode ceiling")
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error("--threads is 0 (torch's default) or a count")
    import torch

    from populora.analysis.work import Precision
    from populora.config import ALL_TARGET_MODULES
    from populora.peaks import best_known, measure

    if args.threads:
        torch.set_num_threads(args.threads)
    out: dict = {"model": args.model, "load_average_1m_start": load_average(), "machine_cores": cores()}
    products, shapes, n_params = model_figures(args.model, args.rank, tuple(ALL_TARGET_MODULES))
    nbytes = weight_bytes(shapes, Precision())
    start = time.perf_counter()
    progress("bench.roofline", "measuring", f"{args.model}'s products and a {nbytes / 2**20:.0f} MiB read"
             f"{' (quick)' if args.quick else ''}")
    peaks = measure(products, nbytes, 0, args.device, quick=args.quick)
    out.update({"peak_gflops_fp32": peaks.gflops["float32"], "peak_gflops_bf16": peaks.gflops.get("bfloat16"),
                "bandwidth_gb_s": peaks.bandwidth_gb_s, "threads": peaks.threads, "cores": peaks.cores,
                "methods": peaks.methods, "model_params": n_params, "weight_bytes": nbytes,
                "measure_seconds": time.perf_counter() - start})
    progress("bench.roofline", "peak_gflops_fp32", round(peaks.gflops["float32"], 1))
    out.update(decode_ceiling(peaks, shapes, Precision()))
    out["flops_per_token"] = flops_per_token(shapes, n_params)
    best = best_known(peaks)
    out.update({"best_known_gflops_fp32": best.gflops["float32"], "best_known_gflops_bf16": best.gflops.get("bfloat16"),
                "best_known_bandwidth_gb_s": best.bandwidth_gb_s, "best_known_measurements": best.measurements})
    out["load_average_1m_end"] = load_average()
    emit(out, indent=None if args.json else 2, digits=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
