"""Rank-r LoRA algebra in factored form: exact SVD of B·Aᵀ, refactoring a spectrum, Cayley rotations, norms.

Layout (PEFT): `lora_a` is r x d_in, `lora_b` is d_out x r, and a module's update is ΔW = scaling · lora_b @ lora_a.
Spec §9 writes A = lora_aᵀ (d_in x r), so ΔW ∝ B·Aᵀ; the functions here take PEFT's layout and never form ΔW.

Every function works on the r x r Gram matrices of the factors plus one tall product per side, so one module
costs O((d_in + d_out)·r²) flops, against O(d_in·d_out·min(d_in, d_out)) for a dense SVD of ΔW.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
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


def gram(x: torch.Tensor) -> torch.Tensor:
    """Xᵀ·X in float64 for a tall X (d x k)."""
    x64 = x.to(torch.float64)
    return x64.T @ x64


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
    return spectrum_from_grams(gram(lora_b), gram(lora_a.T))


def factored_svd(lora_b: torch.Tensor, lora_a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Explicit (U, S, V) with lora_b @ lora_a = U·diag(S)·Vᵀ, U d_out x n, V d_in x n (float64), spec §9."""
    sp = spectrum(lora_b, lora_a)
    n = sp.s.numel()
    u = lora_b.to(torch.float64) @ sp.u_map[:, :n]
    v = lora_a.to(torch.float64).T @ sp.v_map[:, :n]
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
class LoraFactors:
    """One module's LoRA factors in PEFT's layout: lora_b (d_out x r), lora_a (r x d_in); ΔW ∝ lora_b @ lora_a.

    Float64 copies, the r x r Grams and the spectrum are computed once and cached (operators and the stats share
    them), so each tall factor is converted and multiplied as few times as possible.
    """

    lora_b: torch.Tensor
    lora_a: torch.Tensor
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def _get(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def b64(self) -> torch.Tensor:
        return self._get("b64", lambda: self.lora_b.to(torch.float64))

    def a64(self) -> torch.Tensor:
        return self._get("a64", lambda: self.lora_a.to(torch.float64))

    def gram_b(self) -> torch.Tensor:
        """BᵀB (r x r)."""
        return self._get("gram_b", lambda: self.b64().T @ self.b64())

    def gram_a(self) -> torch.Tensor:
        """AᵀA = lora_a·lora_aᵀ (r x r)."""
        return self._get("gram_a", lambda: self.a64() @ self.a64().T)

    def spectrum(self) -> Spectrum:
        """The factored SVD of this module's B·Aᵀ (§9)."""
        return self._get("spectrum", lambda: spectrum_from_grams(self.gram_b(), self.gram_a()))

    def drop_float64(self) -> None:
        """Free the float64 copies (keeps the small Grams and spectrum)."""
        self._cache.pop("b64", None)
        self._cache.pop("a64", None)


Part = tuple[float, "LoraFactors"]  # (weight w_i, factors of one source): contributes w_i·B_i·A_i


def stacked_grams(parts: list[Part]) -> tuple[torch.Tensor, torch.Tensor]:
    """Grams of the stacked factors [w_1 B_1, w_2 B_2, ...] and [A_1; A_2; ...]ᵀ, i.e. of Σ w_i B_i A_i (§9, X1/X4).

    Assembled block by block: the diagonal blocks are each source's cached r x r Grams, so only the cross blocks
    B_iᵀB_j and A_i A_jᵀ cost a pass over the tall factors (no stacked copy is made).
    """
    rows_b, rows_a = [], []
    for i, (wi, pi) in enumerate(parts):
        blocks_b, blocks_a = [], []
        for j, (wj, pj) in enumerate(parts):
            if i == j:
                blocks_b.append(wi * wi * pi.gram_b())
                blocks_a.append(pi.gram_a())
            elif j > i:
                blocks_b.append(wi * wj * (pi.b64().T @ pj.b64()))
                blocks_a.append(pi.a64() @ pj.a64().T)
            else:
                blocks_b.append(rows_b[j][i].T)
                blocks_a.append(rows_a[j][i].T)
        rows_b.append(blocks_b)
        rows_a.append(blocks_a)
    gb = torch.cat([torch.cat(row, dim=1) for row in rows_b], dim=0)
    ga = torch.cat([torch.cat(row, dim=1) for row in rows_a], dim=0)
    return gb, ga


@dataclass
class Components:
    """A child module as r components in the span of weighted sources (PEFT layout, float64).

    lora_b' = Σ_i w_i·B_i @ b_map[rows of i] (d_out x r) and lora_a' = Σ_i a_map[rows of i]ᵀ @ A_i (r x d_in): the
    maps act on the stacked sources without stacking them. `extra_a_rows` (p x d_in) are appended directions when
    the sources span fewer than r.
    """

    parts: list[Part]
    b_map: torch.Tensor  # (k, c), k = Σ r_i
    a_map: torch.Tensor  # (k, c)
    extra_a_rows: torch.Tensor | None = None

    def select(self, lo: int, hi: int) -> Components:
        """Components lo..hi-1 only (maps sliced before the tall products)."""
        n = self.b_map.shape[1]
        extra = None
        if self.extra_a_rows is not None:
            extra = self.extra_a_rows[max(lo - n, 0):max(hi - n, 0)]
        return Components(self.parts, self.b_map[:, lo:min(hi, n)], self.a_map[:, lo:min(hi, n)], extra)

    def result(self, parent: LoraFactors) -> LoraFactors:
        """The child's factors, with its Grams against `parent` precomputed when they follow from the maps alone.

        With one source, the parent itself (M1, M3): B' = w·B·Mb and A' = Maᵀ·A give B'ᵀB' = w²·Mbᵀ·Gb·Mb,
        B'ᵀB = w·Mbᵀ·Gb, A'A'ᵀ = Maᵀ·Ga·Ma and A'Aᵀ = Maᵀ·Ga: r x r work instead of four passes over the factors.
        `compare` uses them; they describe the child before rounding to its storage dtype, which for float32 is
        within ~1e-7 (the caller discards them when the cast changes the tensors).
        """
        child = LoraFactors(*self.factors())
        if len(self.parts) == 1 and self.parts[0][1] is parent and self.extra_a_rows is None:
            w = self.parts[0][0]
            gb, ga = parent.gram_b(), parent.gram_a()
            child._cache["against"] = (parent, w * w * (self.b_map.T @ gb @ self.b_map), w * (self.b_map.T @ gb),
                                       self.a_map.T @ ga @ self.a_map, self.a_map.T @ ga)
        return child

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(lora_b', lora_a'): one tall product per side and source.

        The r x r maps come from float64 Grams; the tall products run in float32 (float64 for float64 sources):
        their rounding, ~1e-7 relative, is that of storing the child in float32 anyway, and they are the bulk of the
        flops.
        """
        work = torch.float64 if any(p.lora_b.dtype == torch.float64 for _, p in self.parts) else torch.float32
        b = a = None
        offset = 0
        for weight, part in self.parts:
            k = part.lora_b.shape[1]
            pb = part.lora_b.to(work) @ (weight * self.b_map[offset:offset + k]).to(work)
            pa = self.a_map[offset:offset + k].T.to(work) @ part.lora_a.to(work)
            b, a = (pb, pa) if b is None else (b + pb, a + pa)
            offset += k
        if self.extra_a_rows is not None and self.extra_a_rows.shape[0]:
            a = torch.cat([a, self.extra_a_rows.to(work)])
            b = torch.cat([b, b.new_zeros(b.shape[0], self.extra_a_rows.shape[0])], dim=1)
        return b, a


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
    return Components(parts=parts, b_map=b_map, a_map=a_map, extra_a_rows=extra)


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


def compare(child: LoraFactors, parent: LoraFactors) -> ModuleStats:
    """Norms of ΔW_child - ΔW_parent in factored form, and the child's singular values.

    ||B_c A_cᵀ - B_p A_pᵀ||² = tr(Gb_cc·Ga_cc) - 2·tr(Gb_cp·Ga_pc) + tr(Gb_pp·Ga_pp) with the r x r Grams
    Gb_xy = B_xᵀB_y and Ga_xy = A_xᵀA_y, in float64 (resolves a relative change down to ~1e-8).
    """
    if child.lora_b is parent.lora_b and child.lora_a is parent.lora_a:
        sq = float((parent.gram_b() * parent.gram_a()).sum())
        return ModuleStats(0.0, sq, sq, parent.spectrum().s)
    known = child._cache.get("against")
    if known is not None and known[0] is parent:
        gb_cc, gb_cp, ga_cc, ga_cp = known[1:]
    else:
        cb, ca = child.b64(), child.a64()
        gb_cc, gb_cp = cb.T @ cb, cb.T @ parent.b64()
        ga_cc, ga_cp = ca @ ca.T, ca @ parent.a64().T
    # tr(X·Yᵀ) = Σ X ∘ Y; tr(Gb_cp·Ga_pc) = tr(Gb_cp·Ga_cpᵀ).
    child_sq = float((gb_cc * ga_cc).sum())
    parent_sq = float((parent.gram_b() * parent.gram_a()).sum())
    cross = float((gb_cp * ga_cp).sum())
    diff_sq = child_sq - 2 * cross + parent_sq
    s = spectrum_from_grams(gb_cc, ga_cc).s
    return ModuleStats(max(diff_sq, 0.0), max(parent_sq, 0.0), max(child_sq, 0.0), s)
