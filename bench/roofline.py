"""The ceiling this machine reaches in the operations a step is made of, measured in this process on its threads:
dense matrix products at the model's shapes (float32, and bfloat16 where the cores multiply it natively) and the
bandwidth of reading every weight once (what a decode step waits on). Prints one JSON object.

    python -m bench.roofline --json [--model smollm2-135m] [--threads 0] [--quick]

Keys: peak_gflops_fp32, peak_gflops_bf16 (null where the cores have no native bfloat16 product), bandwidth_gb_s
(GB/s reading a float32 buffer of the model's weight bytes, at least 256 MiB and at most 1 GiB), threads (torch's
intra-op threads: --threads, else torch's default), cores (the cores this process may run on), methods (per dtype,
the product that reached the peak: F.linear or the oneDNN-packed weight of the inference path, and at how many rows),
weight_bytes, model_params, and best_known_*: the same figures merged with the best this machine has reached before
(populora/peaks.py: the populora cache holds the highest per CPU model, cores, threads, torch and model shapes; runs
measure their fractions against it). decode_ceiling_tokens_per_s_at_rows: the roofline's decode rate at 1, 8, 32
and 128 rows (the lower of the compute peak's and of reading every weight once per step), and the row count where
the two meet. load_average_1m_start / _end say how busy the machine was.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.harness import cores, emit, load_average


def model_figures(name: str) -> tuple[list, int]:
    """The model's products (populora.peaks.model_shapes) and its parameter count, from its config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from populora.models import resolve_model_dir
    from populora.peaks import model_shapes

    config = AutoConfig.from_pretrained(resolve_model_dir(name))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model_shapes(config), sum(p.numel() for p in model.parameters())


def decode_ceiling(peaks, n_params: int, weight_bytes: int, dtype: str = "float32") -> dict:
    """Tokens per second the roofline allows a decode step of b rows (b tokens a step), and where compute and
    bandwidth meet."""
    from populora.analysis.roofline import decode_step_seconds

    ceiling = peaks.ceiling(dtype)
    rates = {str(b): b / decode_step_seconds(b, n_params, weight_bytes, ceiling) for b in (1, 8, 32, 128)}
    meet = weight_bytes / ceiling.bytes_per_s * ceiling.flops_per_s / (2 * n_params)
    return {"decode_ceiling_tokens_per_s_at_rows": rates, "decode_rows_where_compute_meets_bandwidth": meet}


def measured_here(model: str, device: str = "cpu", dtype: str = "float32"):
    """(peaks, N of the base, weight bytes) for a bench that reports fractions: the ceiling measured in the calling
    process on torch's threads as they are set now, merged into the machine's best known (what runs measure against
    too), with the product rows and repeats of this module's full measurement."""
    from populora.peaks import best_known, measure

    shapes, n_params = model_figures(model)
    weight_bytes = (2 if dtype == "bfloat16" else 4) * n_params
    dtypes = ("float32",) if dtype == "float32" else ("float32", dtype)
    return best_known(measure(shapes, weight_bytes, 0, device, dtypes=dtypes)), n_params, weight_bytes


def update_fractions(model: str, result: dict, device: str = "cpu") -> dict:
    """bench.trainer's update_mfu: 6N x the tokens an update processed (prompt and response of every row, spec 14)
    per second of update compute over the peak measured here, N = the base's parameters and one adapter's; for the
    default mode (update_mfu), each mode, and the 1,024-token probes with the memory settings on and off (each probe
    ran in its own process on the same thread count)."""
    peaks, n_params, _ = measured_here(model, device)
    n = n_params + result.get("lora_params_per_adapter", 0)
    peak = peaks.gflops["float32"] * 1e9
    out = {"peak_gflops": peaks.gflops["float32"], "peak_threads": peaks.threads}
    for mode in ("sequential", "batched"):
        if mode in result:
            out[f"update_mfu_{mode}"] = 6 * n * result[mode]["processed_tokens_per_s"] / peak
    if result.get("default_mode") in result:
        out["update_mfu"] = out[f"update_mfu_{result['default_mode']}"]
    for settings in ("saving", "plain"):
        probe = result.get("memory_probes", {}).get(f"{settings}_1024")
        if probe:
            out[f"update_mfu_{settings}_1k"] = 6 * n * probe["rows"] * probe["row_tokens"] / probe["seconds"] / peak
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the JSON object on one line")
    p.add_argument("--model", default="smollm2-135m", help="the model whose shapes are measured")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true", help="the short measurement a run takes at its start")
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error("--threads is 0 (torch's default) or a count")
    import torch

    from populora.peaks import best_known, measure

    if args.threads:
        torch.set_num_threads(args.threads)
    out: dict = {"model": args.model, "load_average_1m_start": load_average(), "machine_cores": cores()}
    shapes, n_params = model_figures(args.model)
    weight_bytes = 4 * n_params
    start = time.perf_counter()
    peaks = measure(shapes, weight_bytes, 0, args.device, quick=args.quick)
    out.update({"peak_gflops_fp32": peaks.gflops["float32"], "peak_gflops_bf16": peaks.gflops.get("bfloat16"),
                "bandwidth_gb_s": peaks.bandwidth_gb_s, "threads": peaks.threads, "cores": peaks.cores,
                "methods": peaks.methods, "model_params": n_params, "weight_bytes": weight_bytes,
                "measure_seconds": time.perf_counter() - start})
    out.update(decode_ceiling(peaks, n_params, weight_bytes))
    best = best_known(peaks)
    out.update({"best_known_gflops_fp32": best.gflops["float32"], "best_known_gflops_bf16": best.gflops.get("bfloat16"),
                "best_known_bandwidth_gb_s": best.bandwidth_gb_s, "best_known_measurements": best.measurements})
    out["load_average_1m_end"] = load_average()
    emit(out, indent=None if args.json else 2, digits=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
