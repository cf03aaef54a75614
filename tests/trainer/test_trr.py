"""The TRR++ math of spec §5: group advantages, micro-batch packing, the per-token objective."""

from __future__ import annotations

import torch

from services.trainer.trr import Row, group_advantages, pack, token_objective


def test_advantages_normalised_inside_each_group():
    rewards = [1.0, 0.0, 0.5, -1.0, 1.0, 0.2]
    groups = [("code_o", "student")] * 3 + [("code_i", "student")] * 2 + [("code_o", "teacher")]
    adv = group_advantages(rewards, groups, eps=1e-6)
    first = torch.tensor([1.0, 0.0, 0.5])
    expected = (first - first.mean()) / (first.std(unbiased=False) + 1e-6)
    assert torch.allclose(adv[:3], expected, atol=1e-6)
    assert adv[:3].mean().abs() < 1e-6 and adv[3:5].mean().abs() < 1e-6
    assert torch.allclose(adv[3:5], torch.tensor([-1.0, 1.0]), atol=1e-5)  # two values: +-1 std
    assert adv[5] == 0  # a group of one says nothing about which response was better


def test_zero_variance_group_gets_zero_advantage():
    adv = group_advantages([0.7, 0.7, 0.7, 1.0, 0.0], [("code_f", "student")] * 3 + [("code_i", "student")] * 2)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert torch.isfinite(adv).all()


def test_group_order_does_not_matter():
    rewards, groups = [1.0, 0.0, 3.0, 2.0], [("a", "s"), ("b", "s"), ("a", "s"), ("b", "s")]
    adv = group_advantages(rewards, groups)
    perm = [2, 3, 0, 1]
    adv_perm = group_advantages([rewards[i] for i in perm], [groups[i] for i in perm])
    assert torch.allclose(adv[perm], adv_perm)


def _row(n_prompt, n_resp, job=0):
    return Row(job, list(range(n_prompt + n_resp)), n_prompt, 1.0, 1.0)


def test_pack_respects_the_token_budget_and_keeps_every_row():
    rows = [_row(5, 5), _row(20, 10), _row(3, 1), _row(40, 24), _row(8, 8), _row(2, 2)]
    batches = pack(rows, budget=64)
    assert sorted(id(r) for b in batches for r in b) == sorted(id(r) for r in rows)
    for b in batches:
        assert len(b) * max(len(r.ids) for r in b) <= 64


def test_a_row_longer_than_the_budget_runs_alone_and_is_reported(caplog):
    long, short = _row(60, 10), _row(20, 10)
    with caplog.at_level("WARNING"):
        batches = pack([short, long, _row(10, 10)], budget=64)
    assert batches[0] == [long] and sum(len(b) for b in batches) == 3
    assert all(len(b) * max(len(r.ids) for r in b) <= 64 for b in batches[1:])
    assert "micro_batch_tokens=64" in caplog.text


def test_on_policy_objective_is_a_times_logp_and_ppo_clips():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    adv = torch.tensor([2.0, -1.0])
    obj = token_objective(logp, None, adv, clip=0.2)
    obj.sum().backward()
    assert torch.allclose(obj, adv * logp.detach()) and torch.allclose(logp.grad, adv)
    # ratio = 1 at the first epoch: the PPO objective has the same gradient as A log pi
    logp.grad = None
    token_objective(logp, logp.detach(), adv, clip=0.2).sum().backward()
    assert torch.allclose(logp.grad, adv)
    # a ratio beyond 1 + clip with A > 0 (or below 1 - clip with A < 0) stops the gradient
    logp.grad = None
    old = torch.tensor([-1.5, -1.5])  # ratios e^0.5 = 1.65 and e^-0.5 = 0.61
    token_objective(logp, old, adv, clip=0.2).sum().backward()
    assert torch.equal(logp.grad, torch.zeros(2))
