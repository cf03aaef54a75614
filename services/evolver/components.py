"""A child module built from weighted sources: its components as r x r maps over the sources' factors (spec §9).

The operators describe a child as maps acting on the stacked factors of their sources (`Components`), made from a
spectrum (`compose`) or put side by side (`concat`); the child's factors are one tall product per side and source,
and its Grams against its parent follow from the maps without a pass over the child.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from services.evolver.factored import FactoredUpdate, joint_grams
from services.evolver.linalg import Spectrum

Part = tuple[float, "FactoredUpdate"]  # (weight w_i, factors of one source): contributes w_i·B_i·A_i


def stacked_grams(parts: list[Part]) -> tuple[torch.Tensor, torch.Tensor]:
    """Grams of the stacked factors [w_1 B_1, w_2 B_2, ...] and [A_1; A_2; ...]ᵀ, i.e. of Σ w_i B_i A_i (§9, X1/X4).

    Assembled block by block from the sources' Grams with each other (`joint_grams`: one pass for the blocks not
    known yet, no stacked copy is made).
    """
    joint_grams([p for _, p in parts])
    rows_b = [torch.cat([wi * wj * pi.cross(pj)[0] for wj, pj in parts], dim=1) for wi, pi in parts]
    rows_a = [torch.cat([pi.cross(pj)[1] for _, pj in parts], dim=1) for _, pi in parts]
    return torch.cat(rows_b, dim=0), torch.cat(rows_a, dim=0)


@dataclass
class Components:
    """A child module as r components in the span of weighted sources (PEFT layout, float64).

    lora_b' = Σ_i w_i·B_i @ b_map[rows of i] (d_out x r) and lora_a' = Σ_i a_map[rows of i]ᵀ @ A_i (r x d_in): the
    maps act on the stacked sources without stacking them. `extra_a_rows` (p x d_in) are appended directions when
    the sources span fewer than r. `s`: the child's singular values when its maps come from one spectrum
    (`compose`): B'= U·sqrt(S') and A'ᵀ = V·sqrt(S') with orthonormal U, V, so ΔW' = U·diag(S')·Vᵀ has exactly S'.
    """

    parts: list[Part]
    b_map: torch.Tensor  # (k, c), k = Σ r_i
    a_map: torch.Tensor  # (k, c)
    extra_a_rows: torch.Tensor | None = None
    s: torch.Tensor | None = None  # (c,) float64

    def select(self, lo: int, hi: int) -> Components:
        """Components lo..hi-1 only (maps sliced before the tall products)."""
        n = self.b_map.shape[1]
        extra = None
        if self.extra_a_rows is not None:
            extra = self.extra_a_rows[max(lo - n, 0):max(hi - n, 0)]
        return Components(self.parts, self.b_map[:, lo:min(hi, n)], self.a_map[:, lo:min(hi, n)], extra)

    def result(self, parent: FactoredUpdate) -> FactoredUpdate:
        """The child's factors, with its Grams against `parent` precomputed from the maps (`grams_against`)."""
        child = FactoredUpdate(*self.factors())
        grams = self.grams_against(parent)
        if grams is not None:
            child._cache["against"] = (parent, *grams, self.s)
        return child

    def grams_against(self, parent: FactoredUpdate) -> tuple[torch.Tensor, ...] | None:
        """(B'ᵀB', B'ᵀB_p, A'A'ᵀ, A'A_pᵀ) of the child from its maps, for `compare`.

        With B' = Σ_i w_i·B_i·Mb_i and A' = Σ_i Ma_iᵀ·A_i: B'ᵀB' = Mbᵀ·G·Mb with G the block Gram [w_i·w_j·B_iᵀB_j],
        B'ᵀB_p = Mbᵀ·[w_i·B_iᵀB_p], and likewise for A without the weights: r x r work on the sources' Grams with
        each other and with the parent (one joint pass, shared with the spectrum) instead of a pass over the child.
        They describe the child before rounding to its storage dtype, within ~1e-7 for float32 (the caller discards
        them when the cast changes the tensors). None when random rows were appended (`extra_a_rows`).
        """
        if self.extra_a_rows is not None and self.extra_a_rows.shape[0]:
            return None
        joint_grams([p for _, p in self.parts] + [parent])
        gb, ga = stacked_grams(self.parts)
        gb_p = torch.cat([w * p.cross(parent)[0] for w, p in self.parts], dim=0)  # (k, r_p)
        ga_p = torch.cat([p.cross(parent)[1] for _, p in self.parts], dim=0)
        mb, ma = self.b_map, self.a_map
        return mb.T @ gb @ mb, mb.T @ gb_p, ma.T @ ga @ ma, ma.T @ ga_p

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(lora_b', lora_a'): one tall product per side and source.

        The r x r maps come from float64 Grams; the tall products run in float32 (float64 for float64 sources):
        their rounding, ~1e-7 relative, is that of storing the child in float32 anyway, and they are the bulk of the
        flops.
        """
        work = torch.float64 if any(p.lora_b.dtype == torch.float64 for _, p in self.parts) else torch.float32
        device = self.parts[0][1].lora_b.device  # the maps are CPU float64; the tall products run where the factors are
        b = a = None
        offset = 0
        for weight, part in self.parts:
            k = part.lora_b.shape[1]
            pb = part.lora_b.to(work) @ (weight * self.b_map[offset:offset + k]).to(device=device, dtype=work)
            pa = self.a_map[offset:offset + k].T.to(device=device, dtype=work) @ part.lora_a.to(work)
            b, a = (pb, pa) if b is None else (b.add_(pb), a.add_(pa))
            offset += k
        if self.extra_a_rows is not None and self.extra_a_rows.shape[0]:
            a = torch.cat([a, self.extra_a_rows.to(device=device, dtype=work)])
            b = torch.cat([b, b.new_zeros(b.shape[0], self.extra_a_rows.shape[0])], dim=1)
        return b, a


def concat(pieces: list[Components], parent: FactoredUpdate) -> FactoredUpdate:
    """Pieces side by side (X3): B' = [B'_1 | B'_2 ...], A' = [A'_1; A'_2 ...], each piece's own tall products;
    the Grams against `parent` follow from the block-diagonal maps over all the pieces' sources."""
    factors = [piece.factors() for piece in pieces]
    child = FactoredUpdate(torch.cat([b for b, _ in factors], dim=1), torch.cat([a for _, a in factors], dim=0))
    if all(p.extra_a_rows is None or not p.extra_a_rows.shape[0] for p in pieces):
        whole = Components([part for p in pieces for part in p.parts], torch.block_diag(*[p.b_map for p in pieces]),
                           torch.block_diag(*[p.a_map for p in pieces]))
        child._cache["against"] = (parent, *whole.grams_against(parent), None)
    return child


def compose(sp: Spectrum, s_new: torch.Tensor, rank: int, parts: list[Part], gen: torch.Generator,
            rot_u: torch.Tensor | None = None, rot_v: torch.Tensor | None = None,
            fallback_a_norm: float | None = None) -> Components:
    """Refactor a spectrum into rank-r factors: B' = (Qb·Uc·R_u)·sqrt(S'), A' = (Qa·Vc·R_v)·sqrt(S') (§9).

    `sp` is the spectrum of Σ w_i B_i A_i over `parts`; `s_new` gives the first len(s_new) <= rank singular values
    (the rest are 0). A component with singular value 0 keeps B' = 0, so ΔW' is exactly Σ s'_j u_j v_jᵀ, but its
    A' row is a unit direction of the sources' A span (or a fresh random one when that span is too small) scaled
    like the live rows: as with PEFT's own initialisation (A random, B zero) the component contributes nothing yet
    receives gradient, so the child keeps r trainable directions instead of dead ones.
    """
    n = s_new.numel()
    if n > rank:
        raise ValueError(f"spectrum of {n} components does not fit rank {rank}")
    s_full = torch.zeros(rank, dtype=torch.float64)
    s_full[:n] = s_new.clamp_min(0)
    u = _take_columns(sp.u_map, rank)  # (k, rank), zero columns beyond the span
    v = _take_columns(sp.v_map, rank)
    # A rotation acts on the first m columns: the basis of the factor's span (m = r unless rank-deficient).
    if rot_u is not None:
        m = rot_u.shape[0]
        u[:, :m] = u[:, :m] @ rot_u
    if rot_v is not None:
        m = rot_v.shape[0]
        v[:, :m] = v[:, :m] @ rot_v
    root = s_full.sqrt()
    b_map = u * root
    a_map = v * root
    live = s_full > 0
    if bool(live.any()):
        dead_norm = float(root[live].mean())
    else:
        dead_norm = fallback_a_norm if fallback_a_norm is not None else _rms_row_norm(parts[0][1].lora_a)
    dead = ~live
    a_map[:, dead] = v[:, dead] * dead_norm
    n_basis = min(sp.v_map.shape[1], rank)
    extra = None
    missing = rank - n_basis
    if missing > 0:
        # Rows n_basis.. of a_map are zero (no direction left in A's span): replace them with random directions.
        a_map = a_map[:, :n_basis]
        b_map = b_map[:, :n_basis]
        d_in = parts[0][1].lora_a.shape[1]
        extra = torch.randn(missing, d_in, generator=gen, dtype=torch.float64)
        extra = extra / extra.norm(dim=1, keepdim=True).clamp_min(1e-30) * dead_norm
    return Components(parts=parts, b_map=b_map, a_map=a_map, extra_a_rows=extra, s=s_full)


def _take_columns(m: torch.Tensor, n: int) -> torch.Tensor:
    if m.shape[1] >= n:
        return m[:, :n].clone()
    return torch.cat([m, m.new_zeros(m.shape[0], n - m.shape[1])], dim=1)


def _rms_row_norm(lora_a: torch.Tensor) -> float:
    """Root-mean-square row norm of a factor; PEFT's kaiming-uniform init has row norm about sqrt(1/3)."""
    if lora_a.numel() == 0:
        return math.sqrt(1 / 3)
    value = float(lora_a.to(torch.float64).pow(2).sum(dim=1).mean().sqrt())
    return value if value > 0 else math.sqrt(1 / 3)
