"""Evaluation throughput: 8 adapters on the first HumanEval problems, all in one multi-LoRA batch vs one adapter at a
time, everything counted (generation, extraction, sandbox scoring). Prints one JSON object.

    python -m bench.eval --json [--limit 16] [--max-new-tokens 128] [--adapters 8] [--threads 0] [--canonical 0]
                                [--preset cpu-smol]

SmolLM2-135M-Instruct (the cpu-smol preset: chat prompts), 8 random rank-16 adapters, greedy, on torch's default
threads (every core, as `populora eval --set generation.threads=0` runs) unless --threads says otherwise.
Both sides run in this process with the same threads after the same warm-up (one problem for all adapters), and the
same services: the in-process inference and sandbox services `populora eval` uses. Keys:
  problems_per_s_batched     adapters x problems / seconds, all adapters in one evaluate() call (one batch)
  problems_per_s_one_by_one  the same work, one evaluate() call per adapter
  batch_gain                 their ratio
  sandbox_jobs_per_s         the 164 canonical HumanEval solutions with their tests (--canonical N: the first N),
                             jobs / seconds
  canonical_pass_rate        the share of them that pass (must be 1.0)
  batch_gain_cpu             the ratio of this process's CPU seconds (one by one / batched): the gain without the
                             noise other processes on a shared machine add to wall-clock time
and identical_scores (the batched and one-by-one scores agree), seconds, tokens and pass@1 of each side. Progress
lines (each stage as it starts) go to stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import emit, load_average, progress, random_adapters, timed

RANK = 16


def _services(cfg, root: Path, n_adapters: int):
    from populora.config import ALL_TARGET_MODULES
    from populora.models import load_from_config
    from populora.store import ArtifactStore
    from services.inference.hf import HfBackend
    from services.inference.service import InferenceService
    from services.sandbox.backends import make_executor
    from services.sandbox.service import SandboxService

    base = load_from_config(cfg)
    store = ArtifactStore(root)
    refs = random_adapters(store, base.model, ALL_TARGET_MODULES, RANK, n_adapters, "bench.A",
                           base_model=cfg.model.name, meta={"base_model": cfg.model.name})
    g = cfg.generation
    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK, max_batch=g.max_batch,
                        max_resident=max(n_adapters, g.max_resident_adapters), chat_template=cfg.model.chat_template,
                        threads=g.threads)
    services = argparse.Namespace(inference=InferenceService(backend, g.max_new_tokens),
                                  sandbox=SandboxService(make_executor(cfg.sandbox), cfg.tasks, cfg.sandbox))
    return services, store, refs


def _timed(services, targets, problems, max_new_tokens: int, chat: bool) -> tuple[float, list, dict]:
    from populora.evals import evaluate

    seen = {"tokens": 0, "jobs": 0, "score_s": 0.0}

    def progress(event: str, info: dict) -> None:
        if event == "generated":
            seen["tokens"] += info["tokens"]
        elif event == "scored":
            seen["jobs"] += info["jobs"]
            seen["score_s"] += info["seconds"]

    start, cpu = time.perf_counter(), time.process_time()
    results = evaluate(services, targets, "humaneval", problems=problems, max_new_tokens=max_new_tokens, chat=chat,
                       progress=progress)
    seen["cpu_s"] = time.process_time() - cpu
    return time.perf_counter() - start, results, seen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the result as JSON on one line (else indented)")
    p.add_argument("--limit", type=int, default=16, help="the first N HumanEval problems")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--preset", default="cpu-smol")
    p.add_argument("--canonical", type=int, default=0,
                   help="the first N canonical HumanEval solutions behind sandbox_jobs_per_s (0: all 164)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads for generation, both sides (0 = torch's default: every core; the preset's "
                        "generation.threads is for a machine shared with the rest of a training run)")
    args = p.parse_args(argv)

    from populora.config import load_config
    from populora.evals import EvalTarget, load_problems
    from populora.evals.scoring import canonical_program, run_programs

    cfg = load_config(preset=args.preset, env=False)
    import torch

    cfg.generation.threads = args.threads or torch.get_num_threads()
    chat = cfg.model.chat_template
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        services, store, refs = _services(cfg, Path(tmp), args.adapters)
        try:
            targets = [EvalTarget(f"{r.adapter_id}@v{r.version}", r.adapter_id, r.version, str(store.path_of(r)))
                       for r in refs]
            every = load_problems("humaneval")
            problems = every[:args.limit]

            canonical = every[:args.canonical] if args.canonical else every
            progress("bench.eval", "stage", f"1/4 {len(canonical)} canonical solutions in the sandbox")
            canon_s, canon = timed(run_programs, services.sandbox, [(q.id, q, canonical_program(q)) for q in canonical],
                                   10.0)
            progress("bench.eval", "stage", "2/4 warm-up: every adapter on one problem")
            _timed(services, targets, problems[:1], 8, chat)  # warm-up: every adapter loaded, both sides alike
            progress("bench.eval", "stage", f"3/4 {len(targets)} adapters x {len(problems)} problems in one batch")
            batched_s, batched, b_seen = _timed(services, targets, problems, args.max_new_tokens, chat)
            progress("bench.eval", "batched", f"{batched_s:.1f} s")
            progress("bench.eval", "stage", "4/4 one adapter at a time")
            one_s, one, o_seen = 0.0, [], {"tokens": 0, "jobs": 0, "score_s": 0.0, "cpu_s": 0.0}
            for t in targets:
                s, res, seen = _timed(services, [t], problems, args.max_new_tokens, chat)
                one_s += s
                one += res
                for k in o_seen:
                    o_seen[k] += seen[k]
            progress("bench.eval", "one by one", f"{one_s:.1f} s")
        finally:
            services.sandbox.close()
    work = len(targets) * len(problems)
    out = {
        "model": cfg.model.name, "adapters": len(targets), "problems": len(problems), "chat": chat,
        "max_new_tokens": args.max_new_tokens, "threads": cfg.generation.threads,
        "problems_per_s_batched": round(work / batched_s, 3),
        "problems_per_s_one_by_one": round(work / one_s, 3),
        "batch_gain": round(one_s / batched_s, 2),
        "batch_gain_cpu": round(o_seen["cpu_s"] / b_seen["cpu_s"], 2),
        "sandbox_jobs_per_s": round(len(canon) / canon_s, 1),
        "canonical_pass_rate": sum(o.passed for o in canon) / len(canon),
        "identical_scores": [r.to_json() for r in batched] == [r.to_json() for r in one],
        "seconds_batched": round(batched_s, 1), "seconds_one_by_one": round(one_s, 1),
        "cpu_seconds_batched": round(b_seen["cpu_s"], 1), "cpu_seconds_one_by_one": round(o_seen["cpu_s"], 1),
        "load_average_1m": load_average(),
        "tokens_batched": b_seen["tokens"], "tokens_one_by_one": o_seen["tokens"],
        "scoring_seconds_batched": round(b_seen["score_s"], 2), "scoring_jobs_batched": b_seen["jobs"],
        "mean_pass_at_1": round(sum(r.pass_at_1 for r in batched) / len(batched), 4),
    }
    emit(out, indent=None if args.json else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
