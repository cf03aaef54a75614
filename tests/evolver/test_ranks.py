"""Operators across ranks (spec §9, "Mixed ranks"): R1's growth and truncation, each crossover's child rank and
exactness, and every child within a small factor of ε of its parent at the rank pairs (8, 32) and (32, 8)."""

import math

import pytest
import torch

from populora.config import EvolutionConfig
from populora.lora import lora_keys, lora_scaling
from populora.store import lora_config_dict
from services.evolver.adapters import open_parent
from services.evolver.breed import breed
from services.evolver.operators import OPERATORS

EVO = EvolutionConfig()
ALPHA = 16.0  # one alpha for every rank, as a run gives its members: the scalings differ (2 at rank 8, 0.5 at 32)
# Dimensions above 64 + 32, so a rank-64 child of a rank-32 parent finds directions orthogonal to it.
MODULES = [(f"model.layers.{i}.{suffix}", d_in, d_out) for i in range(2)
           for suffix, d_in, d_out in [("self_attn.q_proj", 112, 96), ("mlp.down_proj", 128, 104)]]
TARGETS = ["q_proj", "down_proj"]


def _orthonormal(d: int, k: int, g: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0]


def _updates(seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per module a rank-32 update U·diag(σ)·Vᵀ with σ_j = exp(-j/4): a decaying spectrum, as trained updates have
    (a flat one would make any truncation lose most of it)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.exp(-torch.arange(32, dtype=torch.float64) / 4)
    return {m: (_orthonormal(d_out, 32, g), s, _orthonormal(d_in, 32, g)) for m, d_in, d_out in MODULES}


def _save(store, adapter_id, rank, updates, perturb=0.0, seed=0):
    """The top `rank` components of each update, optionally moved by ~perturb (a sibling), stored as PEFT factors
    with ΔW = (ALPHA / rank)·B·A."""
    g = torch.Generator().manual_seed(seed)
    config = lora_config_dict(rank, ALPHA, TARGETS)
    scale = lora_scaling(config)
    weights = {}
    for module, (u, s, v) in updates.items():
        u, s, v = u[:, :rank], s[:rank], v[:, :rank]
        if perturb:
            s = s * torch.exp(perturb * torch.randn(rank, generator=g, dtype=torch.float64))
            u = torch.linalg.qr(u + perturb / math.sqrt(rank) * torch.randn(u.shape, generator=g,
                                                                            dtype=torch.float64))[0]
        root = (s / scale).sqrt()
        key_a, key_b = lora_keys(module)
        weights[key_b], weights[key_a] = (u * root).float(), (v * root).T.float()
    return store.save(adapter_id, weights, config)


def _delta(weights, config, module):
    key_a, key_b = lora_keys(module)
    return lora_scaling(config) * weights[key_b].double() @ weights[key_a].double()


def _rel(x, y):
    return float((x - y).norm() / y.norm())


def _breed(store, refs, operator, params=None, seed=0, evolution=EVO):
    parents = [open_parent(store.path_of(r), r.key) for r in refs]
    return breed(parents, operator, params or {}, seed, evolution)


@pytest.fixture
def pairs(store):
    """Siblings at ranks 8 and 32: the same trained-like update, each moved by about ε = 0.1 on its own."""
    updates = _updates(0)
    return {8: _save(store, "P8", 8, updates, perturb=0.05, seed=1),
            32: _save(store, "P32", 32, updates, perturb=0.05, seed=2)}


@pytest.mark.parametrize("ranks", [(8, 32), (32, 8)])
@pytest.mark.parametrize("operator", ["M1", "M2", "M4", "R1", "X1", "X2", "X3", "X4"])
def test_every_operator_moves_a_child_within_a_small_factor_of_epsilon_across_ranks(store, pairs, ranks, operator):
    """The child's |ΔW' - ΔW_1| / |ΔW_1| stays within 3ε (ε = the child's, about 0.1). A mutation works on the first
    parent (R1 moves it to the second rank); a crossover takes both, at the first parent's rank (the default
    rule). X1 runs at the p where DARE's own noise, sqrt(p/(1-p)) per factor, is ε: at its default p = 0.7 each
    masked factor moves by 1.5 whatever the ranks. M3 has no ε (it drops a share of the spectrum; test_operators
    bounds it at every rank)."""
    first, second = ranks
    op = OPERATORS[operator]
    refs = [pairs[first], pairs[second]][:op.n_parents]
    params = {"rank": float(second)} if operator == "R1" else {}
    if operator == "X1":
        params["p"] = EVO.epsilon ** 2 / (1 + EVO.epsilon ** 2)
    for seed in range(3):
        child = _breed(store, refs, operator, params, seed=seed)
        expected = second if operator == "R1" else first
        assert child.config["r"] == expected and child.config["lora_alpha"] == ALPHA
        assert all(t.shape[0 if ".lora_A." in k else 1] == expected for k, t in child.weights.items())
        epsilon = child.epsilon if op.is_mutation else EVO.epsilon
        assert 0 < child.relative_change <= 3 * epsilon, (operator, ranks, seed, child.relative_change)


def test_r1_grows_with_components_orthogonal_to_the_update_at_epsilon_sigma_min(store):
    updates = _updates(3)
    ref = _save(store, "G8", 8, updates)
    parent = store.read(ref)
    child = _breed(store, [ref], "R1", {"rank": 32.0, "epsilon": 0.1}, seed=4)
    assert child.params["rank"] == 32 and child.config["r"] == 32
    total_sq = 0.0
    for module, _, _ in MODULES:
        before, after = _delta(parent.weights, parent.config, module), _delta(child.weights, child.config, module)
        u, s, vh = torch.linalg.svd(before, full_matrices=False)
        u, s, vh = u[:, :8], s[:8], vh[:8]
        added = after - before
        assert float((u.T @ added).norm()) < 1e-5 * float(added.norm())  # off ΔW's column space
        assert float((added @ vh.T).norm()) < 1e-5 * float(added.norm())  # and off its row space
        s_added = torch.linalg.svdvals(added)[:24]
        assert torch.allclose(s_added, 0.1 * s[-1].expand(24), rtol=1e-4)  # r' - r components of ε·σ_min
        total_sq += float(before.norm()) ** 2
    bound = 0.1 * math.sqrt(24 / 8)  # ε·σ_min·sqrt(r' - r) <= ε·sqrt((r' - r)/r)·|ΔW|
    assert 0 < child.relative_change <= bound
    exact = _breed(store, [ref], "R1", {"rank": 32.0, "epsilon": 0.0}, seed=4)
    assert exact.relative_change < 1e-6
    for module, _, _ in MODULES:
        assert _rel(_delta(exact.weights, exact.config, module), _delta(parent.weights, parent.config, module)) < 1e-5
        key_a, _ = lora_keys(module)
        assert (exact.weights[key_a].norm(dim=1) > 0).all()  # the new components start at B = 0, A trainable


def test_r1_shrinks_to_the_top_singular_triplets_and_reports_the_tail(store):
    updates = _updates(5)
    ref = _save(store, "S32", 32, updates)
    parent = store.read(ref)
    child = _breed(store, [ref], "R1", {"rank": 8.0}, seed=1)
    diff_sq = parent_sq = 0.0
    for module, _, _ in MODULES:
        before = _delta(parent.weights, parent.config, module)
        u, s, vh = torch.linalg.svd(before, full_matrices=False)
        best = (u[:, :8] * s[:8]) @ vh[:8]
        after = _delta(child.weights, child.config, module)
        assert _rel(after, best) < 1e-5
        diff_sq += float(s[8:].pow(2).sum())
        parent_sq += float(s.pow(2).sum())
    assert child.relative_change == pytest.approx(math.sqrt(diff_sq / parent_sq), rel=1e-4)
    assert child.effective_rank == 8


def test_r1_draws_twice_or_half_the_rank_and_refuses_its_own(store):
    ref = _save(store, "D16", 16, _updates(6))
    drawn = {int(_breed(store, [ref], "R1", seed=s).params["rank"]) for s in range(12)}
    assert drawn == {8, 32}
    with pytest.raises(ValueError, match="R1 changes the rank"):
        _breed(store, [ref], "R1", {"rank": 16.0})


@pytest.mark.parametrize("rule,expected", [("first", 8), ("larger", 32), ("smaller", 8)])
def test_crossover_child_rank_follows_the_rule_or_the_given_rank(store, pairs, rule, expected):
    evolution = EvolutionConfig(crossover_rank=rule)
    for operator in ("X1", "X2", "X3", "X4"):
        child = _breed(store, [pairs[8], pairs[32]], operator, evolution=evolution)
        assert child.config["r"] == expected and child.params["rank"] == expected, operator
    given = _breed(store, [pairs[8], pairs[32]], "X4", {"rank": 16.0})
    assert given.config["r"] == 16


def test_x2_brings_a_module_of_another_rank_exactly_up_or_to_its_top_components(store, pairs):
    p8, p32 = store.read(pairs[8]), store.read(pairs[32])
    for order, rank in (([pairs[8], pairs[32]], 8), ([pairs[32], pairs[8]], 32)):
        child = _breed(store, order, "X2", seed=11)
        assert child.config["r"] == rank
        sources = {"8": 0, "32": 0}
        for module, _, _ in MODULES:
            got = _delta(child.weights, child.config, module)
            d8, d32 = _delta(p8.weights, p8.config, module), _delta(p32.weights, p32.config, module)
            u, s, vh = torch.linalg.svd(d32, full_matrices=False)
            top = (u[:, :rank] * s[:rank]) @ vh[:rank]  # rank 32 at rank 32: d32 itself
            if _rel(got, d8) < 1e-5:  # rank 8 inside a rank-32 child: exact
                sources["8"] += 1
            else:
                assert _rel(got, top) < 1e-5, module
                sources["32"] += 1
        assert all(sources.values()), sources


def test_x3_and_x4_across_ranks_are_the_stated_sums(store, pairs):
    p8, p32 = store.read(pairs[8]), store.read(pairs[32])
    child = _breed(store, [pairs[32], pairs[8]], "X3", {"k": 5.0})  # child rank 32: parent 2 ends at 8
    for module, _, _ in MODULES:
        u1, s1, v1 = torch.linalg.svd(_delta(p32.weights, p32.config, module), full_matrices=False)
        u2, s2, v2 = torch.linalg.svd(_delta(p8.weights, p8.config, module), full_matrices=False)
        expected = (u1[:, :5] * s1[:5]) @ v1[:5] + (u2[:, 5:8] * s2[5:8]) @ v2[5:8]
        assert _rel(_delta(child.weights, child.config, module), expected) < 1e-5
    same = _breed(store, [pairs[8], pairs[32]], "X4", {"eta": 1.0})  # η = 1: the better parent, at its rank
    assert same.config["r"] == 8 and same.relative_change < 1e-5
    for module, _, _ in MODULES:
        assert _rel(_delta(same.weights, same.config, module), _delta(p8.weights, p8.config, module)) < 1e-5
