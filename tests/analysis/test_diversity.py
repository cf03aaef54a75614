"""Weight diversity from factors against the dense computation on small adapters."""

from __future__ import annotations

import math

import pytest
import torch

from populora.analysis.diversity import change, inner, module_diversity, pair_diversity, population_diversity

SHAPES = {"q_proj": (24, 16), "v_proj": (24, 16), "up_proj": (40, 16)}  # module -> (d_out, d_in)


def _adapter(gen: torch.Generator, rank: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {m: (torch.randn(rank, d_in, generator=gen, dtype=torch.float64),
                torch.randn(d_out, rank, generator=gen, dtype=torch.float64)) for m, (d_out, d_in) in SHAPES.items()}


def _dense(x, y, sx, sy):
    cos, dist = [], []
    for m in sorted(x):
        wx = sx * x[m][1] @ x[m][0]
        wy = sy * y[m][1] @ y[m][0]
        nx, ny = torch.linalg.norm(wx), torch.linalg.norm(wy)
        cos.append(float((wx * wy).sum() / (nx * ny)))
        dist.append(float(torch.linalg.norm(wx - wy) / ((nx + ny) / 2)))
    return sum(cos) / len(cos), sum(dist) / len(dist)


def test_inner_product_from_factors_equals_the_dense_one():
    gen = torch.Generator().manual_seed(0)
    x, y = _adapter(gen, 4), _adapter(gen, 6)  # ranks may differ
    for m in SHAPES:
        dense = float(((x[m][1] @ x[m][0]) * (y[m][1] @ y[m][0])).sum())
        assert inner(*x[m], *y[m]) == pytest.approx(dense, rel=1e-9)


def test_pair_diversity_agrees_with_the_dense_computation():
    gen = torch.Generator().manual_seed(1)
    x, y = _adapter(gen, 4), _adapter(gen, 4)
    # y shares part of x's update, so the cosine is well away from 0.
    y = {m: (torch.cat([x[m][0][:2], y[m][0][2:]]), torch.cat([x[m][1][:, :2], y[m][1][:, 2:]], dim=1)) for m in y}
    d = pair_diversity(x, y, scaling_x=2.0, scaling_y=0.5)
    cos, dist = _dense(x, y, 2.0, 0.5)
    assert d.cosine == pytest.approx(cos, abs=1e-6)
    assert d.distance == pytest.approx(dist, abs=1e-6)
    assert 0.1 < d.cosine < 0.9
    assert d.n_modules == 3 and d.n_cosine == 3


def test_float32_factors_agree_with_the_dense_float64_computation():
    gen = torch.Generator().manual_seed(2)
    x, y = _adapter(gen, 8), _adapter(gen, 8)
    x32 = {m: (a.float(), b.float()) for m, (a, b) in x.items()}
    y32 = {m: (a.float(), b.float()) for m, (a, b) in y.items()}
    x64 = {m: (a.double(), b.double()) for m, (a, b) in x32.items()}
    y64 = {m: (a.double(), b.double()) for m, (a, b) in y32.items()}
    d = pair_diversity(x32, y32, 0.25, 0.25)
    cos, dist = _dense(x64, y64, 0.25, 0.25)
    assert d.cosine == pytest.approx(cos, abs=1e-6) and d.distance == pytest.approx(dist, abs=1e-6)


def test_identical_adapters_have_cosine_one_and_distance_zero():
    gen = torch.Generator().manual_seed(3)
    x = _adapter(gen, 4)
    d = pair_diversity(x, {m: (a.clone(), b.clone()) for m, (a, b) in x.items()}, 1.5, 1.5)
    assert d.cosine == pytest.approx(1.0, abs=1e-12)
    assert d.distance == pytest.approx(0.0, abs=1e-6)
    # The same update written with other factors (B R, R^-1 A) is the same adapter.
    r = torch.randn(4, 4, generator=gen, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    refactored = {m: (torch.linalg.solve(r, a), b @ r) for m, (a, b) in x.items()}
    d = pair_diversity(x, refactored, 1.5, 1.5)
    assert d.cosine == pytest.approx(1.0, abs=1e-9) and d.distance == pytest.approx(0.0, abs=1e-6)
    # An update scaled by -1 points the other way: cosine -1, distance |2W| / |W| = 2.
    flipped = {m: (a, -b) for m, (a, b) in x.items()}
    d = pair_diversity(x, flipped)
    assert d.cosine == pytest.approx(-1.0) and d.distance == pytest.approx(2.0)


def test_zero_updates_leave_the_cosine_undefined():
    gen = torch.Generator().manual_seed(4)
    x = _adapter(gen, 4)
    zero = {m: (a, torch.zeros_like(b)) for m, (a, b) in x.items()}  # a fresh adapter: B = 0
    one = module_diversity(x["q_proj"], zero["q_proj"])
    assert math.isnan(one.cosine) and one.distance == pytest.approx(2.0) and one.norm_y == 0.0
    both = module_diversity(zero["q_proj"], zero["q_proj"])
    assert math.isnan(both.cosine) and math.isnan(both.distance)
    # One zero module is left out of the cosine's mean, not allowed to make it NaN.
    partly = dict(x)
    partly["v_proj"] = zero["v_proj"]
    d = pair_diversity(x, partly)
    assert d.n_cosine == 2 and d.cosine == pytest.approx(1.0)
    assert d.distance == pytest.approx((0.0 + 2.0 + 0.0) / 3)
    assert math.isnan(pair_diversity(zero, zero).cosine)


def test_population_matrix_is_symmetric_and_matches_the_pairs():
    gen = torch.Generator().manual_seed(5)
    members = {f"m{i}": _adapter(gen, 4) for i in range(4)}
    pop = population_diversity(members, scaling=0.5)
    assert pop.names == ["m0", "m1", "m2", "m3"]
    assert (pop.cosine == pop.cosine.T).all() and (pop.distance == pop.distance.T).all()
    assert list(pop.cosine.diagonal()) == [1.0] * 4 and list(pop.distance.diagonal()) == [0.0] * 4
    pairs = [pair_diversity(members[a], members[b], 0.5, 0.5) for a, b in
             [("m0", "m1"), ("m0", "m2"), ("m0", "m3"), ("m1", "m2"), ("m1", "m3"), ("m2", "m3")]]
    assert pop.cosine[1, 3] == pairs[4].cosine
    assert pop.mean_cosine == pytest.approx(sum(p.cosine for p in pairs) / 6)
    assert pop.mean_distance == pytest.approx(sum(p.distance for p in pairs) / 6)


def test_mismatched_layouts_are_refused():
    gen = torch.Generator().manual_seed(6)
    x = _adapter(gen, 4)
    with pytest.raises(ValueError, match="different modules"):
        pair_diversity(x, {m: x[m] for m in ("q_proj", "v_proj")})
    with pytest.raises(ValueError, match=r"A must be \(r, d_in\)"):
        module_diversity(x["q_proj"], (x["q_proj"][1], x["q_proj"][0]))
    with pytest.raises(ValueError, match="different sizes"):
        module_diversity(x["q_proj"], x["up_proj"])
    with pytest.raises(ValueError, match="two or more"):
        population_diversity({"m0": x})


def test_changes_from_a_shared_start_are_told_apart_from_the_start_itself():
    """Two members = one warm start W plus their own changes D_a, D_b, orthogonal by construction (D_a only in the
    first half of the output rows, D_b only in the second): the whole updates' cosine is dominated by W (near 1), the
    changes' cosine is exactly 0, and a member's change from itself is zero."""
    gen = torch.Generator().manual_seed(4)
    warm = _adapter(gen, 4)
    small = {m: (a, 0.05 * b) for m, (a, b) in _adapter(gen, 2).items()}
    d_a = {m: (a, torch.cat([b[: b.shape[0] // 2], torch.zeros_like(b[b.shape[0] // 2:])])) for m, (a, b) in small.items()}
    d_b = {m: (a, torch.cat([torch.zeros_like(b[: b.shape[0] // 2]), b[b.shape[0] // 2:]])) for m, (a, b) in small.items()}

    def plus(w, d):  # W + D as one adapter of rank 4 + 2
        return {m: (torch.cat([w[m][0], d[m][0]]), torch.cat([w[m][1], d[m][1]], dim=1)) for m in w}

    member_a, member_b = plus(warm, d_a), plus(warm, d_b)
    assert pair_diversity(member_a, member_b).cosine > 0.99
    since_warm = pair_diversity(change(member_a, warm), change(member_b, warm))
    assert since_warm.cosine == pytest.approx(0.0, abs=1e-9)
    # orthogonal changes: |D_a - D_b| = sqrt(|D_a|² + |D_b|²), per module
    want = []
    for m in SHAPES:
        na, nb = math.sqrt(inner(*d_a[m], *d_a[m])), math.sqrt(inner(*d_b[m], *d_b[m]))
        want.append(math.sqrt(na * na + nb * nb) / ((na + nb) / 2))
    assert since_warm.distance == pytest.approx(sum(want) / len(want), rel=1e-9)
    # the change's factors are exact: its Frobenius norm is D_a's
    for m in SHAPES:
        got = change(member_a, warm)[m]
        assert inner(*got, *got) == pytest.approx(inner(*d_a[m], *d_a[m]), rel=1e-9)
    # scalings enter as s_x B_x A_x - s_base B_base A_base: a member at scaling 2 against itself at scaling 1 is itself
    same = change(member_a, member_a, 2.0, 1.0)
    for m in SHAPES:
        assert inner(*same[m], *same[m]) == pytest.approx(inner(*member_a[m], *member_a[m]), rel=1e-9)
    with pytest.raises(ValueError, match="different modules"):
        change(member_a, {"q_proj": warm["q_proj"]})
