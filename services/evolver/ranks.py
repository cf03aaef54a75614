"""Children of another rank than a parent (spec §9, "Mixed ranks"): the child's rank, the parents' factors in the
child's units, and one module brought to another rank by growing (new components orthogonal to the update) or by
truncating its exact factored SVD.

A member of rank r stores ΔW = s·B·A with s = lora_alpha / r (PEFT; alpha / sqrt(r) with rsLoRA), so members of
different ranks scale B·A differently. The operators work on B·A in the child's units: each parent's B is
multiplied by s_parent / s_child first, and ΔW is then the same matrix whichever rank holds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from populora.config import MAX_RANK, EvolutionConfig
from populora.lora import lora_scaling
from services.evolver.components import compose
from services.evolver.factored import FactoredUpdate
from services.evolver.linalg import span_from_gram


def child_config(first: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """The child's adapter_config.json: the first parent's, with the child's rank (alpha kept: PEFT's habit, and
    "LoRA Without Regret"'s finding that with s = alpha / r the best learning rate hardly depends on r)."""
    config = dict(first)
    if int(config["r"]) != rank:
        config["r"] = rank
    return config


def rank_change_draw(rank: int, gen: torch.Generator) -> int:
    """R1's target rank when none is given: twice or half the parent's, each with probability 1/2 (only twice at
    rank 1, only half at the largest rank)."""
    up, down = min(2 * rank, MAX_RANK), rank // 2
    options = [r for r in (up, down) if 1 <= r != rank]
    return options[int(torch.randint(len(options), (1,), generator=gen))]


def child_rank(op_name: str, parent_ranks: list[int], params: Mapping[str, float],
               evolution: EvolutionConfig) -> int | None:
    """The child's rank as far as it is fixed before any random draw: a given `rank` parameter, the one parent's
    rank for M1-M4, the crossover rule for X1-X4; None for R1 without a `rank` (its draw picks one)."""
    if "rank" in params:
        return int(params["rank"])
    if op_name == "R1":
        return None
    if len(parent_ranks) == 1:
        return parent_ranks[0]
    return evolution.crossover_child_rank(parent_ranks)


def in_child_units(factors: FactoredUpdate, parent_config: Mapping[str, Any],
                   config: Mapping[str, Any]) -> FactoredUpdate:
    """A parent module's factors with B·A in the child's units: B times s_parent / s_child (the same object when
    the scalings agree, so a run of one rank computes exactly what it did before ranks could differ)."""
    ratio = lora_scaling(dict(parent_config)) / lora_scaling(dict(config))
    if ratio == 1.0:
        return factors
    work = torch.float64 if factors.lora_b.dtype == torch.float64 else torch.float32
    return FactoredUpdate(factors.lora_b.to(work) * ratio, factors.lora_a.to(work))


def row_norm(lora_a: torch.Tensor) -> float:
    """Root-mean-square row norm of A: the scale of a component that starts at zero (PEFT's A ~ sqrt(1/3))."""
    value = float(lora_a.to(torch.float32).pow(2).sum(dim=1).mean().sqrt()) if lora_a.numel() else 0.0
    return value if value > 0 else math.sqrt(1 / 3)


def truncated(p: FactoredUpdate, rank: int, gen: torch.Generator, parent: FactoredUpdate) -> FactoredUpdate:
    """p at `rank` through its exact factored SVD, in balanced factors: its top `rank` singular triplets when it
    has more (the best approximation, Eckart-Young: the change is the discarded tail), every one of them when it
    has fewer (exact; the extra components start at B = 0 with a trainable A direction, as PEFT initialises)."""
    sp = p.spectrum()
    comp = compose(sp, sp.s[:rank], rank, [(1.0, p)], gen, fallback_a_norm=row_norm(p.lora_a))
    return comp.result(parent=parent)


def grown(p: FactoredUpdate, rank: int, epsilon: float, gen: torch.Generator,
          noise: torch.Generator) -> FactoredUpdate:
    """p (rank r) at rank r' > r: its r components kept exactly (balanced), and r' - r new components of singular
    value ε·σ_min(ΔW) along directions orthogonal to ΔW's column and row spaces, so ΔW' = ΔW + ε·σ_min·Σ_j u_j v_jᵀ
    and |ΔW' - ΔW| / |ΔW| = ε·σ_min·sqrt(r' - r) / |ΔW| <= ε·sqrt((r' - r) / r) (spec §9, R1).

    Where a side has fewer than r' - r directions left (d < r'), the components without one start at B = 0 with a
    random A direction, as PEFT initialises. The directions are Gaussian draws on `noise`, projected off the span
    of B (of A) and orthonormalised through their Gram: O((d_in + d_out)·r·r') per module, never d_in x d_out.
    """
    r = p.lora_b.shape[1]
    kept = truncated(p, r, gen, p)
    kept_b, kept_a = kept.lora_b, kept.lora_a
    s = p.spectrum().s
    live = s[s > 1e-6 * s[0]] if s.numel() and float(s[0]) > 0 else s[:0]
    scale = epsilon * float(live.min()) if live.numel() else 0.0
    m = rank - r
    work = kept_b.dtype
    u = _orthogonal(p.lora_b, m, noise, tall=True)  # (d_out, m_u) orthonormal, off B's span
    v = _orthogonal(p.lora_a, m, noise, tall=False)  # (m_v, d_in) orthonormal rows, off A's row span
    n = min(u.shape[1], v.shape[0]) if scale > 0 else 0
    root = math.sqrt(scale)
    new_b = kept_b.new_zeros(kept_b.shape[0], m)
    new_a = torch.empty(m, kept_a.shape[1], dtype=work, device=kept_a.device)
    if n:
        new_b[:, :n] = u[:, :n].to(work) * root
        new_a[:n] = v[:n].to(work) * root
    dead = m - n  # no direction on one side, or nothing to scale by: B = 0, a unit A row scaled like the others
    if dead:
        rows = v[n:n + dead] if v.shape[0] >= n + dead else None
        if rows is None:
            rows = torch.randn(dead, kept_a.shape[1], generator=noise, dtype=torch.float32, device=noise.device)
            rows = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-30)
        new_a[n:] = rows.to(device=kept_a.device, dtype=work) * row_norm(kept_a)
    return FactoredUpdate(torch.cat([kept_b, new_b], dim=1), torch.cat([kept_a, new_a], dim=0))


def _orthogonal(x: torch.Tensor, m: int, gen: torch.Generator, tall: bool) -> torch.Tensor:
    """Up to m orthonormal directions orthogonal to the columns of a tall x (d x r; returned d x m') or to the rows
    of a wide x (r x d; returned m' x d), m' = min(m, d - rank(x)): Gaussian draws with x's span projected out
    (twice, for float32's sake), orthonormalised through their Gram."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    basis = x.to(work) if tall else x.to(work).T  # (d, r)
    d = basis.shape[0]
    g = torch.randn(d, m, generator=gen, dtype=torch.float32, device=gen.device).to(device=basis.device, dtype=work)
    span = span_from_gram((basis.T @ basis).double().cpu())
    q = basis @ span.to_q.to(device=basis.device, dtype=work)  # (d, rank(x)) orthonormal
    for _ in range(2):
        g = g - q @ (q.T @ g)
    own = span_from_gram((g.T @ g).double().cpu(), rtol=1e-10)
    out = g @ own.to_q.to(device=g.device, dtype=work)  # (d, m') orthonormal
    out = out[:, :max(0, min(m, d - q.shape[1]))]
    return out if tall else out.T
