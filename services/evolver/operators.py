"""The LoRA weight-space operators of spec §9 (M1-M4 and R1 mutations, X1-X4 crossovers), one function each, in a registry.

Every operator has the signature `(parents, ctx) -> FactoredUpdate`: it maps one module's factors of each parent
(better parent first, B·A in the child's units: services.evolver.ranks) to the child's factors of rank `ctx.rank`:
a mutation's parent's own rank, R1's new one, a crossover's by its rule (spec §9, "Mixed ranks"). Choices that span the whole adapter (which modules
M2 perturbs, X3's k, X4's η) are drawn once per child by the operator's `draw` function and reach every module
through `ctx.params` / `ctx.selected`; per-module randomness comes from `ctx.gen`, seeded from (seed, module index),
so a child is reproducible from its seed whatever order modules are processed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from populora.config import EvolutionConfig
from services.evolver.components import Components, compose, concat, stacked_grams
from services.evolver.factored import FactoredUpdate, joint_grams
from services.evolver.linalg import random_rotation, spectrum_from_grams
from services.evolver.ranks import MAX_RANK, grown, rank_change_draw, row_norm, truncated


@dataclass
class ModuleContext:
    """What an operator knows about the module it is working on."""

    name: str
    index: int
    rank: int
    params: dict[str, float]
    gen: torch.Generator
    selected: bool = True  # M2: whether this module is among the perturbed ones
    noise: torch.Generator | None = None  # full-size random tensors (M2/M4 noise, X1 masks) on the factors' device

    @property
    def noise_gen(self) -> torch.Generator:
        """Where the noise and masks are drawn: `noise` when the factors live on a GPU, else `gen` itself."""
        return self.noise if self.noise is not None else self.gen


@dataclass
class Draw:
    """Adapter-wide random choices of one child: resolved parameters and the modules M2 perturbs."""

    params: dict[str, float]
    selected: frozenset[str] | None = None


OperatorFn = Callable[[Sequence[FactoredUpdate], ModuleContext], FactoredUpdate]
DrawFn = Callable[[dict[str, float], list[str], int, torch.Generator], Draw]


def _no_draw(params: dict[str, float], modules: list[str], rank: int, gen: torch.Generator) -> Draw:
    return Draw(dict(params))


@dataclass(frozen=True)
class Operator:
    """A registered operator: its per-module function, arity, defaults (from `cfg.evolution`) and global draw."""

    name: str
    n_parents: int
    description: str
    fn: OperatorFn
    defaults: Callable[[EvolutionConfig], dict[str, float]]
    drawn: tuple[str, ...] = ()  # parameters drawn per child unless given
    draw: DrawFn = _no_draw
    uses_epsilon: bool = False

    @property
    def is_mutation(self) -> bool:
        return self.n_parents == 1

    def allowed_params(self, evolution: EvolutionConfig) -> list[str]:
        return sorted({*self.defaults(evolution), *self.drawn})


OPERATORS: dict[str, Operator] = {}


def register(name: str, n_parents: int, description: str, defaults: Callable[[EvolutionConfig], dict[str, float]],
             drawn: tuple[str, ...] = (), draw: DrawFn = _no_draw) -> Callable[[OperatorFn], OperatorFn]:
    def wrap(fn: OperatorFn) -> OperatorFn:
        OPERATORS[name] = Operator(name, n_parents, description, fn, defaults, drawn, draw,
                                   uses_epsilon="epsilon" in defaults(EvolutionConfig()))
        return fn
    return wrap


# ---------------------------------------------------------------- helpers


def gaussian_perturb(x: torch.Tensor, epsilon: float, rank: int, gen: torch.Generator) -> torch.Tensor:
    """X + ε·std(X)·N(0, 1) (§9, M2/M4); where std(X) < 1e-6 (a zero-initialised B) the scale is 1/sqrt(r).
    The noise is drawn on `gen`'s device, which must be x's."""
    x32 = x.to(torch.float32)
    std = float(x32.std()) if x32.numel() > 1 else 0.0
    scale = std if std >= 1e-6 else 1.0 / math.sqrt(rank)
    noise = torch.randn(x32.shape, generator=gen, dtype=torch.float32, device=gen.device)
    return noise.mul_(epsilon * scale).add_(x32)  # in place: one full-size tensor, not three


def truncate(parts: list[tuple[float, FactoredUpdate]], rank: int, gen: torch.Generator, parent: FactoredUpdate,
             fallback_a_norm: float | None = None) -> FactoredUpdate:
    """Best rank-r approximation of Σ w_i B_i A_i (Eckart-Young) by the exact factored SVD of the stacked factors
    ([w_1 B_1, w_2 B_2], [A_1; A_2]) (§9), built from block Grams without stacking. The sources' Grams with
    `parent` come from the same pass, so the child's statistics need no pass of their own."""
    joint_grams([p for _, p in parts] + [parent])
    sp = spectrum_from_grams(*stacked_grams(parts))
    comp = compose(sp, sp.s[:rank], rank, parts, gen, fallback_a_norm=fallback_a_norm)
    return comp.result(parent=parent)


# ---------------------------------------------------------------- mutations


@register("M1", 1, "SVD-structured: S' = S·exp(ε·z) and Cayley rotations of both singular bases",
          defaults=lambda e: {"epsilon": e.epsilon})
def m1_svd_structured(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """M1 (§9): ΔW = U·S·Vᵀ -> (U·R_u)·diag(S ⊙ exp(ε·z))·(V·R_v)ᵀ, z ~ N(0, I), R = (I - K)(I + K)⁻¹ with
    K = ε·(M - Mᵀ)/(2·sqrt(n)), M ~ N(0, 1) n x n, n the dimension of the span rotated (r for a full-rank factor).
    R_u and R_v are independent draws; ε = 0 returns ΔW unchanged. The 1/sqrt(n) keeps the child's relative change of
    order ε at every rank: an unscaled K moves each column by about ε·sqrt(n/2), so a rank-64 child moved 1.16 from
    its parent at ε = 0.1."""
    (p,) = parents
    eps = ctx.params["epsilon"]
    sp = p.spectrum()
    s = sp.s[:ctx.rank]
    z = torch.randn(ctx.rank, generator=ctx.gen, dtype=torch.float64)
    s_new = s * torch.exp(eps * z[:s.numel()])
    # Rotate each basis inside the span it has: r columns for a full-rank factor, fewer for a deficient one.
    n_u, n_v = min(sp.u_map.shape[1], ctx.rank), min(sp.v_map.shape[1], ctx.rank)
    rot_u = random_rotation(n_u, eps / math.sqrt(max(n_u, 1)), ctx.gen)
    rot_v = random_rotation(n_v, eps / math.sqrt(max(n_v, 1)), ctx.gen)
    comp = compose(sp, s_new, ctx.rank, [(1.0, p)], ctx.gen, rot_u=rot_u, rot_v=rot_v,
                   fallback_a_norm=row_norm(p.lora_a))
    return comp.result(parent=p)


def _draw_modules(params: dict[str, float], modules: list[str], rank: int, gen: torch.Generator) -> Draw:
    """M2: choose max(1, round(fraction · n_modules)) modules uniformly without replacement."""
    n = max(1, min(len(modules), round(params["fraction"] * len(modules))))
    order = torch.randperm(len(modules), generator=gen)[:n].tolist()
    return Draw(dict(params), frozenset(modules[i] for i in order))


@register("M2", 1, "layer-selective Gaussian: X += ε·std(X)·N(0,1) on a fraction of the modules",
          defaults=lambda e: {"epsilon": e.epsilon, "fraction": e.m2_fraction}, draw=_draw_modules)
def m2_layer_gaussian(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """M2 (§9): on the chosen modules, X <- X + ε·std(X)·N(0, 1) for X in {A, B}; other modules are copied."""
    (p,) = parents
    if not ctx.selected:
        return p
    eps = ctx.params["epsilon"]
    return FactoredUpdate(gaussian_perturb(p.lora_b, eps, ctx.rank, ctx.noise_gen),
                       gaussian_perturb(p.lora_a, eps, ctx.rank, ctx.noise_gen))


@register("M3", 1, "component masking: zero ceil(fraction·r) random singular components",
          defaults=lambda e: {"fraction": e.m3_fraction})
def m3_component_mask(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """M3 (§9): ΔW = Σ_j s_j u_j v_jᵀ -> the same sum with ceil(fraction·r) randomly chosen s_j set to 0. The rank
    stays r (zeroed components keep B' = 0 and a unit A' direction); the effective rank drops by that many."""
    (p,) = parents
    sp = p.spectrum()
    n_zero = math.ceil(ctx.params["fraction"] * ctx.rank)
    s = torch.zeros(ctx.rank, dtype=torch.float64)
    s[:min(sp.s.numel(), ctx.rank)] = sp.s[:ctx.rank]
    s[torch.randperm(ctx.rank, generator=ctx.gen)[:n_zero]] = 0
    comp = compose(sp, s[:min(sp.s.numel(), ctx.rank)], ctx.rank, [(1.0, p)], ctx.gen,
                   fallback_a_norm=row_norm(p.lora_a))
    return comp.result(parent=p)


@register("M4", 1, "full Gaussian: X += ε·std(X)·N(0,1) on every module", defaults=lambda e: {"epsilon": e.m4_epsilon})
def m4_full_gaussian(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """M4 (§9): M2's perturbation X <- X + ε·std(X)·N(0, 1) on every module (ε default 0.15)."""
    (p,) = parents
    eps = ctx.params["epsilon"]
    return FactoredUpdate(gaussian_perturb(p.lora_b, eps, ctx.rank, ctx.noise_gen),
                       gaussian_perturb(p.lora_a, eps, ctx.rank, ctx.noise_gen))


def _draw_rank(params: dict[str, float], modules: list[str], rank: int, gen: torch.Generator) -> Draw:
    out = dict(params)
    if "rank" not in out:
        out["rank"] = float(rank_change_draw(rank, gen))
    return Draw(out)


@register("R1", 1, "rank change: grow by components of scale ε·σ_min orthogonal to ΔW, or keep the top r' "
          "singular triplets", defaults=lambda e: {"epsilon": e.epsilon}, drawn=("rank",), draw=_draw_rank)
def r1_rank_change(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """R1 (§9, "Mixed ranks"): ΔW of rank r to rank r' = ctx.rank. Grow (r' > r): ΔW' = ΔW + ε·σ_min·Σ_j u_j v_jᵀ
    over r' - r directions u_j ⊥ col(ΔW), v_j ⊥ row(ΔW), a change of at most ε·sqrt((r' - r)/r). Shrink (r' < r):
    the top r' singular triplets, the change being the discarded tail. r' is drawn (2r or r/2) unless given."""
    (p,) = parents
    if ctx.rank > p.lora_b.shape[1]:
        return grown(p, ctx.rank, ctx.params["epsilon"], ctx.gen, ctx.noise_gen)
    return truncated(p, ctx.rank, ctx.gen, parent=p)


# ---------------------------------------------------------------- crossovers


def dare_mask(x: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    """Keep each entry with probability 1 - p and rescale by 1/(1 - p): E[mask(X)] = X (§9, X1)."""
    keep = torch.rand(x.shape, generator=gen, dtype=torch.float32, device=gen.device).ge_(p)  # 1.0 kept, 0.0 not
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    return keep.to(work).mul_(x.to(work)).mul_(1.0 / (1.0 - p))


@register("X1", 2, "DARE: drop-and-rescale each parent's A and B, average the updates, truncate to rank r",
          defaults=lambda e: {"p": e.dare_p}, drawn=("rank",))
def x1_dare(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """X1 (§9): child ∝ (1/n)·Σ_i B~_i A~_iᵀ, B~ = B ⊙ m/(1-p), m ~ Bernoulli(1-p) entrywise (independent masks for
    A and B, so E[B~ A~ᵀ] = B Aᵀ). The rank-n·r sum is truncated to rank r by the exact SVD of ([B~_1 B~_2],
    [A~_1 A~_2]); the truncation is the one biased step (it drops the spectrum beyond r)."""
    p = ctx.params["p"]
    noise = ctx.noise_gen
    masked = [FactoredUpdate(dare_mask(q.lora_b, p, noise), dare_mask(q.lora_a, p, noise)) for q in parents]
    return truncate([(1.0 / len(masked), m) for m in masked], ctx.rank, ctx.gen, parents[0],
                    fallback_a_norm=row_norm(parents[0].lora_a))


@register("X2", 2, "layer-wise: each module's A and B copied together from one parent", defaults=lambda e: {},
          drawn=("rank",))
def x2_layerwise(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """X2 (§9): for each module pick one parent uniformly and copy both its A and B (never A from one, B from the
    other, which would create an update neither parent had). A parent of another rank than the child's is brought to
    it through its exact SVD: all of its components when it has fewer (exact), its top ones when it has more."""
    pick = int(torch.randint(len(parents), (1,), generator=ctx.gen))
    if parents[pick].lora_b.shape[1] == ctx.rank:
        return parents[pick]
    return truncated(parents[pick], ctx.rank, ctx.gen, parent=parents[0])


def _draw_k(params: dict[str, float], modules: list[str], rank: int, gen: torch.Generator) -> Draw:
    out = dict(params)
    if "k" not in out:
        out["k"] = float(int(torch.randint(1, rank, (1,), generator=gen)))
    return Draw(out)


@register("X3", 2, "SVD subspace: parent 1's top-k singular triplets plus parent 2's components k..r-1",
          defaults=lambda e: {}, drawn=("k", "rank"), draw=_draw_k)
def x3_svd_subspace(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """X3 (§9): with ΔW_i = U_i S_i V_iᵀ, child = U_1[:, :k] S_1[:k] V_1[:, :k]ᵀ + U_2[:, k:r] S_2[k:r] V_2[:, k:r]ᵀ,
    k ~ U{1..r-1} drawn once per child. Factored as B' = [U_1 sqrt(S_1)]_{:k} | [U_2 sqrt(S_2)]_{k:r}, likewise A'.
    r is the child's rank; components beyond a parent's own rank are zero (B' = 0, a trainable A' direction)."""
    k = int(ctx.params["k"])
    joint_grams(parents)  # both spectra and the cross Grams the child's statistics need, in one pass
    first = _triplets(parents[0], ctx, 0, k)
    second = _triplets(parents[1], ctx, k, ctx.rank)
    return concat([first, second], parent=parents[0])


def _triplets(p: FactoredUpdate, ctx: ModuleContext, lo: int, hi: int) -> Components:
    """Components lo..hi-1 of p's SVD: B' = U·sqrt(S), A'ᵀ = V·sqrt(S) (zero beyond p's rank)."""
    sp = p.spectrum()
    comp = compose(sp, sp.s[:ctx.rank], ctx.rank, [(1.0, p)], ctx.gen, fallback_a_norm=row_norm(p.lora_a))
    return comp.select(lo, hi)


def _draw_eta(params: dict[str, float], modules: list[str], rank: int, gen: torch.Generator) -> Draw:
    out = dict(params)
    if "eta" not in out:
        u = float(torch.rand(1, generator=gen, dtype=torch.float64))
        out["eta"] = out["eta_min"] + u * (out["eta_max"] - out["eta_min"])
    return Draw(out)


@register("X4", 2, "extrapolation: worse + η·(better - worse), η ~ U(eta_min, eta_max), truncated to rank r",
          defaults=lambda e: {"eta_min": e.x4_eta_min, "eta_max": e.x4_eta_max}, drawn=("eta", "rank"), draw=_draw_eta)
def x4_extrapolation(parents: Sequence[FactoredUpdate], ctx: ModuleContext) -> FactoredUpdate:
    """X4 (§9): child = W + η·(B - W) = η·ΔW_better + (1 - η)·ΔW_worse with the better parent first; in factored
    form the stacked factors ([η·B_1, (1-η)·B_2], [A_1, A_2]) have rank 2r, truncated to r by the exact SVD.
    η = 1 reproduces the better parent; η > 1 steps beyond it, away from the worse one."""
    eta = ctx.params["eta"]
    return truncate([(eta, parents[0]), (1.0 - eta, parents[1])], ctx.rank, ctx.gen, parents[0],
                    fallback_a_norm=row_norm(parents[0].lora_a))


@dataclass
class ParamRule:
    """Allowed range of an operator parameter, for errors the user can act on."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    note: str = ""

    def check(self, name: str, value: float, rank: int) -> str | None:
        hi = rank - 1 if name == "k" else self.hi
        bad = (value < self.lo or value > hi or (self.lo_open and value == self.lo)
               or (self.hi_open and value == hi) or not math.isfinite(value)
               or (self.integer and value != int(value)))
        if not bad:
            return None
        lo_b, hi_b = ("(" if self.lo_open else "["), (")" if self.hi_open else "]")
        kind = "an integer in" if self.integer else "in"
        return f"parameter {name}={value:g} must be {kind} {lo_b}{self.lo:g}, {hi:g}{hi_b}{self.note}"


PARAM_RULES: dict[str, ParamRule] = {
    "epsilon": ParamRule(0.0, 10.0),
    "fraction": ParamRule(0.0, 1.0, lo_open=True),
    "p": ParamRule(0.0, 1.0, hi_open=True),
    "k": ParamRule(1.0, math.inf, integer=True, note=" (1..r-1)"),
    "eta": ParamRule(-10.0, 10.0),
    "eta_min": ParamRule(-10.0, 10.0),
    "eta_max": ParamRule(-10.0, 10.0),
    "rank": ParamRule(1.0, float(MAX_RANK), integer=True),
}
