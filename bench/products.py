"""The base's products in float32 (model.base_matmul=native) against bfloat16, on the production path, in one process
and on the same threads, the two alternating: what bfloat16 gains in speed and what it moves. Prints one JSON object.

    python -m bench.products --json [--model smollm2-135m] [--rounds 2] [--threads 0] [--new-tokens 0]

- generation: one `cpu-smol` step's propose and solve batches (bench.inference's `small` workload: 2 teachers x 3
  task types x 2 proposals, 2 students; its sampling and budgets, every row decoding its whole budget, since the
  settings sample different tokens) through the hf backend, each setting its own copy of the model: generate_s_native / _bfloat16 (the fastest round), generation_speedup; and
  prefill_s_* (the same batches with one new token), prefill_speedup.
- update: one batched TRR++ update of 4 adapters (rank 16, cpu-smol's trainer settings: memory settings on, 1,024-token
  micro-batches), 2 rollouts of 384 tokens each (three quarters prompt): update_s_native / _bfloat16, update_speedup.
- what it moves: greedy_same (the share of the propose batch's requests, decoded greedily, whose answer is the
  same token for token), max_logprob_diff (over those greedy answers read back by both settings, the largest
  difference of a chosen token's log-probability), update_cosine (the first update's change of the adapters'
  weights, bfloat16 against float32).
load_average_1m_start / _end say how busy the machine was.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import emit, load_average, progress

SETTINGS = ("native", "bfloat16")


def _greedy(batch: list) -> list:
    return [dataclasses.replace(r, sampling=dataclasses.replace(r.sampling, temperature=0.0, n=1)) for r in batch]


def _full_length(batches: list[list]) -> list[list]:
    """Every row decodes its whole budget: the two settings sample different tokens, so rows that stop early would
    give them different work."""
    return [[dataclasses.replace(r, sampling=dataclasses.replace(r.sampling, ignore_eos=True, stop=()))
             for r in batch] for batch in batches]


def generation(base, args, out: dict) -> None:
    from bench.inference_roofline import _capped, _timed
    from bench.inference_workload import (
        N_ADAPTERS,
        RANK,
        SHAPES,
        bench_config,
        make_store,
        make_workload,
        open_run,
        phase_batches,
        seed_tasks,
        warmup_batch,
    )
    from populora.config import ALL_TARGET_MODULES
    from populora.models import BaseModel
    from services.inference.hf import HfBackend

    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(args.model, Path(tmp), args.new_tokens)
        store, refs = make_store(base.model, Path(tmp) / "store")
        run, services = open_run(cfg, store, None)
        try:
            batches = _full_length(phase_batches(run, make_workload(run, "small", SHAPES["small"],
                                                                    [r.adapter_id for r in refs], seed_tasks(run))))
        finally:
            services.close()
        backends = {}
        for name in SETTINGS:
            own = BaseModel(base.name, copy.deepcopy(base.model), base.tokenizer, base.path, 0.0)
            backends[name] = HfBackend(own, store, ALL_TARGET_MODULES, max_rank=RANK, max_resident=N_ADAPTERS,
                                       base_matmul=name)
            for ref in refs:
                backends[name].load_adapter(ref)
            list(backends[name].generate(warmup_batch(batches)))
        full = {n: math.inf for n in SETTINGS}
        prefill = {n: math.inf for n in SETTINGS}
        for k in range(args.rounds):
            progress("bench.products", "generation", f"round {k + 1} of {args.rounds}, both settings")
            for name in SETTINGS if k % 2 == 0 else SETTINGS[::-1]:
                prefill[name] = min(prefill[name], _timed(backends[name], _capped(batches, 1))[0])
                full[name] = min(full[name], _timed(backends[name], batches)[0])
        for name in SETTINGS:
            out[f"generate_s_{name}"], out[f"prefill_s_{name}"] = full[name], prefill[name]
        out["generation_speedup"] = full["native"] / full["bfloat16"]
        out["prefill_speedup"] = prefill["native"] / prefill["bfloat16"]
        progress("bench.products", "generation_speedup", round(out["generation_speedup"], 3))
        moved(backends, _greedy(batches[0]), out)


def moved(backends: dict, batch: list, out: dict) -> None:
    """Greedy answers of both settings, and the native answers' log-probabilities read by both."""
    import torch

    answers = {name: {r.request_id: r for r in b.generate(batch)} for name, b in backends.items()}
    native = answers["native"]
    out["greedy_same"] = sum(native[k].completions[0].token_ids == answers["bfloat16"][k].completions[0].token_ids
                             for k in native) / len(native)
    worst = 0.0
    for r, req in zip(native.values(), batch, strict=True):
        prompt, tokens = r.prompt_token_ids, r.completions[0].token_ids
        ids = torch.tensor([prompt + tokens])
        key = req.adapter.key if req.adapter is not None else None
        logps = []
        for b in backends.values():
            with torch.inference_mode():
                logits = b.host.forward([key], input_ids=ids).logits[0, len(prompt) - 1:-1].float()
            logps.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]))
        worst = max(worst, float((logps[0] - logps[1]).abs().max()))
    out["max_logprob_diff"] = worst


def update(base, args, out: dict) -> None:
    import torch

    from bench.trainer_memory import rollouts
    from populora.config import load_config
    from populora.pb import trainer_pb2
    from populora.store import ArtifactStore
    from services.trainer.service import TrainerService

    services, refs, stores, moves = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SETTINGS:
            cfg = load_config(preset="cpu-smol", env=False, overrides=[
                f"model.name={args.model}", f"model.base_matmul={name}", "trainer.threads=0"])
            stores[name] = ArtifactStore(Path(tmp) / name)
            own = dataclasses.replace(base, model=copy.deepcopy(base.model))
            services[name] = TrainerService.from_config(cfg, base=own, store=stores[name])
            refs[name] = [services[name].InitAdapter(trainer_pb2.InitAdapterRequest(
                adapter_id=f"a{i}", role="student", seed=i)).adapter for i in range(4)]
        rows = rollouts(4, 2, 384, services["native"].pool.host.vocab_size, prompt_share=0.75)
        seconds = {n: math.inf for n in SETTINGS}
        for k in range(1 + args.rounds):
            progress("bench.products", "update", f"round {k + 1} of {1 + args.rounds} (the first not timed)")
            for name in SETTINGS if k % 2 == 0 else SETTINGS[::-1]:
                start = time.perf_counter()
                got = services[name].UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
                    trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[i], seed=k, step=k + 1)
                    for i, ref in enumerate(refs[name])]))
                if k:
                    seconds[name] = min(seconds[name], time.perf_counter() - start)
                else:  # the first update: the change of the weights both settings made from the same start
                    before = [stores[name].read(r).weights for r in refs[name]]
                    after = [stores[name].read(r.adapter).weights for r in got.results]
                    moves[name] = torch.cat([(a[key] - b[key]).flatten() for a, b in zip(after, before, strict=True)
                                             for key in sorted(b)])
                refs[name] = [r.adapter for r in got.results]
    for name in SETTINGS:
        out[f"update_s_{name}"] = seconds[name]
    out["update_speedup"] = seconds["native"] / seconds["bfloat16"]
    out["update_cosine"] = float(torch.nn.functional.cosine_similarity(moves["native"], moves["bfloat16"], dim=0))
    progress("bench.products", "update_speedup", round(out["update_speedup"], 3))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the JSON object on one line")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds of each setting, alternating (default 2)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--new-tokens", type=int, default=0, help="cap the token budgets at N (0 = cpu-smol's)")
    p.add_argument("--skip-update", action="store_true")
    args = p.parse_args(argv)
    import torch

    from populora.lora.prepack import bfloat16_native
    from populora.models import load_base_model

    if args.threads:
        torch.set_num_threads(args.threads)
    out: dict = {"model": args.model, "threads": torch.get_num_threads(), "bfloat16_native": bfloat16_native(),
                 "load_average_1m_start": load_average()}
    progress("bench.products", "loading", args.model)
    base = load_base_model(args.model)
    generation(base, args, out)
    if not args.skip_update:
        update(base, args, out)
    out["load_average_1m_end"] = load_average()
    emit(out, indent=None if args.json else 2, digits=4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
