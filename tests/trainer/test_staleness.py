"""The bounded-staleness objective of spec 16 in the trainer: rollouts that carry the behaviour policy's
log-probabilities are weighed by the clipped ratio r = pi_v / mu_b from the first epoch on."""

from __future__ import annotations

import math

import torch

from populora.adapters import BatchedHost
from populora.lora import random_lora_weights
from populora.store import lora_config_dict
from services.trainer.trr import (
    Rollout,
    TrrSettings,
    UpdateJob,
    collate,
    make_rows,
    ratio_stats,
    response_logprobs,
    trr_update,
)
from tests.trainer.test_batched import TARGETS, GradRecorder, _rollouts


def _policy(fresh_base):
    host = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    params = host.add("s0", random_lora_weights(fresh_base().model, TARGETS, 4, seed=1, std=0.05),
                      lora_config_dict(4, 8.0, TARGETS), trainable=True)
    return host, [params[k] for k in sorted(params)]


def _current_logprobs(host, rollouts) -> list[list[float]]:
    """log pi of every response token of each rollout under the adapter as it is (the behaviour = trained case)."""
    rows, _ = make_rows([UpdateJob("s0", rollouts, [], None)], 1e-6)
    out = []
    for row in rows:
        mb = collate([row], ["s0"], host.device)
        with torch.no_grad():
            out.append(response_logprobs(host, mb, False)[0].tolist())
    return out


def _update(host, params, rollouts):
    job = UpdateJob("s0", rollouts, params, GradRecorder(params))
    stats = trr_update(host, [job], TrrSettings(ppo_clip=0.2), host.device)[0]
    return stats, job.optimizer.grads


def _with(rollouts, logprobs):
    return [Rollout(r.prompt, r.response, r.reward, r.task_type, r.role, lp) for r, lp in zip(rollouts, logprobs,
                                                                                             strict=True)]


def test_behaviour_equal_to_the_trained_version_is_the_on_policy_update(fresh_base):
    host, params = _policy(fresh_base)
    rollouts = _rollouts(seed=5, n=4)
    plain, g_plain = _update(host, params, rollouts)
    same, g_same = _update(host, params, _with(rollouts, _current_logprobs(host, rollouts)))
    assert plain.ratio_dev == 0 and plain.clipped_fraction == 0  # no behaviour log-probs: nothing to report
    assert same.ratio_dev < 1e-4 and same.clipped_fraction == 0  # b = v: r = 1
    for a, b in zip(g_plain, g_same, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_a_stale_behaviour_is_clipped_and_reported(fresh_base):
    host, params = _policy(fresh_base)
    rollouts = _rollouts(seed=5, n=4)
    current = _current_logprobs(host, rollouts)
    # the behaviour policy gave every token e^-0.5 of the probability pi_v gives it now: r = e^0.5 = 1.65 > 1.2
    stale, grads = _update(host, params, _with(rollouts, [[x - 0.5 for x in lp] for lp in current]))
    assert math.isclose(stale.ratio_dev, math.exp(0.5) - 1, rel_tol=1e-3)
    assert 0 < stale.clipped_fraction < 1  # the tokens with A > 0 lose their gradient; those with A < 0 keep it
    assert any(g.abs().sum() > 0 for g in grads)


def test_ratio_stats_count_what_the_clip_cut():
    logp = torch.tensor([0.0, 0.0, 0.0, 0.0])
    old = torch.tensor([-0.5, -0.5, 0.5, -0.1])  # r = 1.65, 1.65, 0.61, 1.11
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    dev, cut = ratio_stats(logp, old, adv, 0.2)
    assert cut.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert torch.allclose(dev, (torch.exp(-old) - 1).abs())
