"""The memory of an update: the memory settings lower its peak where the logits dominate, the memory model
(services/trainer/memory.py) predicts the peak it measures, and trainer.memory_limit_mb splits a micro-batch
predicted over it (the same update) or refuses a rollout that cannot fit (nothing changes).

The peaks come from bench.trainer's probe (run by bench.trainer_memory.run_probe): one update through the trainer service in a fresh process, whose peak
resident set (VmHWM, reset just before) is compared with the resident set just before the update."""

from __future__ import annotations

import argparse
import copy
import logging

import grpc
import pytest
import torch

from populora.adapters import peft_init_weights
from populora.config import TrainerConfig
from populora.pb import trainer_pb2
from populora.rpc import ServiceError
from populora.store import lora_config_dict
from services.trainer import memory
from services.trainer.service import trr_settings
from services.trainer.trr import TrrSettings
from tests.trainer.conftest import make_service, trainer_config

# One micro-batch of 4 adapters x 2 rows of 128 tokens (768 response tokens): the tiny model's 151,936-entry
# vocabulary makes the LM head's logits the largest tensors by far, so the memory settings matter there.
PRODUCTION = (1024, 2, 0.25, ())
WHOLE = (1024, 2, 0.25, ("trainer.logprob_chunk_tokens=1024", "trainer.activation_checkpointing=false"))
# rows of 1,024 tokens with 17 response tokens each, eager attention, nothing checkpointed: the decoder's saved
# activations and every layer's (t x t) attention scores weigh as much as the head
LONG_ROWS = (8192, 2, 0.984, ("trainer.attention=eager", "trainer.activation_checkpointing=false"))


@pytest.fixture(scope="module")
def probes():
    from bench import trainer_memory

    args = argparse.Namespace(model="tiny", rank=4, device="cpu", threads=1)
    return {name: trainer_memory.run_probe(args, tokens, "saving", rows, prompt, overrides)
            for name, (tokens, rows, prompt, overrides) in
            {"production": PRODUCTION, "whole": WHOLE, "long_rows": LONG_ROWS}.items()}


@pytest.mark.slow
def test_the_memory_settings_lower_the_peak_where_the_logits_dominate(probes):
    on, off = probes["production"], probes["whole"]
    assert on["response_tokens"] == off["response_tokens"] == 768
    # chunks of 256 tokens' logits instead of all 768 at once: about a third; stated margin: at most half
    assert on["extra_mb"] <= 0.5 * off["extra_mb"], (on, off)
    assert on["peak_mb"] < off["peak_mb"] - 400, (on, off)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["production", "whole", "long_rows"])
def test_the_memory_model_predicts_the_peak_within_25_percent(probes, shape):
    p = probes[shape]
    assert p["extra_mb"] > 100, p  # a peak well above the noise of the resident set
    assert abs(p["predicted_extra_mb"] - p["extra_mb"]) <= 0.25 * p["extra_mb"], p


def test_the_update_settings_default_to_the_configured_ones():
    defaults, cfg = TrrSettings(), TrainerConfig()
    assert defaults.activation_checkpointing is cfg.activation_checkpointing is True
    assert defaults.logprob_chunk_tokens == cfg.logprob_chunk_tokens
    assert defaults.memory_limit_mb == cfg.memory_limit_mb == 0
    s = trr_settings(trainer_config(activation_checkpointing=False, memory_limit_mb=300, logprob_chunk_tokens=64))
    assert (s.activation_checkpointing, s.memory_limit_mb, s.logprob_chunk_tokens) == (False, 300, 64)


def test_lora_sizes_from_rank_and_targets_and_the_base_size(tiny):
    model = memory.ModelShape.of(tiny.model)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    weights = peft_init_weights(tiny.model, targets, 8, seed=0)
    fresh = memory.AdapterShape.fresh(model, 8, targets)
    held = memory.AdapterShape.of(list(weights.values()), model.layers, moments=True)
    assert fresh == held and fresh.params == sum(w.numel() for w in weights.values())
    assert fresh.rank_per_layer == 8 * 7
    # tied embeddings: the (vocabulary x hidden) matrix counts once (parameters() yields it once too)
    buffers = sum(b.nbytes for b in tiny.model.buffers())
    assert memory.base_bytes(tiny.model) == 4 * sum(p.numel() for p in tiny.model.parameters()) + buffers


def test_adapters_of_mixed_ranks_are_each_counted_at_their_own_rank(tiny):
    """Spec 9, "Mixed ranks": each adapter's parameters, snapshot and gradients at its own rank (64 included, above
    the tiny model's 32-wide key projection); a pass's activations at the largest rank."""
    from populora.adapters import BatchedHost

    model = memory.ModelShape.of(tiny.model)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    host = BatchedHost(copy.deepcopy(tiny.model), targets, max_rank=64)
    shapes = []
    for rank in (4, 8, 64):
        params = host.add(f"r{rank}", peft_init_weights(tiny.model, targets, rank, seed=rank),
                          lora_config_dict(rank, 16.0, targets), trainable=True)
        held = memory.AdapterShape.of(list(params.values()), model.layers, moments=True)
        assert held == memory.AdapterShape.fresh(model, rank, targets), rank
        shapes.append(held)
    assert [s.rank_per_layer for s in shapes] == [4 * 7, 8 * 7, 64 * 7]
    assert memory.snapshot_bytes(shapes) == sum(memory.snapshot_bytes([s]) for s in shapes)
    mixed = memory.update_bytes(model, shapes, [(4, 64, 128)], 256, True, False, True)
    largest = memory.update_bytes(model, [shapes[2]] * 3, [(4, 64, 128)], 256, True, False, True)
    assert memory.update_bytes(model, shapes[:2], [(4, 64, 128)], 256, True, False, True) < mixed < largest


def _rollouts(n: int, prompt: int, response: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [trainer_pb2.Rollout(prompt_token_ids=torch.randint(5, 1000, (prompt,), generator=gen).tolist(),
                                response_token_ids=torch.randint(5, 1000, (response,), generator=gen).tolist(),
                                reward=float(i % 2), task_type="code_o", role="student") for i in range(n)]


def _update(fresh_base, root, limit: int, rows: dict[str, list]):
    from populora.store import ArtifactStore

    svc = make_service(fresh_base, ArtifactStore(root), "batched", lr=1e-2, memory_limit_mb=limit)
    refs = [svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=a, role="student", seed=i)).adapter
            for i, a in enumerate(rows)]
    req = trainer_pb2.UpdateBatchRequest(updates=[trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows[ref.adapter_id],
                                                                            step=1) for ref in refs])
    return svc, req


def _predicted_mb(svc, rows: int, width: int, response: int) -> float:
    held = list(svc.pool.held.values())
    model = memory.ModelShape.of(svc.pool.host.causal_lm)
    adapters = [memory.AdapterShape.of(list(h.params.values()), model.layers, False) for h in held]
    s = svc.pool.trr
    return memory.update_bytes(model, adapters, [(rows, width, response)], s.logprob_chunk_tokens,
                               s.activation_checkpointing, False, True) / memory.MB


def test_a_micro_batch_over_the_limit_is_split_and_gives_the_same_update(fresh_base, tmp_path, caplog):
    rows = {"a": _rollouts(4, 16, 48, seed=1), "b": _rollouts(4, 16, 48, seed=2)}
    whole, req = _update(fresh_base, tmp_path / "whole", 0, rows)
    one_pass, one_row = _predicted_mb(whole, 8, 64, 8 * 48), _predicted_mb(whole, 1, 64, 48)
    limit = int((one_pass + one_row) / 2)  # the 8 rows do not fit in one pass; 1 to 4 of them do
    assert one_row < limit < one_pass
    split, req_split = _update(fresh_base, tmp_path / "split", limit, rows)
    expected = whole.UpdateBatch(req).results
    with caplog.at_level(logging.INFO, logger="services.trainer.trr"):
        got = split.UpdateBatch(req_split).results
    assert any("over trainer.memory_limit_mb" in r.getMessage() and "split into" in r.getMessage()
               for r in caplog.records)
    for a, b in zip(expected, got, strict=True):
        assert b.adapter.version == a.adapter.version == 2
        assert abs(a.stats.loss - b.stats.loss) <= 1e-5 and abs(a.stats.grad_norm - b.stats.grad_norm) <= 1e-5
        assert a.stats.grad_norm > 0
    for adapter_id in rows:
        w1, w2 = (svc.pool.held[adapter_id].optimizer.weights() for svc in (whole, split))
        for key in w1:
            # Adam's first step is about lr * g / (|g| + eps) = 1e-2 per entry: the sum's rounding in another order
            # moves entries whose gradient is near eps by up to about 1e-6; 1e-5 is a thousandth of the step
            assert torch.allclose(w1[key], w2[key], rtol=0, atol=1e-5), key


def test_a_rollout_that_cannot_fit_alone_is_refused_and_nothing_changes(fresh_base, tmp_path):
    rows = {"a": _rollouts(4, 16, 48, seed=1)}
    svc, req = _update(fresh_base, tmp_path, 1, rows)  # 1 MiB: under one row's 48 logits x 151,936 entries
    before = {k: w.clone() for k, w in svc.pool.held["a"].optimizer.weights().items()}
    with pytest.raises(ServiceError) as e:
        svc.UpdateBatch(req)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    message = e.value.message
    assert "a rollout of 64 tokens (48 of them response)" in message and "trainer.memory_limit_mb=1 " in message
    assert f"needs {_predicted_mb(svc, 1, 64, 48):.0f} MiB" in message
    held = svc.pool.held["a"]
    assert held.version == 1 and held.updates == 0 and svc.pool.store.versions("a") == [1]
    assert not held.optimizer.flat_state()
    for key, w in held.optimizer.weights().items():
        assert torch.equal(w, before[key]), key
