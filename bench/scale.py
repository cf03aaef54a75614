"""Scale-out: one and two trainer and inference replicas, each pinned to its own core, as the coordinator reaches
them (coordinator.clients.replicas: every adapter placed on one replica, batches split by owner and sent concurrently).

    python -m bench.scale --json [--model smollm2-135m] [--adapters 8] [--rank 32] [--rollouts 2] [--tokens 128]
                                 [--new-tokens 0]

Each replica is a `populora serve trainer|inference` process on loopback, pinned with os.sched_setaffinity to core i
(one torch thread), so one replica computes on one core and two on two. The population of `--adapters` starts from
one nonzero LoRA (as the warm start gives: every update and every generation does its full work), on one store.

- updates_per_s_1, updates_per_s_2: adapter updates per second of an update phase (one UpdateBatch of every adapter,
  `--rollouts` rollouts of `--tokens` random tokens each; the best of `--repeats` after one untimed);
  trainer_scale_efficiency = updates_per_s_2 / (2 x updates_per_s_1).
- tokens_per_s_1, tokens_per_s_2: generated tokens per second of one step's propose and solve batches at cpu-smol
  shapes, built by the phases' own code (phase_requests: the teachers' prompts with the buffer's references, their
  token limit, a seeded share of valid proposals solved by students matched with uneven weights, the preset's
  sampling with end-of-sequence, seeded per request); generation_rows and generation_rows_per_adapter say what
  they held. inference_scale_efficiency likewise. generate_s_1 / _2 are those batches' wall times; prompt_pass_s_1 /
  _2 the same batches with one new token each (their prompt pass; prompt_tokens_per_s_*), so
  prompt_pass_scale_efficiency and decode_scale_efficiency (the rest of the wall time) say which part scales.
- same_result: the same tokens from 1 and 2 inference replicas, and the same adapter weights (within 1e-5) after the
  same updates on 1 and 2 trainer replicas.
- rss_mb_per_replica_1 / _2: each replica's resident set after its updates (the trainers; inference beside it as
  inference_rss_mb_per_replica_*): a replica holds the base once and only its own adapters, which
  adapters_per_replica_1 / _2 count (each trainer's share of the population).
- tls_step_ratio: a step's service work on two replicas of each (the update phase, then the propose and solve
  batches) in plaintext over the same over mutual TLS, both sides up at once and alternating (bench/scale_tls.py;
  target >= 0.95); tls_same_result: the same tokens and weights either way. `--tls-only` measures only this.
- moved_on_rescale: the fraction of the population's adapters whose owner changes from 2 to 3 replicas
  (moved_on_rescale_1000: the same over 1,000 ids, the expected 1/3 without the noise of a small population).

Every figure is printed as it is measured (stderr), then the whole object on stdout.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.harness import (
    Reporter,
    cores,
    emit,
    load_average,
    progress,
    update_workload_parser,
)
from bench.scale_replicas import (
    ROLES,
    Replicas,
    as_role,
    config,
    phase_requests,
    population,
    same_weights,
    short,
    start_adapter,
)
from bench.scale_tls import tls_step


def moved_fraction(ids: list[str], before: int, after: int) -> float:
    """The fraction of `ids` whose owner changes when `before` loopback replicas become `after`."""
    from populora.placement import moves

    names = [f"127.0.0.1:{50100 + i}" for i in range(max(before, after))]
    return len(moves(ids, names[:before], names[:after])) / len(ids)


def efficiency(one: float, two: float) -> float:
    """two / (2 x one): 1.0 when two replicas do twice the work of one."""
    return two / (2 * one) if one > 0 else float("nan")


def trainers(args, n: int, workdir: Path, report: Reporter) -> dict:
    """Init the population on `n` trainer replicas, then timed update phases; updates/s, RSS, final weights."""
    from bench.trainer_memory import rollouts
    from populora.pb import trainer_pb2
    from populora.placement import owner
    from populora.rpc import ref_to_pb
    from populora.store import ArtifactStore

    store = workdir / f"store-t{n}"
    cfg = config(args, workdir, store)
    cfg_path = workdir / f"trainer-{n}.yaml"
    cfg_path.write_text(cfg.to_yaml())
    start, vocab = start_adapter(cfg, store)
    group = Replicas("trainer", n, cfg_path, workdir)
    try:
        trainer = group.connect(cfg)
        ids = population(args.adapters)
        refs = {}
        for i, a in enumerate(ids):
            refs[a] = trainer.InitAdapter(trainer_pb2.InitAdapterRequest(
                adapter_id=a, role=ROLES[i % 2], seed=i, init_from=ref_to_pb(start))).adapter
        rows = rollouts(len(ids), args.rollouts, args.tokens, vocab)
        best = float("inf")
        for k in range(args.repeats + 1):
            req = trainer_pb2.UpdateBatchRequest(updates=[trainer_pb2.UpdateRequest(
                adapter=refs[a], rollouts=[as_role(x, ROLES[i % 2]) for x in rows[i]], seed=k, step=k + 1)
                for i, a in enumerate(ids)])
            t0 = time.perf_counter()
            resp = trainer.UpdateBatch(req)
            seconds = time.perf_counter() - t0
            refs.update({r.adapter.adapter_id: r.adapter for r in resp.results})
            if k > 0:  # the first is the warm-up
                best = min(best, seconds)
        report(f"updates_per_s_{n}", len(ids) / best)
        report(f"rss_mb_per_replica_{n}", group.rss_mb())
        names = trainer.replicas.live()
        report(f"adapters_per_replica_{n}", [sum(owner(a, names) == r for a in ids) for r in names])
        st = ArtifactStore(store)
        weights = {a: st.read(st.ref(a, refs[a].version)).weights for a in ids}
        trainer.close()
        return {"updates_per_s": len(ids) / best, "weights": weights}
    finally:
        group.stop()


def inference(args, n: int, workdir: Path, batches: list[list], report: Reporter,
              store_name: str = "store-t1") -> dict:
    """The step's propose then solve batch on `n` inference replicas (after one untimed round of 4 tokens a row, so
    every replica has loaded its adapters); tokens/s of both phases together, RSS, the tokens."""
    from populora.pb import inference_pb2

    store = workdir / store_name
    cfg = config(args, workdir, store)
    cfg_path = workdir / f"inference-{n}.yaml"
    cfg_path.write_text(cfg.to_yaml())
    group = Replicas("inference", n, cfg_path, workdir)
    try:
        infer = group.connect(cfg)
        for batch in batches:
            list(infer.Generate(inference_pb2.GenerateRequest(requests=short(batch, 4))))
        def best_of(rounds: list[list]) -> tuple[float, list]:
            best, results = float("inf"), []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                results = [r for b in rounds for r in infer.Generate(inference_pb2.GenerateRequest(requests=b))]
                best = min(best, time.perf_counter() - t0)
            return best, results

        seconds, results = best_of(batches)
        tokens = {r.request_id: [list(c.token_ids) for c in r.completions] for r in results}
        total = sum(len(t) for ts in tokens.values() for t in ts)
        report(f"generate_s_{n}", seconds)
        report(f"tokens_per_s_{n}", total / seconds)
        prompt_s, results = best_of([short(b, 1) for b in batches])  # the prompt pass and one sampled token
        report(f"prompt_pass_s_{n}", prompt_s)
        report(f"prompt_tokens_per_s_{n}", sum(len(r.prompt_token_ids) for r in results) / prompt_s)
        report(f"inference_rss_mb_per_replica_{n}", group.rss_mb())
        infer.close()
        return {"tokens_per_s": total / seconds, "tokens": tokens, "seconds": seconds, "prompt_s": prompt_s}
    finally:
        group.stop()


def main(argv: list[str] | None = None) -> int:
    p = update_workload_parser(__doc__, "print the JSON object on one line",
                               rollouts_help="rollouts per adapter per update", tokens_help="tokens per rollout")
    p.add_argument("--repeats", type=int, default=2, help="timed rounds after one untimed (the best counts)")
    p.add_argument("--jsonl", default=None, help="also append each figure to this file as it is measured")
    p.add_argument("--tls-rounds", type=int, default=2, help="rounds of each side of the TLS comparison")
    p.add_argument("--tls-only", action="store_true", help="only the TLS comparison (tls_step_ratio)")
    p.add_argument("--new-tokens", type=int, default=0, help="cap both token budgets at N (0 = cpu-smol's)")
    args = p.parse_args(argv)
    report = Reporter(args.jsonl)
    report("cores", cores())
    report("load_average_1m_at_start", load_average())
    ids = population(args.adapters)
    report("moved_on_rescale", moved_fraction(ids, 2, 3))
    report("moved_on_rescale_1000", moved_fraction([f"run.{'TS'[i % 2]}{i}" for i in range(1000)], 2, 3))
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = Path(tmp)
        if args.tls_only:
            tls_step(args, workdir, None, report)
            emit({"model": args.model, "adapters": args.adapters, "rank": args.rank, **report.out,
                  "load_average_1m_at_end": load_average()}, indent=None if args.json else 2)
            return 0
        t = {n: trainers(args, n, workdir, report) for n in (1, 2)}
        progress("bench.scale", "trainers", "done")
        report("trainer_scale_efficiency", efficiency(t[1]["updates_per_s"], t[2]["updates_per_s"]))
        batches = phase_requests(args, workdir)
        report("generation_rows", [sum(max(1, r.sampling.n) for r in b) for b in batches])
        report("generation_rows_per_adapter", {a: sum(max(1, r.sampling.n) for b in batches for r in b
                                                      if r.adapter.adapter_id == a) for a in ids})
        g = {n: inference(args, n, workdir, batches, report) for n in (1, 2)}
        report("inference_scale_efficiency", efficiency(g[1]["tokens_per_s"], g[2]["tokens_per_s"]))
        # the same split into the batches' prompt pass and the decoding after it (each: the same work on 1 and 2)
        report("prompt_pass_scale_efficiency", efficiency(1 / g[1]["prompt_s"], 1 / g[2]["prompt_s"]))
        report("decode_scale_efficiency", efficiency(1 / (g[1]["seconds"] - g[1]["prompt_s"]),
                                                     1 / (g[2]["seconds"] - g[2]["prompt_s"])))
        report("same_tokens", g[1]["tokens"] == g[2]["tokens"])
        report("same_weights", same_weights(t[1]["weights"], t[2]["weights"]))
        report("same_result", report.out["same_tokens"] and report.out["same_weights"])
        tls_step(args, workdir, batches, report)
    report("load_average_1m_at_end", load_average())
    emit({"model": args.model, "adapters": args.adapters, "rank": args.rank, **report.out},
         indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
