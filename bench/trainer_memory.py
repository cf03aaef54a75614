"""bench.trainer's rollouts (bench.scale and bench.products train on them too) and its memory probes: each probe is
one update in a process of its own (`python -m bench.trainer --probe N`), so peaks of different settings never mix
(bench/trainer.py describes the figures)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from bench.harness import module_command, peak_mb, progress, reset_peak, rss_mb, run_json


def rollouts(n_adapters: int, per_adapter: int, tokens: int, vocab: int, seed: int = 0, prompt_share: float = 0.25):
    """Rollouts of `tokens` tokens each (`prompt_share` of them prompt, the rest response), rewards spread over
    [0, 1]."""
    from populora.pb import trainer_pb2

    gen = torch.Generator().manual_seed(seed)
    n_prompt = min(tokens - 1, max(1, int(tokens * prompt_share)))
    out = []
    for _ in range(n_adapters):
        rows = []
        for k in range(per_adapter):
            ids = torch.randint(100, min(vocab, 30000), (tokens,), generator=gen).tolist()
            rows.append(trainer_pb2.Rollout(prompt_token_ids=ids[:n_prompt], response_token_ids=ids[n_prompt:],
                                            reward=float(k % 2), task_type="code_o", role="student"))
        out.append(rows)
    return out


MEMORY_ADAPTERS = 4


def memory_overrides(saving: bool, micro_batch_tokens: int) -> list[str]:
    """The trainer settings of a probe: the memory settings at their defaults (on), or all off."""
    if saving:
        return []
    return ["trainer.activation_checkpointing=false", "trainer.attention=eager",
            f"trainer.logprob_chunk_tokens={micro_batch_tokens}", "trainer.mmap_threshold_kb=0"]


def probe(args) -> dict:
    """One update of MEMORY_ADAPTERS adapters whose rows (args.probe_rows each) fill one micro-batch of args.probe
    tokens; its peak RSS over the resident set just before (extra_mb), and the memory model's prediction of that."""
    from populora.config import load_config
    from populora.models import load_base_model
    from populora.pb import trainer_pb2
    from populora.store import ArtifactStore
    from services.trainer.service import TrainerService

    tokens = args.probe
    cfg = load_config(overrides=[f"model.name={args.model}", f"lora.rank={args.rank}", f"lora.alpha={2 * args.rank}",
                                 "trainer.batch_mode=batched", "trainer.lr=1e-5",
                                 f"trainer.micro_batch_tokens={tokens}",
                                 *memory_overrides(args.probe_settings == "saving", tokens),
                                 *args.probe_override], env=False)
    width = tokens // (MEMORY_ADAPTERS * args.probe_rows)
    with tempfile.TemporaryDirectory(prefix="bench-trainer-probe-") as tmp:
        base = load_base_model(args.model, device=args.device)
        svc = TrainerService.from_config(cfg, base=base, store=ArtifactStore(Path(tmp)))
        rows = rollouts(MEMORY_ADAPTERS, args.probe_rows, width, svc.pool.host.vocab_size, seed=1,
                         prompt_share=args.probe_prompt)
        refs = [svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=f"m{i}", role="student", seed=i)).adapter
                for i in range(MEMORY_ADAPTERS)]
        # a small first update: lazy imports, Adam state, store writes; the measured one is a steady-state update
        small = rollouts(MEMORY_ADAPTERS, 2, 16, svc.pool.host.vocab_size, seed=2)
        refs = [r.adapter for r in svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
            trainer_pb2.UpdateRequest(adapter=ref, rollouts=small[i], seed=0, step=1)
            for i, ref in enumerate(refs)])).results]
        req = trainer_pb2.UpdateBatchRequest(updates=[
            trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[i], seed=0, step=2) for i, ref in enumerate(refs)])
        before = rss_mb(trim=True)
        reset_peak()  # not Linux: the peak includes loading, the same in every probe
        resp = svc.UpdateBatch(req)
        peak = peak_mb()
        seconds = max(r.stats.seconds for r in resp.results)
        out = {"micro_batch_tokens": tokens, "settings": args.probe_settings, "overrides": args.probe_override,
               "rows": MEMORY_ADAPTERS * args.probe_rows, "row_tokens": width, "peak_mb": peak,
               "rss_mb_before": before, "extra_mb": peak - before, "seconds": seconds,
               "checkpointing": cfg.trainer.activation_checkpointing,
               "response_tokens": sum(r.stats.tokens for r in resp.results)}
        out.update(predicted(svc, out["rows"], width, out["response_tokens"]))
        out["tokens_per_s"] = out["response_tokens"] / seconds
        if args.probe_settings == "saving":
            out["max_abs_logprob_diff"] = logprob_diff(svc, [r for rs in rows for r in rs])
    return out


def predicted(svc, rows: int, width: int, response: int) -> dict:
    """The memory model's figures for the probe's update (services/trainer/memory.py): its one micro-batch, the
    held adapters (with Adam moments, after the first update), the trainer's own settings."""
    from services.trainer import memory

    host, settings = svc.pool.host, svc.pool.trr
    model = memory.ModelShape.of(host.causal_lm)
    adapters = [memory.AdapterShape.of(list(h.params.values()), model.layers, True) for h in svc.pool.held.values()]
    extra = memory.update_bytes(model, adapters, [(rows, width, response)], settings.logprob_chunk_tokens,
                                settings.activation_checkpointing, settings.entropy_coef > 0, host.device.type == "cpu")
    return {"predicted_extra_mb": extra / memory.MB, "base_mb": memory.base_bytes(host.causal_lm) / memory.MB,
            "adapters_at_rest_mb": sum(a.rest_bytes() for a in adapters) / memory.MB}


def logprob_diff(svc, rollouts) -> float:
    """max |chunked - whole| over the response tokens of `rollouts` under the trainer's first adapter."""
    from services.trainer.logprobs import token_logprobs_whole
    from services.trainer.trr import Row, collate, response_logprobs

    host, slot = svc.pool.host, next(iter(svc.pool.held.values())).slot
    rows = [Row(0, list(r.prompt_token_ids) + list(r.response_token_ids), len(r.prompt_token_ids), 1.0, 1.0)
            for r in rollouts[:2]]
    mb = collate(rows, [slot], host.device)
    with torch.no_grad():
        chunked, _ = response_logprobs(host, mb, False, svc.pool.trr.logprob_chunk_tokens)
        hidden = host.hidden_states(mb.adapters, mb.input_ids, mb.attention_mask)[mb.pred_rows, mb.pred_pos]
        whole, _ = token_logprobs_whole(host.output_layer(), hidden, mb.targets)
    return float((chunked - whole).abs().max())


def run_probe(args, tokens: int, settings: str, rows: int = 2, prompt_share: float = 0.25,
              overrides: tuple[str, ...] = ()) -> dict:
    """`probe` in a fresh Python process (peaks of different settings never mix)."""
    cmd = module_command("bench.trainer", "--probe", str(tokens), "--probe-settings", settings,
                         "--probe-rows", str(rows), "--probe-prompt", str(prompt_share),
                         *(f"--probe-override={o}" for o in overrides),
                         "--model", args.model, "--rank", str(args.rank), "--device", args.device)
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return run_json(cmd, f"memory probe ({tokens} tokens, {settings})", env=os.environ.copy())


def memory(args) -> dict:
    probes = {}
    for settings, sizes in (("saving", (1024, 4096)), ("plain", args.plain_tokens)):
        for tokens in sizes:
            progress("bench.trainer", "memory probe", f"{tokens} tokens, memory settings {settings} (own process)")
            probes[f"{settings}_{tokens}"] = run_probe(args, tokens, settings)
            if not args.json:
                print("probe", json.dumps(probes[f"{settings}_{tokens}"]), file=sys.stderr)
    out = {"peak_mb_1k": probes["saving_1024"]["peak_mb"], "peak_mb_4k": probes["saving_4096"]["peak_mb"]}
    out["mb_per_1k_tokens"] = (out["peak_mb_4k"] - out["peak_mb_1k"]) / 3
    for tokens in args.plain_tokens:
        out[f"peak_mb_{tokens // 1024}k_plain"] = probes[f"plain_{tokens}"]["peak_mb"]
    out["tokens_per_s_saving"] = probes["saving_1024"]["tokens_per_s"]
    if "plain_1024" in probes:
        out["tokens_per_s_plain"] = probes["plain_1024"]["tokens_per_s"]
        out["saving_over_plain_1k"] = out["peak_mb_1k"] / out["peak_mb_1k_plain"]
    # the plain probes leave glibc's threshold on, so their freed memory stays resident: the model is not for them
    out["memory_model_error"] = max(abs(p["predicted_extra_mb"] - p["extra_mb"]) / p["extra_mb"]
                                    for p in probes.values() if p["settings"] == "saving")
    out["max_abs_logprob_diff"] = max(p["max_abs_logprob_diff"] for p in probes.values() if "max_abs_logprob_diff" in p)
    out["memory_probes"] = probes
    return out
