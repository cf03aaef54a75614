"""bench.scale's TLS comparison: what mutual TLS costs a step's service work on two trainer and two inference
replicas. A plaintext group and a TLS group of each service are up at once (certificates from `populora certs`, the
bench presenting the coordinator's identity, the replicas named alike so placement splits the population alike)
and take turns, round by round, so the machine's load falls on both sides alike: first the update phase (every
adapter's UpdateBatch, from the same start), then the step's propose and solve batches. tls_step_ratio is the
plaintext seconds over the TLS seconds, summed over --tls-rounds rounds after one untimed each (target >= 0.95);
tls_same_result, the same weights and tokens either way."""

from __future__ import annotations

import time
from pathlib import Path

SIDES = ("plain", "tls")


def _trainers(args, workdir: Path, side: str):
    """A group of two trainer replicas with the population initialised from the same start on a store of its own."""
    from bench.scale_replicas import ROLES, Replicas, config, population, start_adapter
    from populora.pb import trainer_pb2
    from populora.rpc import ref_to_pb

    store = workdir / f"store-{side}"
    cfg = config(args, workdir, store, tls=side == "tls")
    cfg_path = workdir / f"trainer-{side}.yaml"
    cfg_path.write_text(cfg.to_yaml())
    start, vocab = start_adapter(cfg, store)
    group = Replicas("trainer", 2, cfg_path, workdir)
    client = group.connect(cfg)
    refs = {a: client.InitAdapter(trainer_pb2.InitAdapterRequest(
        adapter_id=a, role=ROLES[i % 2], seed=i, init_from=ref_to_pb(start))).adapter
        for i, a in enumerate(population(args.adapters))}
    return {"group": group, "client": client, "refs": refs, "store": store, "vocab": vocab}


def _update(side: dict, rows: list, k: int) -> float:
    """One update phase (every adapter, seed k); its seconds."""
    from bench.scale_replicas import ROLES, as_role
    from populora.pb import trainer_pb2

    refs = side["refs"]
    req = trainer_pb2.UpdateBatchRequest(updates=[trainer_pb2.UpdateRequest(
        adapter=refs[a], rollouts=[as_role(x, ROLES[i % 2]) for x in rows[i]], seed=k, step=k + 1)
        for i, a in enumerate(refs)])
    t0 = time.perf_counter()
    resp = side["client"].UpdateBatch(req)
    seconds = time.perf_counter() - t0
    refs.update({r.adapter.adapter_id: r.adapter for r in resp.results})
    return seconds


def _weights(side: dict) -> dict:
    from populora.store import ArtifactStore

    st = ArtifactStore(side["store"])
    return {a: st.read(st.ref(a, ref.version)).weights for a, ref in side["refs"].items()}


def _inference(args, workdir: Path, side: str, store: Path):
    from bench.scale_replicas import Replicas, config

    cfg = config(args, workdir, store, tls=side == "tls")
    cfg_path = workdir / f"inference-{side}.yaml"
    cfg_path.write_text(cfg.to_yaml())
    group = Replicas("inference", 2, cfg_path, workdir)
    return group, group.connect(cfg)


def _generate(client, batches: list[list]) -> tuple[float, dict]:
    from populora.pb import inference_pb2

    t0 = time.perf_counter()
    results = [r for b in batches for r in client.Generate(inference_pb2.GenerateRequest(requests=b))]
    return time.perf_counter() - t0, {r.request_id: [list(c.token_ids) for c in r.completions] for r in results}


def _turns(k: int) -> tuple[str, ...]:
    """Which side goes first in round k: plain, tls, then tls, plain, ... (each side first as often)."""
    return SIDES if k % 2 == 0 else SIDES[::-1]


def tls_step(args, workdir: Path, batches: list[list] | None, report, store_name: str = "store-t1") -> None:
    """Measure and report the TLS comparison (module docstring); `batches` are the step's propose and solve
    requests for the adapters in workdir/store_name (None: made for the adapters the plaintext update left)."""
    from bench.harness import progress
    from bench.scale_replicas import phase_requests, same_weights, short
    from bench.trainer_memory import rollouts
    from populora import certs

    certs.write_certs(workdir / "certs", ["trainer", "inference", "coordinator"], days=1)
    rounds = max(1, args.tls_rounds)
    update_s, generate_s = dict.fromkeys(SIDES, 0.0), dict.fromkeys(SIDES, 0.0)
    trainers = {}
    try:
        for side in SIDES:
            trainers[side] = _trainers(args, workdir, side)
        rows = rollouts(args.adapters, args.rollouts, args.tokens, trainers["plain"]["vocab"])
        for k in range(rounds + 1):
            for side in _turns(k):
                seconds = _update(trainers[side], rows, k)
                if k > 0:  # the first round is the warm-up
                    update_s[side] += seconds
            progress("bench.scale", f"tls update round {k}", {s: round(v, 2) for s, v in update_s.items()})
        same = same_weights(_weights(trainers["plain"]), _weights(trainers["tls"]))
    finally:
        for side in trainers.values():
            side["client"].close()
            side["group"].stop()
    if batches is None:
        store_name = "store-plain"
        batches = phase_requests(args, workdir, store_name)
    groups, tokens = {}, {}
    try:
        for side in SIDES:
            groups[side] = _inference(args, workdir, side, workdir / store_name)
        for side in SIDES:  # every replica loads its adapters before the timed rounds
            _generate(groups[side][1], [short(b, 4) for b in batches])
        for k in range(rounds):
            for side in _turns(k):
                seconds, tokens[side] = _generate(groups[side][1], batches)
                generate_s[side] += seconds
            progress("bench.scale", f"tls generation round {k}", {s: round(v, 2) for s, v in generate_s.items()})
    finally:
        for group, client in groups.values():
            client.close()
            group.stop()
    plain, secure = update_s["plain"] + generate_s["plain"], update_s["tls"] + generate_s["tls"]
    report("tls_rounds", rounds)
    report("update_s_plain_2", update_s["plain"] / rounds)
    report("update_s_tls_2", update_s["tls"] / rounds)
    report("generate_s_plain_2", generate_s["plain"] / rounds)
    report("generate_s_tls_2", generate_s["tls"] / rounds)
    report("step_s_plain_2", plain / rounds)
    report("step_s_tls_2", secure / rounds)
    report("tls_step_ratio", plain / secure)
    report("tls_same_result", same and tokens["plain"] == tokens["tls"])
