"""The LoRA layer's training path gives the same bits as the computation it replaced: the scale on the r-wide product
when it is a power of two, and one adapter's rows without zeros and a cat (populora/lora/paths.py)."""

from __future__ import annotations

import pytest
import torch

from populora.lora import paths
from populora.lora.weights import LoraFactors


def _factors(scaling: float, r: int = 8, d_in: int = 48, d_out: int = 96):
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(r, d_in, generator=gen) * 0.1).requires_grad_()
    b = (torch.randn(d_out, r, generator=gen) * 0.1).requires_grad_()
    return LoraFactors(a, b, scaling)


def _grads(out: torch.Tensor, f: LoraFactors, x: torch.Tensor) -> list[torch.Tensor]:
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return list(torch.autograd.grad(out, [f.a, f.b, x], g))


@pytest.mark.parametrize("scaling", [2.0, 0.5, 4.0, 1.0])
def test_a_power_of_two_scale_on_the_rank_side_gives_the_same_bits(scaling):
    f = _factors(scaling)
    x = torch.randn(3, 17, 48, generator=torch.Generator().manual_seed(2)).requires_grad_()
    before = (x @ f.a.t()) @ f.b.t() * f.scaling  # the output-side scale it replaced
    after = paths.delta(x, f)
    assert torch.equal(before, after)
    for g0, g1 in zip(_grads(before, f, x), _grads(after, f, x), strict=True):
        assert torch.equal(g0, g1)


def test_other_scales_keep_the_output_side_multiply():
    assert paths.exact_scale(2.0) and paths.exact_scale(0.125) and not paths.exact_scale(2 / 3 ** 0.5)
    f = _factors(2 / 3 ** 0.5)
    x = torch.randn(2, 5, 48)
    assert torch.equal(paths.delta(x, f), (x @ f.a.t()) @ f.b.t() * f.scaling)


def test_one_adapter_s_rows_need_no_cat_and_give_the_same_bits():
    f = _factors(2.0)
    x = torch.randn(4, 9, 48, generator=torch.Generator().manual_seed(3)).requires_grad_()
    y = torch.randn(4, 9, 96, generator=torch.Generator().manual_seed(4)).requires_grad_()
    whole = paths.slices(x, y, {"a": f}, [("a", 0, 4)])
    cat = y + torch.cat([paths.delta(x, f)], dim=0)  # what the general path computes for one run
    assert torch.equal(whole, cat)
    two = paths.slices(x, y, {"a": f, "b": f}, [("a", 0, 2), ("b", 2, 4)])  # two runs: the general path
    assert torch.equal(two, cat)
