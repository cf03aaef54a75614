"""Compute accounting in FLOPs (spec 14): the prompt pass is charged, rows the update skips are not."""

from __future__ import annotations

from coordinator.run.modelsize import ModelSize
from coordinator.run.phases.accounting import budget_flops, charged_rows, seed_usage, usage
from populora.config import load_config
from populora.records import (
    Attempt,
    Checked,
    Proposal,
    Proposed,
    Rollout,
    Seeded,
    Solved,
    Updated,
    UpdateStats,
    Validated,
    WarmStarted,
)

SIZE = ModelSize(base=1000, adapter=10)  # N = 1010 with an adapter


def test_rows_of_a_group_with_equal_rewards_are_not_charged():
    rows = [Rollout("teacher", "code_o", 0.5, [1], [2]), Rollout("teacher", "code_o", 0.5, [1], [2]),
            Rollout("student", "code_o", 1.0, [1], [2]), Rollout("student", "code_o", 0.0, [1], [2])]
    assert charged_rows(rows) == rows[2:]
    assert charged_rows(rows, entropy_coef=0.001) == rows  # the entropy bonus trains every row


def test_each_adapter_is_charged_at_its_own_rank():
    """Spec 9, "Mixed ranks": N = the base's parameters plus the adapter's, r·Σ(d_in + d_out), at each adapter's own
    rank; a phase's FLOPs are its adapters'; without ranks every adapter is charged at lora.rank, as before."""
    cfg = load_config(env=False)
    size = ModelSize(base=1000, adapter=10 * 32, rank=32)  # 10 parameters per unit of rank
    assert size.with_rank(32) == size.with_adapter == 1320 and size.with_rank(8) == 1080
    t1, s1 = size.with_rank(64), size.with_rank(8)
    spent = _step(cfg, size, {"t1": 64, "s1": 8})
    assert spent.adapters["t1"].flops == 2 * t1 * 400
    assert spent.adapters["s1"].flops == 2 * s1 * 220 + 6 * s1 * 440
    assert spent.phases["propose"].flops == 2 * t1 * 400 and spent.phases["solve"].flops == 2 * s1 * 220
    assert spent.phases["update"].flops == 6 * s1 * 440
    assert spent.total.flops == sum(a.flops for a in spent.adapters.values())
    same = _step(cfg, size, {"t1": 32, "s1": 32})
    assert same == _step(cfg, size)


def _step(cfg, size=SIZE, ranks=None):
    proposals = [Proposal("p1", "code_o", "t1", "m", 0, "", [1] * 300, [2] * 100)]
    attempts = [Attempt("a1", "p1", "s1", "m", "", [1] * 200, [2] * 20)]
    batch = {"t1": [Rollout("teacher", "code_o", 0.5, [1] * 300, [2] * 100)],  # alone in its group: zero advantage
             "s1": [Rollout("student", "code_o", 1.0, [1] * 200, [2] * 20),
                    Rollout("student", "code_o", 0.0, [1] * 200, [2] * 20)]}
    updated = Updated({}, {"t1": UpdateStats(), "s1": UpdateStats()})
    return usage(Proposed(proposals), Validated({}, None, 3), Solved(attempts), Checked({}, {}, 2), batch, updated,
                 cfg, size, ranks)


def test_step_flops_charge_the_prompt_pass_at_2n_and_trained_tokens_at_6n():
    cfg = load_config(env=False)
    spent = _step(cfg)
    n = SIZE.with_adapter
    assert spent.phases["propose"].flops == 2 * n * 400
    assert spent.phases["solve"].flops == 2 * n * 220
    assert spent.phases["update"].trained_tokens == 440  # the student's two rows; the teacher's lone row skipped
    assert spent.phases["update"].flops == 6 * n * 440
    assert spent.total.flops == 2 * n * 620 + 6 * n * 440 == budget_flops(spent)
    assert spent.total.prompt_tokens == 500 and spent.total.sandbox_jobs == 5
    assert spent.adapters["t1"].trained_tokens == 0 and spent.adapters["s1"].flops == 2 * n * 220 + 6 * n * 440


def test_the_warm_start_is_counted_but_not_charged_to_the_budget():
    spent = seed_usage(WarmStarted(adapter_id="w", tokens=100), Seeded(None, 1, 1, {}, {}, generated_tokens=50),
                       SIZE)
    n = SIZE.with_adapter
    assert spent.phases["warm_start"].flops == 6 * n * 100
    assert spent.total.flops == 6 * n * 100 + 2 * n * 50
    assert budget_flops(spent) == 2 * n * 50
    bare = seed_usage(WarmStarted(), Seeded(None, 1, 1, {}, {}, generated_tokens=50), SIZE)
    assert bare.phases["seeding"].flops == 2 * SIZE.base * 50  # the bare base model: no adapter's parameters
