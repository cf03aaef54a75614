"""One module's LoRA update in factored form: its Grams (one joint pass), its exact SVD, and the change statistics.

Layout (PEFT): `lora_a` is r x d_in, `lora_b` is d_out x r, and a module's update is ΔW = scaling · lora_b @ lora_a.
Spec §9 writes A = lora_aᵀ (d_in x r), so ΔW ∝ B·Aᵀ; the functions here take PEFT's layout and never form ΔW.

Every function works on the r x r Gram matrices of the factors plus one tall product per side, so one module
costs O((d_in + d_out)·r²) flops, against O(d_in·d_out·min(d_in, d_out)) for a dense SVD of ΔW. The Grams are
float64 (they decide the spectrum and the change statistics) and are made in one pass over the factors for every
pair that needs them (`joint_grams`); the r x r algebra (`services.evolver.linalg`) runs on the CPU whatever device
holds the factors. A child made from weighted sources is built in `services.evolver.components`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from services.evolver.linalg import Spectrum, gram_blocks, spectrum_from_grams


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
