"""The r x r linear algebra of the factored form: Grams, orthonormal spans, the SVD of B·Aᵀ, Cayley rotations.

The Grams are float64 (they decide the spectrum and the change statistics); the r x r decompositions run on the CPU
on one thread whatever device holds the factors (spec §9; `services.evolver.factored` keeps a module's factors).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

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
