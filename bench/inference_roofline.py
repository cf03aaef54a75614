"""bench.inference's fractions of the machine's ceiling: the hf backend (the production path: the batched LoRA layer,
packed weights, the decoding loop) on each workload's batches, split into its prompt pass and its decode steps.

prefill_mfu: 2N x the prompt tokens the prompt pass ran (a request's n samples share one) per second of it, over the
peak of the model's products measured in this process on its threads (bench.roofline); the prompt pass is timed as
the same batches with one new token each. decode_roofline_fraction: the least time the roofline allows the decode
steps (each step the longer of 2N x its rows at the peak and reading every weight once, base and the batch's
adapters, at the measured bandwidth; its rows from the completions' lengths) over the rest of the batches' time.
Each side is the fastest of --rounds rounds, alternating; N = the base's parameters and one adapter's.
decode_time_split: where the decode steps' time goes, by operator category (bench/inference_profile.py), from one
more profiled round after the timed ones.
"""

from __future__ import annotations

import dataclasses
import math
import time

from bench.harness import progress
from bench.inference_profile import decode_split, profiled
from bench.inference_workload import N_ADAPTERS, RANK, SUFFIX, warmup_batch


def _one_token(batches: list[list]) -> list[list]:
    return [[dataclasses.replace(r, sampling=dataclasses.replace(r.sampling, max_new_tokens=1)) for r in batch]
            for batch in batches]


def _timed(backend, batches: list[list]) -> tuple[float, list[list[int]], int, set]:
    """Seconds of generating every batch; each batch's completion lengths, the prompt tokens passed and the adapters."""
    lengths, prompt_tokens, adapters = [], 0, set()
    start = time.perf_counter()
    for batch in batches:
        got = list(backend.generate(batch))
        lengths.append([len(c.token_ids) for r in got for c in r.completions])
        prompt_tokens += sum(len(r.prompt_token_ids) for r in got)  # one prompt pass per request
        adapters |= {r.adapter.key for r in batch if r.adapter is not None}
    return time.perf_counter() - start, lengths, prompt_tokens, adapters


def bench_fractions(base, store, refs, workloads: dict, out: dict, model: str, rounds: int = 2) -> None:
    from bench.roofline import measured_here
    from populora.analysis.roofline import decode_seconds
    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    peaks, n_base, base_bytes = measured_here(model)
    ceiling = peaks.ceiling("float32")
    adapter_params = sum(t.numel() for t in store.read(refs[0]).weights.values())
    n = n_base + adapter_params
    out["peak_gflops"], out["bandwidth_gb_s"], out["peak_threads"] = (peaks.gflops["float32"], peaks.bandwidth_gb_s,
                                                                      peaks.threads)
    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK, max_resident=N_ADAPTERS)
    for ref in refs:
        backend.load_adapter(ref)
    try:
        for name, batches in workloads.items():
            sfx = SUFFIX[name]
            list(backend.generate(warmup_batch(batches)))
            prefill_s, full_s = math.inf, math.inf
            for _ in range(rounds):
                seconds, _, prompt_tokens, _ = _timed(backend, _one_token(batches))
                prefill_s = min(prefill_s, seconds)
                seconds, lengths, _, adapters = _timed(backend, batches)
                full_s = min(full_s, seconds)
            weight_bytes = base_bytes + 4 * adapter_params * len(adapters)
            decode_s = full_s - prefill_s
            least = sum(decode_seconds(x, n, weight_bytes, ceiling) for x in lengths)
            decode_tokens = sum(max(0, k - 1) for x in lengths for k in x)  # a row's first token is the prompt pass's
            out[f"prefill_s{sfx}"], out[f"decode_s{sfx}"] = prefill_s, decode_s
            out[f"prefill_tokens{sfx}"] = prompt_tokens
            out[f"prefill_mfu{sfx}"] = 2 * n * prompt_tokens / prefill_s / ceiling.flops_per_s
            # a batch of one or two new tokens can time its decode steps within the noise of its prompt pass
            timed = decode_s > 0 and decode_tokens > 0
            out[f"decode_tokens_per_s{sfx}"] = decode_tokens / decode_s if timed else None
            out[f"decode_roofline_tokens_per_s{sfx}"] = decode_tokens / least if least else None
            out[f"decode_roofline_fraction{sfx}"] = least / decode_s if timed else None
            progress("bench.inference", f"prefill_mfu{sfx}", round(out[f"prefill_mfu{sfx}"], 3))
            progress("bench.inference", f"decode_roofline_fraction{sfx}", out[f"decode_roofline_fraction{sfx}"])
            if timed:
                out[f"decode_time_split{sfx}"] = decode_split(profiled(backend, batches),
                                                              profiled(backend, _one_token(batches)))
                progress("bench.inference", f"decode_time_split{sfx}", out[f"decode_time_split{sfx}"])
    finally:
        backend.host.multi.restore()
