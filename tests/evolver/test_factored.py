"""The factored SVD of B·Aᵀ and the Cayley rotation (spec §9) against dense linear algebra."""

import pytest
import torch

from services.evolver.factored import FactoredUpdate, compare, factored_svd, singular_values
from services.evolver.linalg import cayley, effective_rank, random_rotation


@pytest.mark.parametrize("d_out,d_in,k", [(30, 40, 8), (8, 24, 8), (40, 5, 8), (64, 48, 16), (3, 3, 6)])
def test_exact_svd_matches_dense(d_out, d_in, k):
    g = torch.Generator().manual_seed(d_out * 100 + d_in)
    lora_b, lora_a = torch.randn(d_out, k, generator=g), torch.randn(k, d_in, generator=g)
    dense = lora_b.double() @ lora_a.double()
    u, s, v = factored_svd(lora_b, lora_a)
    expected = torch.linalg.svdvals(dense)
    n = s.numel()
    assert n == min(d_out, d_in, k)
    assert torch.allclose(s, expected[:n], rtol=1e-5, atol=1e-5 * float(expected[0]))
    assert float(((u * s) @ v.T - dense).norm() / dense.norm()) < 1e-5
    assert torch.allclose(u.T @ u, torch.eye(n, dtype=u.dtype), atol=1e-6)
    assert torch.allclose(v.T @ v, torch.eye(n, dtype=v.dtype), atol=1e-6)


def test_rank_deficient_factors_are_handled():
    g = torch.Generator().manual_seed(0)
    lora_a = torch.randn(8, 30, generator=g)
    lora_b = torch.randn(20, 8, generator=g)
    lora_b[:, 5:] = 0  # three dead components
    s = singular_values(lora_b, lora_a)
    assert effective_rank(s) == 5
    dense = torch.linalg.svdvals(lora_b.double() @ lora_a.double())
    assert torch.allclose(s[:5], dense[:5], rtol=1e-6)
    assert effective_rank(singular_values(torch.zeros(20, 8), lora_a)) == 0


def test_cayley_rotation_is_orthogonal_and_identity_at_zero():
    g = torch.Generator().manual_seed(3)
    for eps in (0.01, 0.1, 1.0, 5.0):
        r = random_rotation(32, eps, g)
        assert float((r.T @ r - torch.eye(32, dtype=r.dtype)).norm()) < 1e-5
        assert float(torch.linalg.det(r)) == pytest.approx(1.0, abs=1e-6)
    assert torch.equal(random_rotation(8, 0.0, g), torch.eye(8, dtype=torch.float64))
    m = torch.randn(4, 4, dtype=torch.float64, generator=g)
    k = (m - m.T) / 2
    expected = (torch.eye(4, dtype=k.dtype) - k) @ torch.linalg.inv(torch.eye(4, dtype=k.dtype) + k)
    assert torch.allclose(cayley(k), expected, atol=1e-12)


def test_compare_matches_dense_norms():
    g = torch.Generator().manual_seed(5)
    pb, pa = torch.randn(20, 6, generator=g), torch.randn(6, 12, generator=g)
    cb, ca = pb + 0.01 * torch.randn(20, 6, generator=g), pa.clone()
    st = compare(FactoredUpdate(cb, ca), FactoredUpdate(pb, pa))
    dense_p, dense_c = pb.double() @ pa.double(), cb.double() @ ca.double()
    assert st.diff_sq == pytest.approx(float((dense_c - dense_p).norm() ** 2), rel=1e-6)
    assert st.parent_sq == pytest.approx(float(dense_p.norm() ** 2), rel=1e-9)
    assert st.child_sq == pytest.approx(float(dense_c.norm() ** 2), rel=1e-9)
    parent = FactoredUpdate(pb, pa)
    same = compare(parent, parent)
    assert same.diff_sq == 0.0 and effective_rank(same.child_s) == 6
