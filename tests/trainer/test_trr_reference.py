"""The TRR++ gradient (spec 5) against a straightforward implementation written here from the formula: PEFT's own
LoRA model, one rollout at a time, every logit, advantages from `statistics`. The production update (packed
micro-batches, chunked log-probabilities, activation checkpointing, several adapters in one pass) must give the
same gradient, and a flipped advantage sign or a dropped learning signal would not."""

from __future__ import annotations

import copy
import statistics
from collections import defaultdict

import pytest
import torch
from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

from populora.adapters import BatchedHost, PeftHost
from populora.lora import random_lora_weights
from populora.store import lora_config_dict
from services.trainer.trr import Rollout, TrrSettings, UpdateJob, trr_update
from tests.trainer.test_batched import TARGETS, GradRecorder

RANK, ALPHA = 4, 8.0


def _rollouts(seed: int) -> list[Rollout]:
    """Uneven rollouts of two roles and three task types, rewards on a few levels (some groups of equal rewards)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(9):
        prompt = torch.randint(0, 5000, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
        response = torch.randint(0, 5000, (int(torch.randint(1, 14, (1,), generator=g)),), generator=g).tolist()
        task_type = ("code_o", "code_i", "code_f")[i % 3]
        role = "teacher" if i < 6 else "student"
        reward = float(torch.randint(-2, 3, (1,), generator=g)) / 2
        out.append(Rollout(prompt, response, reward, task_type, role))
    return out


def reference_advantages(rollouts: list[Rollout]) -> list[float]:
    """A = (r - mean_g) / (pstdev_g + 1e-6) per (task type, role) group; 0 where a group's rewards are equal."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rollouts):
        groups[(r.task_type, r.role)].append(i)
    adv = [0.0] * len(rollouts)
    for idx in groups.values():
        rewards = [rollouts[i].reward for i in idx]
        if len(set(rewards)) > 1:
            mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
            for i in idx:
                adv[i] = (rollouts[i].reward - mean) / (std + 1e-6)
    return adv


def reference_gradient(base_model, weights: dict[str, torch.Tensor], rollouts: list[Rollout]) -> dict:
    """d/dθ of -(1/N) Σ_rollouts Σ_t A · log π(y_t | x, y_<t), θ the LoRA factors, N the response tokens: PEFT's
    LoRA model, each rollout on its own, the whole vocabulary's log-softmax. Keys as the trainer's (PEFT's saved
    keys)."""
    model = get_peft_model(copy.deepcopy(base_model), LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                                                 target_modules=TARGETS))
    set_peft_model_state_dict(model, weights)
    adv = reference_advantages(rollouts)
    n_tokens = sum(len(r.response) for r in rollouts)
    loss = 0.0
    for r, a in zip(rollouts, adv, strict=True):
        ids = torch.tensor([r.prompt + r.response])
        logits = model(input_ids=ids).logits[0].float()  # (T, V)
        logp = torch.log_softmax(logits[len(r.prompt) - 1: -1], dim=-1)  # position t predicts token t + 1
        taken = logp.gather(-1, torch.tensor(r.response)[:, None]).squeeze(-1)
        loss = loss - a * taken.sum() / n_tokens
    loss.backward()
    return {name.replace(".default", ""): p.grad for name, p in model.named_parameters() if p.requires_grad}


def _production(host, base_model, rollouts_of: list[list[Rollout]], settings: TrrSettings):
    jobs, keys = [], []
    for i, rows in enumerate(rollouts_of):
        weights = random_lora_weights(base_model, TARGETS, RANK, seed=20 + i, std=0.05)
        params = host.add(f"a{i}", weights, lora_config_dict(RANK, ALPHA, TARGETS), trainable=True)
        names = sorted(params)
        keys.append((names, weights))
        jobs.append(UpdateJob(f"a{i}", rows, [params[k] for k in names], GradRecorder([params[k] for k in names])))
    stats = trr_update(host, jobs, settings, host.device)
    return jobs, keys, stats


# packed into micro-batches of a few rows, log-probabilities 5 tokens at a time, one layer's activations kept
PRODUCTION = TrrSettings(grad_clip=1e9, micro_batch_tokens=48, logprob_chunk_tokens=5, activation_checkpointing=True)


@pytest.mark.parametrize("host_class", [BatchedHost, PeftHost])
def test_the_update_gives_the_gradient_of_the_formula(fresh_base, host_class):
    base = fresh_base().model
    rollouts_of = [_rollouts(1), _rollouts(2)]
    if host_class is PeftHost:  # PEFT's host trains one adapter a pass
        rollouts_of = rollouts_of[:1]
    jobs, keys, stats = _production(host_class(fresh_base().model, TARGETS, max_rank=8), base, rollouts_of,
                                    PRODUCTION)
    for job, (names, weights), st in zip(jobs, keys, stats, strict=True):
        expected = reference_gradient(base, weights, job.rollouts)
        assert sorted(expected) == names
        got = dict(zip(names, job.optimizer.grads, strict=True))
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in expected.values()))
        assert norm > 1e-3 and abs(st.grad_norm - float(norm)) < 1e-4 * float(norm)
        for k in names:
            # fp32 sums in another order (padding, chunks, recomputation): a few ulps of the largest entries
            assert torch.allclose(got[k], expected[k], rtol=1e-4, atol=1e-6 * float(norm)), \
                (k, float((got[k] - expected[k]).abs().max()))


def test_a_flipped_advantage_is_told_apart(fresh_base):
    """The comparison above can fail: the same update with every reward negated (the advantage's sign flipped)
    gives the opposite gradient, far outside its tolerance."""
    base = fresh_base().model
    rows = _rollouts(1)
    flipped = [Rollout(r.prompt, r.response, -r.reward, r.task_type, r.role) for r in rows]
    jobs, keys, _ = _production(BatchedHost(fresh_base().model, TARGETS, max_rank=8), base, [flipped], PRODUCTION)
    expected = reference_gradient(base, keys[0][1], rows)
    got = dict(zip(keys[0][0], jobs[0].optimizer.grads, strict=True))
    for k, g in got.items():
        assert torch.allclose(g, -expected[k], rtol=1e-4, atol=1e-6)
    assert not all(torch.allclose(g, expected[k], rtol=1e-4, atol=1e-6) for k, g in got.items())
