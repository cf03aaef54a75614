"""bench.inference's fractions of the machine's ceiling: the hf backend (the production path: the batched LoRA layer,
packed weights, the decoding loop) on each workload's batches, split into its prompt pass and its decode steps.

prefill_mfu: the useful executed FLOPs of the prompt pass (populora/analysis/work.py: every layer for every prompt
token, a request's n samples sharing one pass, attention at the context each token sees, the head on the last token
only) per second of it, over the float32 peak of the model's products measured in this process on its threads
(bench.roofline); the prompt pass is timed as the same batches with one new token each. prefill_useful_flops and
prefill_padding_flops (the prompts' left padding in their length groups: executed, not useful) beside it.
decode_roofline_fraction: the least time the roofline allows the decode steps (each step the longer of its useful
FLOPs, attention over every row's context and the head on every row, at the peak and reading every weight once, base
and the step's adapters, and the rows' KV cache at the measured bandwidth; its rows from the completions' lengths)
over the rest of the batches' time; decode_useful_flops beside it. Each side is the fastest of --rounds rounds,
alternating. decode_time_split: where the decode steps' time goes, by operator category (bench/inference_profile.py),
from one more profiled round after the timed ones, of at most --profile-steps decode steps (0: none), so the
profiler's events stay few.
"""

from __future__ import annotations

import dataclasses
import math
import time

from bench.harness import progress
from bench.inference_profile import decode_split, profiled
from bench.inference_workload import N_ADAPTERS, RANK, SUFFIX, warmup_batch

PROFILE_STEPS = 32


def _capped(batches: list[list], new_tokens: int) -> list[list]:
    """The batches with every row's budget at most `new_tokens`."""
    return [[dataclasses.replace(r, sampling=dataclasses.replace(
        r.sampling, max_new_tokens=min(new_tokens, r.sampling.max_new_tokens))) for r in batch] for batch in batches]


def _timed(backend, batches: list[list]) -> tuple[float, list[list], list[list[tuple[int, int]]]]:
    """Seconds of generating every batch; each batch's completions (populora.analysis.work.Completion) and its
    prompts, one per request, as (length, adapter rank)."""
    from populora.analysis.work import Completion

    rows, prompts = [], []
    start = time.perf_counter()
    for batch in batches:
        got = list(backend.generate(batch))
        ranks = [RANK if req.adapter is not None else 0 for req in batch]
        keys = [req.adapter.key if req.adapter is not None else None for req in batch]
        prompts.append([(len(r.prompt_token_ids), k) for r, k in zip(got, ranks, strict=True)])
        rows.append([Completion(len(r.prompt_token_ids), len(c.token_ids), key, k)
                     for r, key, k in zip(got, keys, ranks, strict=True) for c in r.completions])
    return time.perf_counter() - start, rows, prompts


def prompt_work(shapes, prompts: list[list[tuple[int, int]]]):
    """The count of the batches' prompt passes: each batch's prompts (one per request) in the decoding loop's length
    groups (services/inference/decoder.py), each group left-padded to its longest (the padding line)."""
    from populora.analysis.work import Count, prompt_group
    from services.inference.decoder import PREFILL_TOKENS, prefill_groups

    count = Count()
    for batch in prompts:
        for group in prefill_groups([n for n, _ in batch], PREFILL_TOKENS):
            count = count + prompt_group(shapes, [batch[i][0] for i in group], [batch[i][1] for i in group])
    return count


def bench_fractions(base, store, refs, workloads: dict, out: dict, model: str, rounds: int = 2,
                    profile_steps: int = PROFILE_STEPS) -> None:
    from bench.roofline import measured_here
    from populora.analysis.roofline import decode_count, decode_seconds, mfu
    from populora.analysis.work import Count, Precision
    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    peaks, shapes = measured_here(model)
    shapes = dataclasses.replace(shapes, rank=RANK, targets=tuple(ALL_TARGET_MODULES))
    precision, ceiling = Precision(), peaks.ceiling()
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
            for k in range(rounds):
                progress("bench.inference", f"fractions{sfx}", f"round {k + 1} of {rounds}: prompt pass, then whole")
                seconds, _, prompts = _timed(backend, _capped(batches, 1))
                prefill_s = min(prefill_s, seconds)
                seconds, rows, _ = _timed(backend, batches)
                full_s = min(full_s, seconds)
            decode_s = full_s - prefill_s
            prefill = prompt_work(shapes, prompts)
            least = sum(decode_seconds(shapes, x, precision, ceiling) for x in rows)
            decoded = sum((decode_count(shapes, x, precision) for x in rows), Count())
            decode_tokens = sum(max(0, c.generated - 1) for x in rows for c in x)  # the first is the prompt pass's
            out[f"prefill_s{sfx}"], out[f"decode_s{sfx}"] = prefill_s, decode_s
            out[f"prefill_tokens{sfx}"] = sum(n for batch in prompts for n, _ in batch)
            out[f"prefill_useful_flops{sfx}"], out[f"prefill_padding_flops{sfx}"] = prefill.useful, prefill.padding
            out[f"prefill_mfu{sfx}"] = mfu(prefill, prefill_s, precision, ceiling)
            out[f"decode_useful_flops{sfx}"] = decoded.useful
            # a batch of one or two new tokens can time its decode steps within the noise of its prompt pass
            timed = decode_s > 0 and decode_tokens > 0
            out[f"decode_tokens_per_s{sfx}"] = decode_tokens / decode_s if timed else None
            out[f"decode_roofline_tokens_per_s{sfx}"] = decode_tokens / least if least else None
            out[f"decode_roofline_fraction{sfx}"] = least / decode_s if timed else None
            progress("bench.inference", f"prefill_mfu{sfx}", round(out[f"prefill_mfu{sfx}"], 3))
            progress("bench.inference", f"decode_roofline_fraction{sfx}", out[f"decode_roofline_fraction{sfx}"])
            if timed and profile_steps > 0:
                # at most profile_steps decode steps in all, so the profiler's events stay bounded
                steps = max(1, profile_steps // len(batches))
                progress("bench.inference", f"decode_time_split{sfx}",
                         f"profiling {steps} decode steps a batch, {len(batches)} batches")
                out[f"decode_time_split{sfx}"] = decode_split(profiled(backend, _capped(batches, 1 + steps)),
                                                              profiled(backend, _capped(batches, 1)))
                out[f"decode_profile_steps{sfx}"] = steps * len(batches)
                progress("bench.inference", f"decode_time_split{sfx}", out[f"decode_time_split{sfx}"])
    finally:
        backend.host.multi.restore()
