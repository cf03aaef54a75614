"""Every operator across ranks (spec 9, "Mixed ranks"): the relative change |ΔW' - ΔW_1| / |ΔW_1| of its children at
the rank pairs (8, 32) and (32, 8), on two kinds of parents. Prints one JSON object.

    python -m bench.evolver_ranks --json [--source DIR] [--seeds 3]

`siblings`: a rank-8 and a rank-32 member descended from one adapter (`--source`, a PEFT directory such as a warm
start's; default a synthetic SmolLM2-shaped update whose spectrum decays as exp(-j/4)), each R1's move of it to its
rank (none at its own) and then an M1 child at ε, as two members of a run share their warm start and then differ.
`random`: two independent random adapters (flat spectra), the worst case of a truncation. A mutation works on the
first parent (R1 moves it to the second rank); a crossover takes both, its child at the first parent's rank. X1 is
measured at its default p and at the p where DARE's noise, sqrt(p/(1-p)), is ε (`X1@eps`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.harness import emit, load_average, progress

SMOL_LAYER = [("self_attn.q_proj", 576, 576), ("self_attn.k_proj", 576, 192), ("self_attn.v_proj", 576, 192),
              ("self_attn.o_proj", 576, 576), ("mlp.gate_proj", 576, 1536), ("mlp.up_proj", 576, 1536),
              ("mlp.down_proj", 1536, 576)]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PAIRS = ((8, 32), (32, 8))


def _synthetic(store, adapter_id: str, rank: int, seed: int, decay: float | None, layers: int = 4):
    """A rank-`rank` adapter of SmolLM2's shapes with alpha 64: orthonormal bases and σ_j = exp(-j·decay), or
    Gaussian factors (a flat spectrum) when decay is None."""
    import torch

    from populora.lora import lora_keys, lora_scaling
    from populora.store import lora_config_dict

    g = torch.Generator().manual_seed(seed)
    config = lora_config_dict(rank, 64.0, TARGETS)
    scale = lora_scaling(config)
    weights = {}
    for i in range(layers):
        for suffix, d_in, d_out in SMOL_LAYER:
            key_a, key_b = lora_keys(f"model.layers.{i}.{suffix}")
            if decay is None:
                weights[key_a] = torch.randn(rank, d_in, generator=g) / d_in ** 0.5
                weights[key_b] = torch.randn(d_out, rank, generator=g) / d_out ** 0.5
                continue
            u = torch.linalg.qr(torch.randn(d_out, rank, generator=g, dtype=torch.float64))[0]
            v = torch.linalg.qr(torch.randn(d_in, rank, generator=g, dtype=torch.float64))[0]
            root = (torch.exp(-decay * torch.arange(rank, dtype=torch.float64)) / scale).sqrt()
            weights[key_b], weights[key_a] = (u * root).float(), (v * root).T.float()
    return store.save(adapter_id, weights, config)


def _breed(store, refs, operator: str, params: dict, seed: int, evolution):
    from services.evolver.adapters import open_parent
    from services.evolver.breed import breed

    parents = [open_parent(store.path_of(r), r.key) for r in refs]
    try:
        return breed(parents, operator, params, seed, evolution)
    finally:
        for p in parents:
            p.close()


def _sibling(store, ref, adapter_id: str, rank: int, seed: int, evolution):
    """A member descended from `ref` at `rank`: R1 to that rank (none when it has it), then an M1 child at ε, so two
    siblings differ by their own mutations as two members of a run do, besides the truncation."""
    if store.read(ref).rank != rank:
        child = _breed(store, [ref], "R1", {"rank": float(rank)}, seed, evolution)
        ref = store.save(f"{adapter_id}r", child.weights, child.config, meta=child.meta([ref.key]))
    child = _breed(store, [ref], "M1", {}, seed, evolution)
    return store.save(adapter_id, child.weights, child.config, meta=child.meta([ref.key]))


def changes(store, parents: dict[int, object], seeds: int, evolution) -> dict[str, dict[str, float]]:
    """Per rank pair and operator: the mean and the largest relative change over `seeds` children."""
    from services.evolver.operators import OPERATORS

    eps = evolution.epsilon
    out: dict[str, dict[str, float]] = {}
    for first, second in PAIRS:
        progress("bench.evolver_ranks", "rank pair", f"{first} -> {second}, {seeds} seeds of every operator")
        row = {}
        for name in [*sorted(OPERATORS), "X1@eps"]:
            op = OPERATORS[name.split("@")[0]]
            refs = [parents[first], parents[second]][:op.n_parents]
            params = {"rank": float(second)} if name == "R1" else {}
            if name == "X1@eps":
                params["p"] = eps ** 2 / (1 + eps ** 2)
            values = [_breed(store, refs, op.name, params, seed, evolution).relative_change for seed in range(seeds)]
            row[name] = {"mean": round(statistics.fmean(values), 4), "max": round(max(values), 4)}
        out[f"{first}->{second}"] = row
    return out


def run(args: argparse.Namespace) -> dict:
    from populora.config import EvolutionConfig
    from populora.store import ArtifactStore

    evolution = EvolutionConfig()
    load_start = load_average()
    result: dict = {"epsilon": evolution.epsilon, "seeds": args.seeds}
    with tempfile.TemporaryDirectory(prefix="bench-evolver-ranks-") as tmp:
        store = ArtifactStore(tmp)
        if args.source:
            from safetensors.torch import load_file

            from populora.store import ADAPTER_CONFIG, ADAPTER_WEIGHTS

            config = json.loads((Path(args.source) / ADAPTER_CONFIG).read_text())
            src = store.save("source", load_file(str(Path(args.source) / ADAPTER_WEIGHTS)), config)
            result["source"] = f"{args.source} (rank {config['r']})"
        else:
            src = _synthetic(store, "source", 32, 0, decay=0.25)
            result["source"] = "synthetic SmolLM2 shapes, 4 layers, rank 32, sigma_j = exp(-j/4)"
        siblings = {r: _sibling(store, src, f"sib{r}", r, r, evolution) for r in (8, 32)}
        progress("bench.evolver_ranks", "parents", "siblings of one adapter")
        result["siblings"] = changes(store, siblings, args.seeds, evolution)
        flat = {r: _synthetic(store, f"rand{r}", r, r, decay=None) for r in (8, 32)}
        progress("bench.evolver_ranks", "parents", "two random adapters")
        result["random"] = changes(store, flat, args.seeds, evolution)
    result["load_average_1min"] = [load_start, load_average()]
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    p.add_argument("--source", default="", help="a PEFT adapter directory the siblings descend from")
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    emit(run(args), indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
