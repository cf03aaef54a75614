"""The shared Gram pass of the operators and the device plumbing: the blocks equal dense float64 products, the
crossovers' statistics from their maps equal those from their factors, and a GPU that is not there is refused."""

import pytest
import torch

from populora.config import EvolutionConfig
from services.evolver.adapters import EvolverError
from services.evolver.breed import generator, resolve_device
from services.evolver.factored import FactoredUpdate, compare, joint_grams
from services.evolver.linalg import gram_blocks
from services.evolver.operators import OPERATORS, ModuleContext, gaussian_perturb


@pytest.mark.parametrize("tall", [True, False])
def test_gram_blocks_equal_dense_float64_products(tall):
    g = torch.Generator().manual_seed(0)
    widths, d = [3, 5, 2], 37
    mats = [torch.randn(d, k, generator=g) if tall else torch.randn(k, d, generator=g) for k in widths]
    pairs = [(0, 0), (0, 2), (1, 2), (2, 1)]
    out = gram_blocks(mats, pairs, tall=tall)
    for i, j in pairs:
        x, y = mats[i].double(), mats[j].double()
        expected = x.T @ y if tall else x @ y.T
        assert out[i, j].dtype == torch.float64 and out[i, j].shape == (widths[i], widths[j])
        assert torch.allclose(out[i, j], expected, rtol=1e-12, atol=1e-12)


def test_joint_grams_fill_both_sides_once():
    g = torch.Generator().manual_seed(1)
    p = FactoredUpdate(torch.randn(20, 4, generator=g), torch.randn(4, 9, generator=g))
    q = FactoredUpdate(torch.randn(20, 4, generator=g), torch.randn(4, 9, generator=g))
    joint_grams([p, q, p])
    gb, ga = p.cross(q)
    assert torch.allclose(gb, p.lora_b.double().T @ q.lora_b.double(), rtol=1e-12)
    assert torch.allclose(ga, p.lora_a.double() @ q.lora_a.double().T, rtol=1e-12)
    assert torch.equal(q.cross(p)[0], gb.T) and torch.equal(q.gram_a(), q.cross(q)[1])


@pytest.mark.parametrize("operator", ["X1", "X3", "X4"])
def test_crossover_stats_from_maps_equal_stats_from_factors(operator):
    """X1/X3/X4 give compare() the child's Grams from the sources' Grams and their maps; they must match the
    Grams of the child's factors."""
    r = 8
    g = torch.Generator().manual_seed(2)
    parents = [FactoredUpdate(torch.randn(30, r, generator=g), torch.randn(r, 20, generator=g)) for _ in range(2)]
    params = {"X1": {"p": 0.5}, "X3": {"k": 3}, "X4": {"eta": 1.3}}[operator]
    child = OPERATORS[operator].fn(parents, ModuleContext("m", 0, r, params, generator(0, 1, 0)))
    assert "against" in child._cache
    fast = compare(child, parents[0])
    fresh_parent = FactoredUpdate(parents[0].lora_b, parents[0].lora_a)
    slow = compare(FactoredUpdate(child.lora_b, child.lora_a), fresh_parent)
    assert fast.diff_sq == pytest.approx(slow.diff_sq, rel=1e-5)
    assert fast.child_sq == pytest.approx(slow.child_sq, rel=1e-5)
    assert fast.parent_sq == pytest.approx(slow.parent_sq, rel=1e-9)
    assert fast.child_s.numel() == slow.child_s.numel()
    assert torch.allclose(fast.child_s, slow.child_s, rtol=1e-5, atol=1e-5 * float(slow.child_s[0]))


def test_noise_comes_from_the_noise_generator_when_one_is_given():
    """On a GPU the noise and masks come from a generator on that device (ctx.noise); the CPU path keeps ctx.gen."""
    r = 4
    g = torch.Generator().manual_seed(3)
    p = FactoredUpdate(torch.randn(12, r, generator=g), torch.randn(r, 10, generator=g))
    params = {"epsilon": 0.1}
    plain = OPERATORS["M4"].fn([p], ModuleContext("m", 0, r, params, generator(0, 1, 0)))
    noise = generator(0, 2, 0)
    apart = OPERATORS["M4"].fn([p], ModuleContext("m", 0, r, params, generator(0, 1, 0), noise=generator(0, 2, 0)))
    expected_b = gaussian_perturb(p.lora_b, 0.1, r, noise)
    assert torch.equal(apart.lora_b, expected_b) and not torch.equal(apart.lora_b, plain.lora_b)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when no GPU is there")
def test_a_missing_gpu_is_refused_by_name():
    with pytest.raises(EvolverError, match="evolution.device is 'cuda'.*no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu" and resolve_device("cpu").type == "cpu"


def test_config_device_names_are_checked():
    assert EvolutionConfig(device="cuda:1").device == "cuda:1"
    for bad in ("gpu", "cuda:x", ""):
        with pytest.raises(ValueError):
            EvolutionConfig(device=bad)
