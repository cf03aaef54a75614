"""Batched multi-adapter updates give the gradients of adapter-by-adapter updates (spec §5, populora.lora)."""

from __future__ import annotations

import torch

from populora.adapters import BatchedHost, PeftHost
from populora.lora import random_lora_weights
from populora.store import lora_config_dict
from services.trainer.trr import Rollout, TrrSettings, UpdateJob, trr_update

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class GradRecorder(torch.optim.Optimizer):
    """An 'optimizer' whose step records the (clipped) gradients and changes nothing."""

    def __init__(self, params):
        super().__init__(params, {})
        self.grads: list[torch.Tensor] = []

    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() for g in self.param_groups for p in g["params"]]


def _rollouts(seed: int, n: int = 3) -> list[Rollout]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(0, 5000, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
        response = torch.randint(0, 5000, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
        out.append(Rollout(prompt, response, float(torch.rand(1, generator=g)), ("code_o", "code_i")[i % 2],
                           "student"))
    return out


def _setup(policy, ranks, clean_base, alpha=None):
    jobs = []
    for i, rank in enumerate(ranks):
        weights = random_lora_weights(clean_base, TARGETS, rank, seed=10 + i, std=0.05)
        params = policy.add(f"s{i}", weights, lora_config_dict(rank, alpha or 2.0 * rank, TARGETS), trainable=True)
        keys = sorted(params)
        jobs.append(UpdateJob(f"s{i}", _rollouts(seed=i), [params[k] for k in keys], GradRecorder(
            [params[k] for k in keys])))
    return jobs


def _grads(jobs):
    return [job.optimizer.grads for job in jobs]


def test_batched_pass_gives_the_sequential_gradients(fresh_base):
    ranks = [4, 2, 4]
    settings = TrrSettings(grad_clip=1e9, micro_batch_tokens=4096, entropy_coef=0.01)
    peft = PeftHost(fresh_base().model, TARGETS, max_rank=8)
    seq_jobs = _setup(peft, ranks, fresh_base().model)
    seq_stats = [trr_update(peft, [job], settings, peft.device)[0] for job in seq_jobs]

    multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    bat_jobs = _setup(multi, ranks, fresh_base().model)
    bat_stats = trr_update(multi, bat_jobs, settings, multi.device)

    for seq, bat in zip(_grads(seq_jobs), _grads(bat_jobs), strict=True):
        assert len(seq) == len(bat) > 0
        for a, b in zip(seq, bat, strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()
        assert any(g.abs().sum() > 0 for g in seq)
    for s, b in zip(seq_stats, bat_stats, strict=True):
        assert abs(s.loss - b.loss) < 1e-5 and abs(s.grad_norm - b.grad_norm) < 1e-4 * s.grad_norm
        assert s.tokens == b.tokens and s.rollouts == b.rollouts


def test_a_batch_of_ranks_4_8_32_gives_each_adapter_the_gradient_it_gets_alone(fresh_base):
    """Spec 9, "Mixed ranks": members of ranks 4, 8 and 32 with one lora_alpha (each its own alpha / r) in one
    batched pass: each adapter's loss and gradients are those of its own pass alone, on the same host."""
    ranks = [4, 8, 32]
    settings = TrrSettings(grad_clip=1e9, micro_batch_tokens=4096, entropy_coef=0.01)
    multi = BatchedHost(fresh_base().model, TARGETS, max_rank=32)
    jobs = _setup(multi, ranks, fresh_base().model, alpha=16.0)
    together = trr_update(multi, jobs, settings, multi.device)
    mixed = _grads(jobs)
    for job, stats, grads in zip(jobs, together, mixed, strict=True):
        [alone] = trr_update(multi, [job], settings, multi.device)
        assert [tuple(g.shape) for g in job.optimizer.grads] == [tuple(g.shape) for g in grads]
        for a, b in zip(job.optimizer.grads, grads, strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-7), (job.adapter, (a - b).abs().max())
        assert abs(alone.loss - stats.loss) < 1e-6 and alone.tokens == stats.tokens
    assert any(g.shape[0] == 32 or g.shape[1] == 32 for g in mixed[2])  # the rank-32 factors got their gradients


def test_micro_batches_accumulate_to_the_full_batch_gradient(fresh_base):
    multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    jobs = _setup(multi, [4, 4], fresh_base().model)
    whole = TrrSettings(grad_clip=1e9, micro_batch_tokens=4096)
    trr_update(multi, jobs, whole, multi.device)
    full = _grads(jobs)
    tiny_budget = TrrSettings(grad_clip=1e9, micro_batch_tokens=24)  # one or two rows per pass
    trr_update(multi, jobs, tiny_budget, multi.device)
    for a_job, b_job in zip(full, _grads(jobs), strict=True):
        for a, b in zip(a_job, b_job, strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_each_adapter_is_clipped_on_its_own_norm(fresh_base):
    multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    jobs = _setup(multi, [4, 4], fresh_base().model)
    stats = trr_update(multi, jobs, TrrSettings(grad_clip=1e-3), multi.device)
    for job, s in zip(jobs, stats, strict=True):
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in job.optimizer.grads))
        assert s.grad_norm > 1e-3 and abs(float(norm) - 1e-3) < 1e-6


def test_ppo_epochs_start_with_the_on_policy_step_then_keep_learning(fresh_base):
    from populora.lora import random_lora_weights as weights_for

    def run(epochs):
        multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
        params = multi.add("s0", weights_for(fresh_base().model, TARGETS, 4, seed=1, std=0.05),
                           lora_config_dict(4, 8.0, TARGETS), trainable=True)
        plist = [params[k] for k in sorted(params)]
        job = UpdateJob("s0", _rollouts(seed=5, n=4), plist, torch.optim.AdamW(plist, lr=1e-3))
        stats = trr_update(multi, [job], TrrSettings(epochs=epochs, ppo_clip=0.2), multi.device)[0]
        return stats, [p.detach().clone() for p in plist]

    one, w1 = run(1)
    three, w3 = run(3)
    assert abs(one.loss - three.loss) < 1e-9 and abs(one.grad_norm - three.grad_norm) < 1e-6
    assert any(not torch.allclose(a, b) for a, b in zip(w1, w3, strict=True))  # later epochs moved further


def test_rows_with_zero_advantage_cost_no_pass_but_the_adapter_still_steps(fresh_base):
    multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    jobs = _setup(multi, [4, 4], fresh_base().model)
    for r in jobs[1].rollouts:
        r.reward = -1.0  # e.g. every proposal invalid: one group, zero variance, A = 0
    calls = []
    inner = multi.hidden_states
    multi.hidden_states = lambda adapters, *a: calls.append(list(adapters)) or inner(adapters, *a)
    stats = trr_update(multi, jobs, TrrSettings(), multi.device)
    assert calls and all("s1" not in c for c in calls)
    assert stats[1].loss == 0 and stats[1].grad_norm == 0 and stats[1].tokens > 0
    assert len(jobs[1].optimizer.grads) == len(jobs[1].params)
    assert all(torch.count_nonzero(g) == 0 for g in jobs[1].optimizer.grads)
