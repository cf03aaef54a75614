"""Making one child: resolve the operator's parameters, self-adapt ε, stream the modules through the operator,
and measure the child against its first parent in factored form (spec §8-9)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from populora.config import EvolutionConfig
from populora.lora import lora_scaling
from services.evolver.adapters import EvolverError, ParentAdapter, check_compatible
from services.evolver.factored import FactoredUpdate, compare
from services.evolver.linalg import effective_rank
from services.evolver.operators import OPERATORS, PARAM_RULES, ModuleContext, Operator
from services.evolver.ranks import child_config, child_rank, in_child_units

EPSILON_META_KEY = "epsilon"


@dataclass
class Child:
    """A child adapter in memory plus what the lineage record and the caller need."""

    weights: dict[str, torch.Tensor]
    config: dict[str, Any]
    operator: str
    seed: int
    epsilon: float
    params: dict[str, float]
    relative_change: float
    effective_rank: float
    stats: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    device: str = "cpu"  # the kind of device the math ran on: the seed reproduces the child on that kind

    def meta(self, parents: list[str]) -> dict[str, Any]:
        """What goes into the child's meta.json: its ε (inherited by its own children) and its provenance."""
        return {EPSILON_META_KEY: self.epsilon, "operator": self.operator, "parents": parents, "seed": self.seed,
                "params": self.params, "relative_change": self.relative_change,
                "effective_rank": self.effective_rank, "device": self.device}


def get_operator(name: str) -> Operator:
    op = OPERATORS.get(str(name).upper())
    if op is None:
        raise EvolverError(f"unknown operator {name!r}; known: {', '.join(sorted(OPERATORS))}")
    return op


def generator(seed: int, *stream: int, device: torch.device | None = None) -> torch.Generator:
    """An independent torch generator per (seed, stream...): module i uses stream (1, i), adapter-wide draws (0,),
    and on a GPU module i's noise and masks stream (2, i) there."""
    state = np.random.SeedSequence([seed % 2**64, *stream]).generate_state(2, np.uint64)
    gen = torch.Generator() if device is None else torch.Generator(device=device)
    return gen.manual_seed(int(state[0] ^ (state[1] << np.uint64(1))) % 2**63)


def resolve_device(name: str) -> torch.device:
    """`evolution.device` as a torch device; a GPU that is not there is an error, not a silent CPU run."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EvolverError(f"evolution.device is {name!r} but torch sees no CUDA device; set evolution.device=cpu "
                               "(or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise EvolverError(f"evolution.device is {name!r} but there are {torch.cuda.device_count()} CUDA "
                               "device(s)")
    return device


def parent_epsilon(parent: ParentAdapter, evolution: EvolutionConfig) -> float:
    """A member's mutation scale: from its meta.json, else the configured default ε."""
    value = parent.meta.get(EPSILON_META_KEY)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return evolution.epsilon
    return value if math.isfinite(value) and value > 0 else evolution.epsilon


def self_adapt(epsilon: float, evolution: EvolutionConfig, gen: torch.Generator) -> float:
    """Log-normal self-adaptation (§9): log ε <- log ε + τ·N(0, 1), clamped to [epsilon_min, epsilon_max]."""
    if not evolution.self_adapt_epsilon:
        return epsilon
    z = float(torch.randn(1, generator=gen, dtype=torch.float64))
    value = math.exp(math.log(epsilon) + evolution.epsilon_tau * z)
    return min(max(value, evolution.epsilon_min), evolution.epsilon_max)


def resolve_params(op: Operator, overrides: Mapping[str, float], rank: int, n_modules: int,
                   evolution: EvolutionConfig, parents: list[ParentAdapter],
                   gen: torch.Generator) -> tuple[dict[str, float], float]:
    """The operator's parameters (config defaults, then overrides) and the child's ε.

    ε: an explicit `epsilon` override is used as given. Otherwise the child's ε is the parents' (geometric mean for
    crossovers) self-adapted, and a mutation applies it scaled by the operator's default over the base default, so
    M4 keeps its larger ε (0.15 vs 0.1 by default) while following the member's adaptation.
    """
    defaults = op.defaults(evolution)
    allowed = op.allowed_params(evolution)
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise EvolverError(f"operator {op.name} has no parameter(s) {unknown}; allowed: {allowed or 'none'}")
    params = {**defaults, **{k: float(v) for k, v in overrides.items()}}
    for name, value in params.items():
        problem = PARAM_RULES[name].check(name, value, rank) if name in PARAM_RULES else None
        if problem:
            raise EvolverError(f"operator {op.name}: {problem}")
    if "eta_min" in params and params["eta_max"] < params["eta_min"]:
        raise EvolverError(f"operator {op.name}: eta_max={params['eta_max']:g} is below eta_min="
                           f"{params['eta_min']:g}")
    if op.name == "X3" and rank < 2:
        raise EvolverError("operator X3 needs rank r >= 2 (it splits the r components at k in 1..r-1)")
    inherited = math.exp(sum(math.log(parent_epsilon(p, evolution)) for p in parents) / len(parents))
    if "epsilon" in overrides:
        child_eps = float(overrides["epsilon"])
    else:
        child_eps = self_adapt(inherited, evolution, gen)
        if op.uses_epsilon:
            params["epsilon"] = child_eps * defaults["epsilon"] / evolution.epsilon
    return params, child_eps


def breed(parents: list[ParentAdapter], operator: str, params: Mapping[str, float], seed: int,
          evolution: EvolutionConfig) -> Child:
    """Make one child (see `_breed`) with torch limited to `evolution.threads` threads meanwhile."""
    previous = torch.get_num_threads()
    if evolution.threads and evolution.threads != previous:
        torch.set_num_threads(evolution.threads)
    try:
        return _breed(parents, operator, params, seed, evolution)
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def _breed(parents: list[ParentAdapter], operator: str, params: Mapping[str, float], seed: int,
           evolution: EvolutionConfig) -> Child:
    """Make one child of `operator` from `parents` (better first); nothing is written here.

    Every module of the child has the parents' shapes at the child's rank: a mutation's parent's, R1's new one, a
    crossover's by evolution.crossover_rank or its `rank` parameter (spec §9, "Mixed ranks"); the child's config is
    parent 1's with that rank. Parents are read with B·A in the child's units (services.evolver.ranks), so ΔW is
    compared across ranks. Stats compare the child with parent 1 in factored form: relative change
    ||ΔW_c - ΔW_1||_F / ||ΔW_1||_F over the whole adapter, and the mean effective rank (singular values > 1e-6 · the
    module's largest).
    """
    start = time.perf_counter()
    op = get_operator(operator)
    if len(parents) != op.n_parents:
        raise EvolverError(f"operator {op.name} takes {op.n_parents} parent(s), got {len(parents)}")
    check_compatible(parents)
    device = resolve_device(evolution.device)
    on_gpu = device.type != "cpu"
    first = parents[0]
    modules = sorted(first.modules)
    fixed = child_rank(op.name, [p.rank for p in parents], params, evolution)
    global_gen = generator(seed, 0)
    resolved, child_eps = resolve_params(op, params, fixed or first.rank, len(modules), evolution, parents,
                                         global_gen)
    draw = op.draw(resolved, modules, fixed or first.rank, global_gen)
    rank = int(draw.params.get("rank", fixed or first.rank))
    if op.name == "R1" and rank == first.rank:
        raise EvolverError(f"operator R1 changes the rank: the parent {first.label} has rank {rank} already; give "
                           "another rank")
    if any(p.rank != rank for p in parents):  # recorded only across ranks: a run of one rank records what it did
        draw.params["rank"] = float(rank)
    config = child_config(first.config, rank)
    weights: dict[str, torch.Tensor] = {}
    totals = {"diff_sq": 0.0, "parent_sq": 0.0, "child_sq": 0.0}
    ranks, changed, worst = [], 0, 0.0
    for index, module in enumerate(modules):
        factors = [in_child_units(FactoredUpdate(*(t.to(device) for t in p.factors(module))), p.config, config)
                   for p in parents]
        ctx = ModuleContext(module, index, rank, draw.params, generator(seed, 1, index),
                            selected=draw.selected is None or module in draw.selected,
                            noise=generator(seed, 2, index, device=device) if on_gpu else None)
        out = op.fn(factors, ctx)
        child_b, child_a = _cast(out.lora_b, first.dtype), _cast(out.lora_a, first.dtype)
        _check_shapes(module, child_b, child_a, factors[0], rank)
        child = out if (child_b is out.lora_b and child_a is out.lora_a) else FactoredUpdate(child_b, child_a)
        st = compare(child, factors[0])
        for key in totals:
            totals[key] += getattr(st, key)
        ranks.append(effective_rank(st.child_s))
        changed += st.diff_sq > 0
        if st.parent_sq > 0:
            worst = max(worst, math.sqrt(st.diff_sq / st.parent_sq))
        key_a, key_b = first.modules[module]
        weights[key_a], weights[key_b] = child_a.cpu(), child_b.cpu()
    rel = _relative(totals["diff_sq"], totals["parent_sq"])
    scale = lora_scaling(config)
    stats = {"modules": float(len(modules)), "modules_changed": float(changed),
             "relative_change_max_module": worst, "effective_rank_min": float(min(ranks)),
             "parent_norm": scale * math.sqrt(totals["parent_sq"]), "child_norm": scale * math.sqrt(totals["child_sq"]),
             "change_norm": scale * math.sqrt(totals["diff_sq"]), "epsilon": child_eps}
    if draw.selected is not None:
        stats["modules_selected"] = float(len(draw.selected))
    return Child(weights=weights, config=config, operator=op.name, seed=seed, epsilon=child_eps,
                 params=dict(draw.params), relative_change=rel, effective_rank=float(np.mean(ranks)), stats=stats,
                 seconds=time.perf_counter() - start, device=device.type)


def _relative(diff_sq: float, parent_sq: float) -> float:
    if parent_sq > 0:
        return math.sqrt(diff_sq / parent_sq)
    return 0.0 if diff_sq == 0 else math.inf


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The child is stored in the first parent's dtype; math ran in float32/float64 (a parent's own tensor, copied
    unchanged, is returned as it is)."""
    return x.to(dtype).contiguous()


def _check_shapes(module: str, b: torch.Tensor, a: torch.Tensor, parent: FactoredUpdate, rank: int) -> None:
    expected_b, expected_a = [parent.lora_b.shape[0], rank], [rank, parent.lora_a.shape[1]]
    if list(b.shape) != expected_b or list(a.shape) != expected_a:
        raise RuntimeError(f"operator produced lora_B {list(b.shape)} / lora_A {list(a.shape)} for {module}, "
                           f"expected {expected_b} / {expected_a}")
