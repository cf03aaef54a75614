"""Rank-r LoRA algebra in factored form: exact SVD of B·Aᵀ, refactoring a spectrum, Cayley rotations, norms.

Layout (PEFT): `lora_a` is r x d_in, `lora_b` is d_out x r, and a module's update is ΔW = scaling · lora_b @ lora_a.
Spec §9 writes A = lora_aᵀ (d_in x r), so ΔW ∝ B·Aᵀ; the functions here take PEFT's layout and never form ΔW.

Every function works on the r x r Gram matrices of the factors plus one tall product per side, so one module
costs O((d_in + d_out)·r²) flops, against O(d_in·d_out·min(d_in, d_out)) for a dense SVD of ΔW. The Grams are
float64 (they decide the spectrum and the change statistics) and are made in one pass over the factors for every
pair that needs them (`joint_grams`); the r x r algebra runs on the CPU whatever device holds the factors.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

# Eigenvalues of a factor's Gram below this fraction of the largest are its null space: singular values of the
# factor below sqrt(1e-14) = 1e-7 of its largest are treated as zero (float64 Grams resolve ~1e-8).
GRAM_RTOL = 1e-14
# A singular value of ΔW below this fraction of the largest does not count towards the effective rank.
EFFECTIVE_RANK_RTOL = 1e-6


@contextmanager
def small_linalg() -> Iterator[None]:
    """Run r x r decompositions on one thread: at this size a second thread only adds synchronisation, which on a
    busy machine costs 100x (eigh of 64 x 64: ~1 ms on one thread, ~150 ms on two measured under load)."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class Span:
    """An orthonormal basis of the column space of a tall d x k matrix X, kept implicit: Q = X @ to_q.

    X = Q @ r with Q (d x m) orthonormal, r (m x k), m = rank(X). This is the thin QR of §9 up to an m x m
    rotation (r need not be triangular), which changes nothing downstream since only Q·r and Qᵀ·Q = I are used.
    """

    to_q: torch.Tensor  # (k, m) float64
    r: torch.Tensor  # (m, k) float64


@dataclass
class Spectrum:
    """The SVD of ΔW = B·Aᵀ (B d_out x k, A d_in x k) in factored form, spec §9.

    U = B @ u_map (d_out x mb) and V = A @ v_map (d_in x ma) are orthonormal; ΔW = U[:, :n]·diag(s)·V[:, :n]ᵀ with
    n = len(s). Columns of V beyond n span the rest of A's column space (directions with singular value 0).
    """

    s: torch.Tensor  # (n,) float64, descending
    u_map: torch.Tensor  # (k, mb) float64
    v_map: torch.Tensor  # (k, ma) float64


def gram_blocks(mats: Sequence[torch.Tensor], pairs: Sequence[tuple[int, int]],
                tall: bool = True) -> dict[tuple[int, int], torch.Tensor]:
    """X_iᵀ·X_j for tall (d x k_i) or X_i·X_jᵀ for wide (k_i x d) matrices of one d, in float64, for every
    requested pair (i, j); the results are on the CPU.

    The matrices the pairs use are copied side by side into one float64 workspace and multiplied by its transpose
    in one product: one conversion per factor and one large GEMM run several times faster than a float64 copy
    per factor and a product per pair (7B factors: 18944 x 32), at the price of the few blocks nobody asked for.
    """
    used = sorted({i for pair in pairs for i in pair})
    width = {i: mats[i].shape[1 if tall else 0] for i in used}
    offset, total = {}, 0
    for i in used:
        offset[i], total = total, total + width[i]
    d = mats[used[0]].shape[0 if tall else 1]
    shape = (d, total) if tall else (total, d)
    work = torch.empty(shape, dtype=torch.float64, device=mats[used[0]].device)
    for i in used:
        part = work[:, offset[i]:offset[i] + width[i]] if tall else work[offset[i]:offset[i] + width[i]]
        part.copy_(mats[i])
    full = (work.T @ work if tall else work @ work.T).cpu()  # (total, total)
    return {(i, j): full[offset[i]:offset[i] + width[i], offset[j]:offset[j] + width[j]] for i, j in pairs}


def gram(x: torch.Tensor) -> torch.Tensor:
    """Xᵀ·X in float64 for a tall X (d x k)."""
    return gram_blocks([x], [(0, 0)])[(0, 0)]


def span_from_gram(g: torch.Tensor, rtol: float = GRAM_RTOL) -> Span:
    """Orthonormal basis of X's columns from G = XᵀX = W·Λ·Wᵀ: Q = X·W_m·Λ_m^(-1/2), r = Λ_m^(1/2)·W_mᵀ.

    Rank-revealing: eigenvalues below rtol·λ_max are dropped, so a factor with zero columns (M3, a fresh
    zero-initialised B) gets a smaller basis instead of a division by zero.
    """
    with small_linalg():
        lam, w = torch.linalg.eigh(g)  # ascending
    top = float(lam[-1]) if lam.numel() else 0.0
    keep = lam > max(top, 0.0) * rtol if top > 0 else torch.zeros_like(lam, dtype=torch.bool)
    lam, w = lam[keep].flip(0), w[:, keep].flip(1)
    root = lam.sqrt()
    return Span(to_q=w / root, r=root[:, None] * w.T)


def spectrum_from_grams(gb: torch.Tensor, ga: torch.Tensor) -> Spectrum:
    """SVD of B·Aᵀ from Gb = BᵀB and Ga = AᵀA (both k x k), spec §9.

    With B = Qb·Rb and A = Qa·Ra: B·Aᵀ = Qb·(Rb·Raᵀ)·Qaᵀ, and the small core Rb·Raᵀ = Uc·S·Vcᵀ gives
    ΔW ∝ (Qb·Uc)·S·(Qa·Vc)ᵀ, an exact SVD because Qb and Qa have orthonormal columns.
    """
    sb, sa = span_from_gram(gb), span_from_gram(ga)
    core = sb.r @ sa.r.T  # (mb, ma)
    if core.numel() == 0:
        return Spectrum(s=core.new_zeros(0), u_map=sb.to_q, v_map=sa.to_q)
    with small_linalg():
        uc, s, vch = torch.linalg.svd(core, full_matrices=True)
    return Spectrum(s=s, u_map=sb.to_q @ uc, v_map=sa.to_q @ vch.T)


def spectrum(lora_b: torch.Tensor, lora_a: torch.Tensor) -> Spectrum:
    """The factored SVD of lora_b @ lora_a (PEFT layout, any number k of stacked components)."""
    return FactoredUpdate(lora_b, lora_a).spectrum()


def factored_svd(lora_b: torch.Tensor, lora_a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Explicit (U, S, V) with lora_b @ lora_a = U·diag(S)·Vᵀ, U d_out x n, V d_in x n (float64), spec §9."""
    sp = spectrum(lora_b, lora_a)
    n = sp.s.numel()
    u = lora_b.to(torch.float64) @ sp.u_map[:, :n].to(lora_b.device)
    v = lora_a.to(torch.float64).T @ sp.v_map[:, :n].to(lora_a.device)
    return u, sp.s, v


def singular_values(lora_b: torch.Tensor, lora_a: torch.Tensor) -> torch.Tensor:
    return spectrum(lora_b, lora_a).s


def effective_rank(s: torch.Tensor, rtol: float = EFFECTIVE_RANK_RTOL) -> int:
    """Number of singular values above rtol · the largest (0 for a zero update)."""
    if s.numel() == 0 or float(s.max()) <= 0:
        return 0
    return int((s > rtol * s.max()).sum())


def cayley(k: torch.Tensor) -> torch.Tensor:
    """Cayley rotation R = (I - K)(I + K)⁻¹ of a skew-symmetric K (§9, M1); exactly orthogonal for any K."""
    eye = torch.eye(k.shape[0], dtype=k.dtype)
    # R·(I + K) = I - K  <=>  (I + K)ᵀ·Rᵀ = (I - K)ᵀ  <=>  (I - K)·Rᵀ = (I + K)
    with small_linalg():
        return torch.linalg.solve(eye - k, eye + k).T


def random_rotation(r: int, epsilon: float, gen: torch.Generator) -> torch.Tensor:
    """Cayley rotation with K = ε·(M - Mᵀ)/2, M ~ N(0, 1) r x r (§9, M1); the identity at ε = 0."""
    m = torch.randn(r, r, generator=gen, dtype=torch.float64)
    return cayley(epsilon * (m - m.T) / 2)


@dataclass
class FactoredUpdate:
    """One module's update ΔW ∝ lora_b @ lora_a kept in factored form (PEFT's layout: lora_b d_out x r, lora_a
    r x d_in) for the operators' algebra; the serving layer's per-adapter factors are populora.lora.LoraFactors.

    The r x r Grams with itself and with other factors of the same module (`cross`) and the spectrum are computed
    once and cached, so each tall factor is read as few times as possible.
    """

    lora_b: torch.Tensor
    lora_a: torch.Tensor
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def _get(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def known_cross(self, other: FactoredUpdate) -> tuple[torch.Tensor, torch.Tensor] | None:
        entry = self._cache.get(("cross", id(other)))
        if entry is None or entry[0]() is not other:  # a weak reference: caches never keep factors alive
            return None
        return entry[1], entry[2]

    def remember_cross(self, other: FactoredUpdate, gb: torch.Tensor, ga: torch.Tensor) -> None:
        self._cache[("cross", id(other))] = (weakref.ref(other), gb, ga)

    def cross(self, other: FactoredUpdate) -> tuple[torch.Tensor, torch.Tensor]:
        """(B_selfᵀ·B_other, A_self·A_otherᵀ): r x r float64 Grams, made with `joint_grams` when not known."""
        known = self.known_cross(other)
        if known is None:
            joint_grams([self, other])
            known = self.known_cross(other)
        return known

    def gram_b(self) -> torch.Tensor:
        """BᵀB (r x r)."""
        return self.cross(self)[0]

    def gram_a(self) -> torch.Tensor:
        """AᵀA = lora_a·lora_aᵀ (r x r)."""
        return self.cross(self)[1]

    def spectrum(self) -> Spectrum:
        """The factored SVD of this module's B·Aᵀ (§9)."""
        return self._get("spectrum", lambda: spectrum_from_grams(self.gram_b(), self.gram_a()))


def joint_grams(factors: Sequence[FactoredUpdate]) -> None:
    """Every Gram among `factors` (each with itself and with each other) not known yet, in one pass per side;
    each is remembered by both factors. Operators call it once with every source a module's child draws on, so
    the spectrum, the crossover blocks and the change statistics share one pass."""
    unique: list[FactoredUpdate] = []
    for f in factors:
        if not any(f is u for u in unique):
            unique.append(f)
    pairs = [(i, j) for i in range(len(unique)) for j in range(i, len(unique))
             if unique[i].known_cross(unique[j]) is None]
    if not pairs:
        return
    gb = gram_blocks([f.lora_b for f in unique], pairs, tall=True)
    ga = gram_blocks([f.lora_a for f in unique], pairs, tall=False)
    for i, j in pairs:
        unique[i].remember_cross(unique[j], gb[i, j], ga[i, j])
        if i != j:
            unique[j].remember_cross(unique[i], gb[i, j].T, ga[i, j].T)


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


@dataclass
class ModuleStats:
    """Squared Frobenius norms (in units of B·Aᵀ, without the alpha/r scaling) and the child's spectrum."""

    diff_sq: float  # ||ΔW_child - ΔW_parent||²
    parent_sq: float  # ||ΔW_parent||²
    child_sq: float  # ||ΔW_child||²
    child_s: torch.Tensor  # singular values of ΔW_child


def compare(child: FactoredUpdate, parent: FactoredUpdate) -> ModuleStats:
    """Norms of ΔW_child - ΔW_parent in factored form, and the child's singular values.

    ||B_c A_cᵀ - B_p A_pᵀ||² = tr(Gb_cc·Ga_cc) - 2·tr(Gb_cp·Ga_pc) + tr(Gb_pp·Ga_pp) with the r x r Grams
    Gb_xy = B_xᵀB_y and Ga_xy = A_xᵀA_y, in float64 (resolves a relative change down to ~1e-8).
    """
    if child.lora_b is parent.lora_b and child.lora_a is parent.lora_a:
        sq = float((parent.gram_b() * parent.gram_a()).sum())
        return ModuleStats(0.0, sq, sq, parent.spectrum().s)
    known = child._cache.get("against")
    child_s = None
    if known is not None and known[0] is parent:
        gb_cc, gb_cp, ga_cc, ga_cp, child_s = known[1:]
    else:
        joint_grams([child, parent])  # one pass: the child's Grams, its cross with the parent, the parent's own
        (gb_cc, ga_cc), (gb_cp, ga_cp) = child.cross(child), child.cross(parent)
    # tr(X·Yᵀ) = Σ X ∘ Y; tr(Gb_cp·Ga_pc) = tr(Gb_cp·Ga_cpᵀ).
    child_sq = float((gb_cc * ga_cc).sum())
    parent_sq = float((parent.gram_b() * parent.gram_a()).sum())
    cross = float((gb_cp * ga_cp).sum())
    diff_sq = child_sq - 2 * cross + parent_sq
    if child_s is None:
        child_s = spectrum_from_grams(gb_cc, ga_cc).s
    else:  # known from the construction: the nonzero ones, descending, as the Grams' spectrum would list them
        child_s = torch.sort(child_s[child_s > 0], descending=True).values
    return ModuleStats(max(diff_sq, 0.0), max(parent_sq, 0.0), max(child_sq, 0.0), child_s)
