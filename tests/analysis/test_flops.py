"""FLOP counting against hand-computed numbers."""

from __future__ import annotations

import pytest

from populora.analysis.flops import (
    TokenCounts,
    lora_parameters,
    model_parameters,
    phase_flops,
    token_flops,
)


def test_lora_parameters_by_hand():
    # Rank 8 on q_proj (576 -> 576) and v_proj (576 -> 192) of 30 layers: 8 * (576 + 576) + 8 * (576 + 192)
    # = 9216 + 6144 = 15360 per layer, 460800 in all.
    shapes = [(576, 576), (192, 576)] * 30
    assert lora_parameters(8, shapes) == 460_800
    assert lora_parameters(1, [(3, 5)]) == 8
    with pytest.raises(ValueError, match="at least 1"):
        lora_parameters(0, shapes)
    with pytest.raises(ValueError, match="positive"):
        lora_parameters(4, [(0, 5)])


def test_token_flops_by_hand():
    n = model_parameters(1000, 24)  # 1024
    assert n == 1024
    # 2 * 1024 * (100 + 50) + 6 * 1024 * 30 = 307200 + 184320
    assert token_flops(TokenCounts(prompt=100, generated=50, trained=30), n) == 491_520
    assert token_flops(TokenCounts(), n) == 0


def test_phase_flops_separates_the_budget_from_the_phases_on_their_own_lines():
    phases = {"propose": TokenCounts(prompt=10, generated=5),  # 2 * 100 * 15 = 3000
              "train": TokenCounts(trained=4),  # 6 * 100 * 4 = 2400
              "eval": TokenCounts(prompt=7, generated=3),  # 2 * 100 * 10 = 2000
              "warm_start": TokenCounts(trained=1)}  # 600
    r = phase_flops(phases, n_params=100)
    assert r.phases == {"propose": 3000, "train": 2400, "eval": 2000, "warm_start": 600}
    assert r.total == 8000 and r.budget == 5400
    assert r.off_budget == {"eval": 2000, "warm_start": 600}


def test_each_phase_can_have_its_own_model_size():
    # Seeding runs on the bare base model (N = 1000), the step on base + adapter (N = 1024).
    r = phase_flops({"seed": TokenCounts(generated=10), "solve": TokenCounts(generated=10)},
                    n_params={"seed": model_parameters(1000), "solve": model_parameters(1000, 24)})
    assert r.phases == {"seed": 20_000, "solve": 20_480} and r.budget == 40_480
    with pytest.raises(ValueError, match="no parameter count"):
        phase_flops({"train": TokenCounts(trained=1)}, n_params={"seed": 10})


def test_counts_stay_exact_at_7b_scale():
    n = model_parameters(7_615_616_512, lora_parameters(64, [(3584, 3584)] * 28))
    tokens = TokenCounts(prompt=10**9, generated=3 * 10**9 + 1, trained=2 * 10**9 + 7)
    assert token_flops(tokens, n) == 2 * n * (4 * 10**9 + 1) + 6 * n * (2 * 10**9 + 7)


def test_negative_counts_are_refused():
    with pytest.raises(ValueError, match="negative"):
        TokenCounts(trained=-1)
    with pytest.raises(ValueError, match="negative"):
        model_parameters(-5)
