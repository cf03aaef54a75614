"""The operators of spec §9 through `breed`: shapes and rank, identities, expected values, reproducibility."""

import math

import pytest
import torch

from populora.config import EvolutionConfig
from populora.lora import lora_keys
from services.evolver.adapters import open_parent
from services.evolver.breed import breed, generator
from services.evolver.operators import OPERATORS, FactoredUpdate, ModuleContext
from tests.evolver.conftest import SMALL_MODULES, delta_w, save_parent

EVO = EvolutionConfig()
MODULES = [m for m, _, _ in SMALL_MODULES]


def run(store, refs, operator, params=None, seed=0, evolution=EVO):
    parents = [open_parent(store.path_of(r), r.key) for r in refs]
    return breed(parents, operator, params or {}, seed, evolution)


def weights_of(store, ref):
    return store.read(ref).weights


def rel(x, y):
    return float((x - y).norm() / y.norm())


@pytest.mark.parametrize("operator", sorted(set(OPERATORS) - {"R1"}))  # R1 changes the rank: tests/evolver/test_ranks.py
def test_every_operator_keeps_shapes_rank_and_config(store, parents, operator):
    refs = parents[:OPERATORS[operator].n_parents]
    child = run(store, refs, operator, seed=3)
    parent = store.read(refs[0])
    assert child.config == parent.config
    assert set(child.weights) == set(parent.weights)
    for key, tensor in parent.weights.items():
        assert child.weights[key].shape == tensor.shape and child.weights[key].dtype == tensor.dtype
        assert torch.isfinite(child.weights[key]).all()
    assert 0 < child.effective_rank <= parent.rank
    assert child.relative_change > 0 and math.isfinite(child.relative_change)
    again = run(store, refs, operator, seed=3)
    assert all(torch.equal(again.weights[k], child.weights[k]) for k in child.weights), "not reproducible"
    # X3 is deterministic given its k: make the second child with another k
    other = run(store, refs, operator, {"k": child.params["k"] % 7 + 1} if operator == "X3" else None, seed=4)
    assert any(not torch.equal(other.weights[k], child.weights[k]) for k in child.weights)


def test_m1_with_zero_epsilon_keeps_delta_w(store, parents):
    child = run(store, parents[:1], "M1", {"epsilon": 0.0})
    p = weights_of(store, parents[0])
    for module in MODULES:
        assert rel(delta_w(child.weights, module), delta_w(p, module)) < 1e-5
    assert child.relative_change < 1e-5 and child.epsilon == 0.0


def test_m1_changes_grow_with_epsilon(store, parents):
    small = run(store, parents[:1], "M1", {"epsilon": 0.01}).relative_change
    large = run(store, parents[:1], "M1", {"epsilon": 0.2}).relative_change
    assert 0 < small < large


def test_m3_drops_effective_rank_by_ceil_fraction(store, parents):
    child = run(store, parents[:1], "M3", seed=1)
    r = 8
    expected = r - math.ceil(EVO.m3_fraction * r)
    assert child.effective_rank == expected and child.stats["effective_rank_min"] == expected
    for module in MODULES:
        s = torch.linalg.svdvals(delta_w(child.weights, module))
        assert int((s > 1e-6 * s[0]).sum()) == expected
        key_a, key_b = lora_keys(module)
        assert child.weights[key_b].shape[1] == r and child.weights[key_a].shape[0] == r
        # zeroed components keep a trainable A direction (B column 0), so no all-zero LoRA rows
        assert (child.weights[key_a].norm(dim=1) > 0).all()


def test_m2_touches_a_third_of_the_modules_and_no_others(store, parents):
    child = run(store, parents[:1], "M2", seed=5)
    p = weights_of(store, parents[0])
    touched = [m for m in MODULES if any(not torch.equal(child.weights[k], p[k]) for k in lora_keys(m))]
    assert len(touched) == max(1, round(0.33 * len(MODULES))) == child.stats["modules_selected"]
    for m in touched:
        assert all(not torch.equal(child.weights[k], p[k]) for k in lora_keys(m)), "A and B both perturbed"
    assert child.stats["modules_changed"] == len(touched)
    one = run(store, parents[:1], "M2", {"fraction": 0.01}, seed=5)
    assert one.stats["modules_changed"] == 1


def test_m2_zero_b_uses_one_over_sqrt_r():
    r = 16
    p = FactoredUpdate(torch.zeros(50, r), torch.randn(r, 30))
    out = OPERATORS["M2"].fn([p], ModuleContext("m", 0, r, {"epsilon": 0.1}, generator(0, 1, 0)))
    assert float(out.lora_b.std()) == pytest.approx(0.1 / math.sqrt(r), rel=0.1)


def test_m4_perturbs_every_module_with_its_own_scale(store, parents):
    child = run(store, parents[:1], "M4", {"epsilon": 0.15})
    p = weights_of(store, parents[0])
    for key, tensor in p.items():
        noise = (child.weights[key] - tensor) / tensor.std()
        assert float(noise.std()) == pytest.approx(0.15, rel=0.35)


def test_x2_copies_each_module_whole_from_one_parent(store, parents):
    p1, p2 = weights_of(store, parents[0]), weights_of(store, parents[1])
    child = run(store, parents, "X2", seed=11)
    picks = []
    for module in MODULES:
        key_a, key_b = lora_keys(module)
        from_1 = torch.equal(child.weights[key_a], p1[key_a]) and torch.equal(child.weights[key_b], p1[key_b])
        from_2 = torch.equal(child.weights[key_a], p2[key_a]) and torch.equal(child.weights[key_b], p2[key_b])
        assert from_1 != from_2, f"{module}: A and B must come together from exactly one parent"
        picks.append(from_1)
    assert any(picks) and not all(picks)


def test_x3_takes_top_k_of_parent1_and_rest_of_parent2(store, parents):
    p1, p2 = weights_of(store, parents[0]), weights_of(store, parents[1])
    child = run(store, parents, "X3", {"k": 3})
    assert child.params["k"] == 3
    for module in MODULES:
        u1, s1, v1h = torch.linalg.svd(delta_w(p1, module), full_matrices=False)
        u2, s2, v2h = torch.linalg.svd(delta_w(p2, module), full_matrices=False)
        expected = (u1[:, :3] * s1[:3]) @ v1h[:3] + (u2[:, 3:8] * s2[3:8]) @ v2h[3:8]
        assert rel(delta_w(child.weights, module), expected) < 1e-5
    drawn = run(store, parents, "X3", seed=9)
    assert 1 <= drawn.params["k"] <= 7 and drawn.params["k"] == int(drawn.params["k"])


def test_x4_at_eta_one_reproduces_the_better_parent(store, parents):
    p1 = weights_of(store, parents[0])
    child = run(store, parents, "X4", {"eta": 1.0})
    for module in MODULES:
        assert rel(delta_w(child.weights, module), delta_w(p1, module)) < 1e-5
    assert child.relative_change < 1e-5


def test_x4_extrapolates_beyond_the_better_parent(store, parents):
    p1, p2 = weights_of(store, parents[0]), weights_of(store, parents[1])
    child = run(store, parents, "X4", {"eta": 1.3})
    module = "model.layers.0.self_attn.k_proj"  # d_out = 8 = r: the rank-2r combination is exactly rank <= r
    expected = 1.3 * delta_w(p1, module) - 0.3 * delta_w(p2, module)
    assert rel(delta_w(child.weights, module), expected) < 1e-5
    drawn = run(store, parents, "X4", seed=2)
    assert 1.0 <= drawn.params["eta"] <= 1.5


def test_x1_dare_is_unbiased_over_seeds():
    """E[child] = mean of the parents' ΔW when truncation to r loses nothing (d_in <= r), as in §9: a z-test of the
    mean over seeds, entry by entry, against its own standard error."""
    r, d_out, d_in, n = 4, 6, 4, 1500
    g = torch.Generator().manual_seed(0)
    p1 = FactoredUpdate(torch.randn(d_out, r, generator=g), torch.randn(r, d_in, generator=g))
    p2 = FactoredUpdate(torch.randn(d_out, r, generator=g), torch.randn(r, d_in, generator=g))
    target = (p1.lora_b.double() @ p1.lora_a.double() + p2.lora_b.double() @ p2.lora_a.double()) / 2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny decompositions: one thread is far faster
    try:
        samples = torch.stack([_x1_delta_w(p1, p2, r, seed) for seed in range(n)])
    finally:
        torch.set_num_threads(threads)
    mean, se = samples.mean(0), samples.std(0) / n ** 0.5
    assert float(((mean - target) / se).abs().max()) < 4.5
    assert rel(mean, target) < 0.25
    # Averaging A and B separately is biased (it adds B1·A2ᵀ cross terms): the same test rejects it.
    naive = (p1.lora_b + p2.lora_b).double() @ (p1.lora_a + p2.lora_a).double() / 4
    assert float(((naive - target) / se).abs().max()) > 10


def _x1_delta_w(p1, p2, r, seed):
    out = OPERATORS["X1"].fn([p1, p2], ModuleContext("m", 0, r, {"p": 0.7}, generator(seed, 1, 0)))
    assert out.lora_b.shape == (p1.lora_b.shape[0], r) and out.lora_a.shape == (r, p1.lora_a.shape[1])
    return out.lora_b.double() @ out.lora_a.double()


def test_self_adapted_epsilon_is_inherited_and_stored(store):
    from tests.evolver.conftest import save_parent

    ref = save_parent(store, "E1", seed=1, meta={"epsilon": 0.02})
    child = run(store, [ref], "M1", seed=1)
    assert child.epsilon != 0.02 and abs(math.log(child.epsilon / 0.02)) < 0.05 * 5
    assert child.params["epsilon"] == pytest.approx(child.epsilon)
    m4 = run(store, [ref], "M4", seed=1)
    assert m4.params["epsilon"] == pytest.approx(m4.epsilon * 0.15 / 0.1)
    fixed = run(store, [ref], "M1", seed=1, evolution=EvolutionConfig(self_adapt_epsilon=False))
    assert fixed.epsilon == 0.02
    clamped = run(store, [ref], "M1", seed=1, evolution=EvolutionConfig(epsilon_min=0.5, epsilon_max=0.6))
    assert clamped.epsilon == 0.5


def test_bfloat16_parents_give_a_bfloat16_child(store):
    from tests.evolver.conftest import save_parent

    ref = save_parent(store, "H1", seed=1, dtype=torch.bfloat16)
    child = run(store, [ref], "M1", {"epsilon": 0.0})
    assert all(t.dtype == torch.bfloat16 for t in child.weights.values())
    assert child.relative_change < 1e-2


def test_m1_on_rank_deficient_and_zero_b_parents():
    """A fresh adapter (B = 0) stays ΔW = 0 with r trainable A rows; a rank-deficient one keeps its rank."""
    r = 8
    g = torch.Generator().manual_seed(0)
    lora_a = torch.randn(r, 30, generator=g)
    zero = OPERATORS["M1"].fn([FactoredUpdate(torch.zeros(20, r), lora_a)],
                              ModuleContext("m", 0, r, {"epsilon": 0.1}, generator(0, 1, 0)))
    assert float(zero.lora_b.abs().max()) == 0 and (zero.lora_a.norm(dim=1) > 0).all()
    lora_b = torch.randn(20, r, generator=g)
    lora_b[:, 5:] = 0
    parent = FactoredUpdate(lora_b, lora_a)
    same = OPERATORS["M1"].fn([parent], ModuleContext("m", 0, r, {"epsilon": 0.0}, generator(0, 1, 0)))
    dense = lora_b.double() @ lora_a.double()
    assert rel(same.lora_b.double() @ same.lora_a.double(), dense) < 1e-5
    moved = OPERATORS["M1"].fn([parent], ModuleContext("m", 0, r, {"epsilon": 0.05}, generator(0, 1, 0)))
    s = torch.linalg.svdvals(moved.lora_b.double() @ moved.lora_a.double())
    assert int((s > 1e-6 * s[0]).sum()) == 5 and rel(moved.lora_b.double() @ moved.lora_a.double(), dense) < 0.5


@pytest.mark.parametrize("operator", ["M1", "M3"])
def test_stats_from_maps_equal_stats_from_factors(operator):
    """M1/M3 give compare() the child's Grams from r x r algebra; they must match the Grams of the factors."""
    from services.evolver.factored import compare

    r = 8
    g = torch.Generator().manual_seed(1)
    parent = FactoredUpdate(torch.randn(30, r, generator=g), torch.randn(r, 20, generator=g))
    params = {"epsilon": 0.1} if operator == "M1" else {"fraction": 0.3}
    child = OPERATORS[operator].fn([parent], ModuleContext("m", 0, r, params, generator(0, 1, 0)))
    assert "against" in child._cache
    fast = compare(child, parent)
    slow = compare(FactoredUpdate(child.lora_b, child.lora_a), FactoredUpdate(parent.lora_b, parent.lora_a))
    assert fast.diff_sq == pytest.approx(slow.diff_sq, rel=1e-5)
    assert fast.child_sq == pytest.approx(slow.child_sq, rel=1e-5)
    assert torch.allclose(fast.child_s, slow.child_s, rtol=1e-5, atol=1e-5 * float(slow.child_s[0]))


@pytest.mark.parametrize("rank", [8, 16, 32, 64])
def test_mutations_at_their_defaults_move_a_child_by_about_epsilon_at_every_rank(store, rank):
    """Spec §9: a mutation's child starts near its parent whatever the rank: its relative change
    |ΔW' - ΔW| / |ΔW| stays within a factor 3 of the operator's ε at its defaults (M1's Cayley rotation is scaled
    by 1/sqrt(r) for this: unscaled, a rank-64 child moved 1.16 at ε = 0.1). M3 has no ε: it drops a fixed share of
    the spectrum."""
    modules = [(f"model.layers.{i}.self_attn.q_proj", 192, 160) for i in range(3)]
    ref = save_parent(store, f"R{rank}", rank=rank, seed=rank, modules=modules, targets=["q_proj"])
    parent = open_parent(store.path_of(ref), ref.key)
    for operator in ("M1", "M2", "M4"):
        for seed in range(3):
            child = breed([parent], operator, {}, seed, EVO)
            assert child.epsilon > 0
            assert child.epsilon / 3 <= child.relative_change <= 3 * child.epsilon, (operator, seed, child.epsilon,
                                                                                     child.relative_change)
    for seed in range(3):  # M3 at its default share: about one component in r/ceil(0.05 r), as close as M1's child
        assert 0 < breed([parent], "M3", {}, seed, EVO).relative_change <= 0.45
