"""The engines bench.inference times on the same batches: the hf backend (batched LoRA, its gather variant, one
adapter at a time, no adapter, a population of mixed ranks against one of a single rank), the training loop's own
generation phases, plain PEFT, and the resident memory each adapter costs. Each writes its figures into the result object as it takes them."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from bench.harness import progress, random_adapters, rss_mb
from bench.inference_workload import (
    N_ADAPTERS,
    RANK,
    STEP,
    SUFFIX,
    by_adapter,
    warmup_batch,
    without_adapters,
)

MIXED_RANKS = [8, 16, 32, 64]
UNIFORM_RANK = 30  # 8 x 30 = 2 x (8 + 16 + 32 + 64): the same total rank as the mixed population
SERVED_RANK = 32  # generation.max_lora_rank's default, which Config.serving_rank raises to a run's largest rank


@dataclass
class Measured:
    tokens: int = 0
    rows: int = 0
    early: int = 0  # rows that ended on eos or a stop string before their budget
    seconds: float = 0.0
    prompt_lengths: list = dataclasses.field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def run_backend(backend, batches: list[list]) -> Measured:
    m = Measured()
    start = time.perf_counter()
    for batch in batches:
        for result in backend.generate(batch):
            m.prompt_lengths.append(len(result.prompt_token_ids))
            for c in result.completions:
                m.tokens += len(c.token_ids)
                m.rows += 1
                m.early += c.finish_reason == "stop"
    m.seconds = time.perf_counter() - start
    return m


def measure(out: dict, key: str, value: float) -> None:
    """The figure into the result, and a line for whoever watches the run."""
    out[key] = value
    progress("bench.inference", key, round(value, 2))


def over_runs(runs: list[Measured]) -> float:
    """Tokens per second over several runs of the same batches: all their tokens over all their time."""
    return sum(m.tokens for m in runs) / sum(m.seconds for m in runs)


def bench_hf(base, store, refs, workloads: dict, out: dict, rounds: int = 2) -> None:
    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK, max_resident=N_ADAPTERS)
    for ref in refs:
        backend.load_adapter(ref)
    warm = warmup_batch(workloads["small" if "small" in workloads else "large"])
    try:
        for name, batches in workloads.items():
            sfx = SUFFIX[name]
            # mixed and base alternate for `rounds` rounds and each figure is over all of its rounds, so a change
            # in the machine's speed during the run weighs on both sides of lora_overhead alike
            mixed_runs, base_runs = [], []
            for _ in range(rounds):
                run_backend(backend, [warm])
                mixed_runs.append(run_backend(backend, batches))
                run_backend(backend, [warm])
                base_runs.append(run_backend(backend, without_adapters(batches)))
            mixed = mixed_runs[0]
            measure(out, f"mixed_tokens_per_s{sfx}", over_runs(mixed_runs))
            out[f"rows_{name}"], out[f"tokens_{name}"] = mixed.rows, mixed.tokens
            out[f"finished_early_{name}"] = mixed.early / mixed.rows
            out[f"prompt_tokens_{name}"] = [min(mixed.prompt_lengths), max(mixed.prompt_lengths)]
            measure(out, f"base_tokens_per_s{sfx}", over_runs(base_runs))
            out[f"lora_overhead_rounds{sfx}"] = [round(b.tokens_per_s / m.tokens_per_s, 3)
                                                 for m, b in zip(mixed_runs, base_runs, strict=True)]
            run_backend(backend, [warm])
            measure(out, f"sequential_tokens_per_s{sfx}", run_backend(backend, by_adapter(batches)).tokens_per_s)
            backend.host.multi.mode = "gather"
            run_backend(backend, [warm])
            measure(out, f"mixed_gather_tokens_per_s{sfx}", run_backend(backend, batches).tokens_per_s)
            backend.host.multi.mode = "segments"
    finally:
        backend.host.multi.restore()


def bench_mixed_rank(base, root, batches: list[list], warm: list, out: dict, rounds: int = 2) -> None:
    """Spec 9, "Mixed ranks": the same batches served by a population of ranks 8, 16, 32, 64 (twice over the 8
    adapters) and by one of rank 30 everywhere, the same total rank; each as a run of its ranks serves it, the hf
    backend's slot banks as wide as Config.serving_rank makes them (64 and 32), so a smaller adapter is zero-padded to
    them. The sides alternate (mixed, uniform, uniform, mixed, ...) and each figure is over all of its rounds."""
    from populora.config import ALL_TARGET_MODULES
    from populora.store import ArtifactStore
    from services.inference.hf import HfBackend

    sides = {}
    for name, ranks in (("mixed", MIXED_RANKS), ("uniform", [UNIFORM_RANK])):
        store = ArtifactStore(root / f"ranks-{name}")
        refs = random_adapters(store, base.model, ALL_TARGET_MODULES, ranks, N_ADAPTERS, "bench-")
        sides[name] = (store, refs, max(SERVED_RANK, *ranks))
    runs: dict[str, list[Measured]] = {"mixed": [], "uniform": []}
    for k in range(rounds):
        for name in ("mixed", "uniform") if k % 2 == 0 else ("uniform", "mixed"):
            store, refs, width = sides[name]
            backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=width, max_resident=N_ADAPTERS)
            try:
                for ref in refs:
                    backend.load_adapter(ref)
                run_backend(backend, [warm])
                runs[name].append(run_backend(backend, batches))
            finally:
                backend.host.multi.restore()
    measure(out, "mixed_rank_tokens_per_s", over_runs(runs["mixed"]))
    measure(out, "uniform_rank_tokens_per_s", over_runs(runs["uniform"]))
    out["mixed_rank_tokens_per_s_ratio"] = out["mixed_rank_tokens_per_s"] / out["uniform_rank_tokens_per_s"]
    out["mixed_rank_ratio_rounds"] = [round(m.tokens_per_s / u.tokens_per_s, 3)
                                      for m, u in zip(runs["mixed"], runs["uniform"], strict=True)]
    out["mixed_rank_ranks"] = {"mixed": MIXED_RANKS, "uniform": [UNIFORM_RANK], "bank_width": {
        name: side[2] for name, side in sides.items()}}


def bench_loop(run_of, refs, workloads: dict, plans: dict, out: dict) -> None:
    """The loop's generation: phases.propose then phases.solve through an InferenceService built from the config
    (as the embedded run builds it), adapters loaded through LoadAdapter as the update phase loads them."""
    from coordinator.run import phases
    from populora.pb import inference_pb2
    from populora.rpc import ref_to_pb

    run = run_of()
    service = run.services.inference
    for ref in refs:
        service.LoadAdapter(inference_pb2.LoadAdapterRequest(adapter=ref_to_pb(ref)))
    warm = warmup_batch(workloads["small" if "small" in workloads else "large"])
    out["loop_threads"] = service.backend.threads
    try:
        for name, w in plans.items():
            run_backend(service.backend, [warm])
            t0 = time.perf_counter()
            proposed = phases.propose(run, STEP, w.matched, w.population, w.buffers)
            t1 = time.perf_counter()
            validated = w.validated(proposed)  # the sandbox's verdicts, drawn (not timed: not generation)
            t2 = time.perf_counter()
            solved = phases.solve(run, STEP, w.matched, proposed, validated, w.population)
            seconds = (t1 - t0) + (time.perf_counter() - t2)
            tokens = (sum(len(p.response_token_ids) for p in proposed.proposals) +
                      sum(len(a.response_token_ids) for a in solved.attempts))
            measure(out, f"loop_tokens_per_s{SUFFIX[name]}", tokens / seconds)
            out[f"loop_tokens_{name}"] = tokens
    finally:
        service.backend.host.multi.restore()


def peft_generate(model, tok, eos: list[int], batch: list) -> int:
    """One batch through PEFT's generate: a request's n samples as n rows; the tokens each row generated up to and
    including its first eos."""
    import torch

    from services.inference.backend import encode_prompt

    rows = [r for r in batch for _ in range(r.sampling.n)]
    s = rows[0].sampling
    enc = tok.pad({"input_ids": [encode_prompt(tok, r) for r in rows]}, padding=True, return_tensors="pt")
    torch.manual_seed(s.seed)
    with torch.inference_mode():
        seqs = model.generate(**enc, adapter_names=[r.adapter.key for r in rows], max_new_tokens=s.max_new_tokens,
                              do_sample=s.temperature > 0, temperature=s.temperature or None,
                              top_p=s.top_p if s.temperature > 0 else None, top_k=None,
                              eos_token_id=eos, pad_token_id=tok.pad_token_id)
    new = seqs[:, enc["input_ids"].shape[1]:]
    tokens = 0
    for row in new.tolist():
        ends = [i for i, t in enumerate(row) if t in eos]
        tokens += ends[0] + 1 if ends else len(row)
    return tokens


def bench_peft(base, store, refs, workloads: dict, out: dict) -> None:
    """Plain PEFT: every adapter loaded into one PeftModel, `generate(..., adapter_names=...)`, warmed like ours."""
    from peft import PeftModel

    model = None
    for ref in refs:
        path = str(store.path_of(ref))
        if model is None:
            model = PeftModel.from_pretrained(base.model, path, adapter_name=ref.key)
        else:
            model.load_adapter(path, adapter_name=ref.key)
    model.eval()
    tok, eos = base.tokenizer, base.eos_token_ids
    warm = warmup_batch(workloads["small" if "small" in workloads else "large"])
    try:
        for name, batches in workloads.items():
            peft_generate(model, tok, eos, warm)
            start, tokens = time.perf_counter(), 0
            for batch in batches:
                tokens += peft_generate(model, tok, eos, batch)
            measure(out, f"peft_mixed_tokens_per_s{SUFFIX[name]}", tokens / (time.perf_counter() - start))
    finally:
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
    backend.host.multi.restore()
