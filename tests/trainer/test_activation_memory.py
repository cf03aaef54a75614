"""Activation checkpointing per decoder layer and the attention setting leave the update's gradients unchanged."""

from __future__ import annotations

import pytest
import torch

from populora.adapters import BatchedHost, PeftHost, decoder_layers
from services.trainer.trr import TrrSettings, trr_update
from tests.trainer.conftest import make_service
from tests.trainer.test_batched import TARGETS, _grads, _setup


def _layer_runs(host) -> list[int]:
    """Counts how often decoder layer 0 runs (its first norm's forward hook fires on a second run in the backward pass too)."""
    runs = [0]
    decoder_layers(host.causal_lm)[0].input_layernorm.register_forward_hook(lambda *_: runs.__setitem__(0, runs[0] + 1))
    return runs


@pytest.mark.parametrize("host_class", [BatchedHost, PeftHost])
def test_checkpointed_layers_give_the_same_gradients_and_run_twice(fresh_base, host_class):
    def run(checkpointing):
        host = host_class(fresh_base().model, TARGETS, max_rank=8)
        ranks = [4, 2] if host.trains_mixed_rows else [4]
        jobs = _setup(host, ranks, fresh_base().model)
        runs = _layer_runs(host)
        settings = TrrSettings(grad_clip=1e9, entropy_coef=0.01, activation_checkpointing=checkpointing,
                               micro_batch_tokens=32)  # several micro-batches
        stats = trr_update(host, jobs, settings, host.device)
        assert all("forward" not in vars(layer) for layer in decoder_layers(host.causal_lm))  # put back
        return stats, _grads(jobs), runs[0]

    (s_on, g_on, runs_on), (s_off, g_off, runs_off) = run(True), run(False)
    assert runs_on == 2 * runs_off > 0
    for a, b in zip(s_on, s_off, strict=True):
        assert abs(a.loss - b.loss) <= 1e-5 and abs(a.grad_norm - b.grad_norm) <= 1e-5 * max(1.0, b.grad_norm)
    for job_on, job_off in zip(g_on, g_off, strict=True):
        for a, b in zip(job_on, job_off, strict=True):
            assert (a - b).abs().max() <= 1e-5
        assert any(g.abs().sum() > 0 for g in job_on)


def test_passes_without_gradients_are_not_checkpointed(fresh_base):
    host = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    _setup(host, [4], fresh_base().model)
    runs = _layer_runs(host)
    ids = torch.tensor([[1, 2, 3]])
    with host.layer_checkpointing(), torch.no_grad():
        host.hidden_states(["s0"], ids, None)
    assert runs[0] == 1


def test_the_attention_setting_reaches_the_model_and_keeps_the_gradients(fresh_base, tmp_path):
    from populora.pb import trainer_pb2
    from populora.store import ArtifactStore
    from tests.trainer.conftest import rollouts, update_one, update_request

    results = {}
    for attention in ("sdpa", "eager"):
        svc = make_service(fresh_base, ArtifactStore(tmp_path / attention), "batched", attention=attention,
                           lr=1e-2)
        assert svc.pool.host.causal_lm.config._attn_implementation == attention
        ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="a", role="student", seed=3)).adapter
        stats = update_one(svc, update_request(ref, rollouts(4))).stats
        results[attention] = (stats, svc.pool.held["a"].optimizer.weights())
    (s1, w1), (s2, w2) = results["sdpa"], results["eager"]
    assert abs(s1.loss - s2.loss) <= 1e-5 and abs(s1.grad_norm - s2.grad_norm) <= 1e-5 * max(1.0, s2.grad_norm)
    assert s1.grad_norm > 0
    for key in w1:
        assert (w1[key] - w2[key]).abs().max() <= 1e-5


def test_the_mmap_threshold_is_set_through_glibc_and_zero_leaves_it():
    from services.trainer.service import set_mmap_threshold

    assert set_mmap_threshold(0) is False
    assert set_mmap_threshold(1024) is True  # Linux with glibc, as the trainer's images are
