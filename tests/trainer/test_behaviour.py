"""The behaviour policy is the sampling policy (spec 16): what inference records when it samples at temperature T with
top-p on is log_softmax(logits / T) of the drawn token, and the trainer computes the same value for the same tokens on
the same weights; the share of draws whose nucleus left out probability mass is recorded per completion."""

from __future__ import annotations

import torch

from populora.adapters import BatchedHost
from populora.config import ALL_TARGET_MODULES
from populora.lora import random_lora_weights
from populora.store import lora_config_dict
from services.inference.backend import Request, Sampling
from services.inference.hf import HfBackend
from services.trainer.trr import Rollout, UpdateJob, collate, make_rows, response_logprobs

RANK = 8
TEMPERATURE = 0.7
# The recorded value comes from the decoding loop (a prompt pass, then one token at a time against the KV cache, the
# base's weights packed for oneDNN, eight rows in one batch); the recomputed one from the trainer's single forward
# over prompt + response (no cache, right padding, the module's own weights). Both are float32 on the same weights,
# so they differ only in summation order: measured on the tiny model at most 7.6e-6 over 192 tokens, bounded here
# with a 13x margin for other CPUs' kernels and thread counts. The temperature-1 values, what both sides computed
# before, differ from the recorded ones by up to 0.17 on the same tokens, over a thousand times the bound.
BOUND = 1e-4


def _generate(backend, ref, top_p: float, temperature: float = TEMPERATURE, logprobs: bool = True):
    requests = [Request(f"r{i}", ref, messages=[{"role": "user", "content": f"Write f(x) = x + {i}."}],
                        sampling=Sampling(temperature=temperature, top_p=top_p, max_new_tokens=24, seed=11 * i, n=2,
                                          logprobs=logprobs, ignore_eos=True)) for i in range(4)]
    return list(backend.generate(requests))


def _recomputed(fresh_base, weights, config, results, temperature: float) -> list[list[float]]:
    """log pi of every completion's tokens through the trainer's path: one micro-batch, the adapter trainable."""
    host = BatchedHost(fresh_base().model, ALL_TARGET_MODULES, max_rank=16)
    host.add("s0", weights, config, trainable=True)
    rollouts = [Rollout(res.prompt_token_ids, c.token_ids, float(k % 2), "code_o", "student", temperature=temperature)
                for res in results for k, c in enumerate(res.completions)]
    rows, _ = make_rows([UpdateJob("s0", rollouts, [], None)], 1e-6)
    mb = collate(rows, ["s0"], host.device)
    with torch.no_grad():
        logp = response_logprobs(host, mb, False)[0]
    by_ids = {tuple(row.ids): logp[sl].tolist() for row, sl in zip(mb.rows, mb.row_slices, strict=True)}
    return [by_ids[tuple(r.prompt + r.response)] for r in rollouts]


def test_recorded_logprobs_are_the_trainers_at_the_sampling_temperature(fresh_base, store):
    model = fresh_base().model
    weights = random_lora_weights(model, ALL_TARGET_MODULES, RANK, seed=3, std=0.3)  # B != 0: the adapter counts
    config = lora_config_dict(RANK, 2.0 * RANK, ALL_TARGET_MODULES)
    ref = store.save("s0", weights, config)
    results = _generate(HfBackend(fresh_base(), store, ALL_TARGET_MODULES, max_rank=16), ref, top_p=0.95)
    recorded = [c.logprobs for res in results for c in res.completions]
    assert all(len(lp) == 24 for lp in recorded)

    at_t = _recomputed(fresh_base, weights, config, results, TEMPERATURE)
    gap = max(abs(a - b) for rec, got in zip(recorded, at_t, strict=True) for a, b in zip(rec, got, strict=True))
    assert gap <= BOUND, f"recorded and recomputed log mu differ by {gap:.2e} > {BOUND:.0e}"

    at_1 = _recomputed(fresh_base, weights, config, results, 1.0)  # what both sides computed before (T = 1)
    old_gap = max(abs(a - b) for rec, got in zip(recorded, at_1, strict=True) for a, b in zip(rec, got, strict=True))
    assert old_gap > 100 * BOUND, f"temperature-1 log-probabilities would have passed too ({old_gap:.2e})"


def test_the_truncated_share_counts_draws_from_a_nucleus_that_left_out_mass(fresh_base, store):
    base = fresh_base()
    ref = store.save("s0", random_lora_weights(base.model, ALL_TARGET_MODULES, RANK, seed=3, std=0.3),
                     lora_config_dict(RANK, 2.0 * RANK, ALL_TARGET_MODULES))
    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=16)

    def shares(top_p: float, temperature: float = TEMPERATURE) -> list[float]:
        return [c.truncated_fraction for r in _generate(backend, ref, top_p, temperature, logprobs=False)
                for c in r.completions]

    whole, greedy, narrow = shares(1.0), shares(0.3, temperature=0.0), shares(0.3)
    assert whole == [0.0] * 8 and greedy == [0.0] * 8  # no nucleus, or no draw at all
    assert all(0 < f <= 1 for f in narrow), narrow
