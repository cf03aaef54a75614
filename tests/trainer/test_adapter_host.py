"""One adapter host (populora/adapters.py) for inference and the trainer, chosen by `lora.host`."""

from __future__ import annotations

import pytest
import torch

from populora.adapters import BatchedHost, PeftHost, host_kind, make_host
from populora.config import ALL_TARGET_MODULES, load_config
from populora.lora import random_lora_weights
from populora.store import lora_config_dict
from services.trainer.service import TrainerService, trainer_host


def test_auto_resolves_per_service():
    assert host_kind("auto", "inference") == "batched"
    assert host_kind("auto", "trainer", "batched") == "batched"
    assert host_kind("auto", "trainer", "sequential") == "peft"
    assert host_kind("peft", "inference") == "peft" and host_kind("batched", "trainer", "sequential") == "batched"
    with pytest.raises(ValueError, match="lora.host is one of"):
        make_host("gathered", torch.nn.Linear(2, 2), ALL_TARGET_MODULES, 4)


def test_contradictory_settings_are_refused_by_name(fresh_base):
    cfg = load_config(overrides=["model.name=tiny", "lora.host=peft", "trainer.batch_mode=batched"], env=False)
    with pytest.raises(ValueError, match="needs lora.host=batched"):
        trainer_host("batched", fresh_base().model, cfg)
    cfg = load_config(overrides=["model.name=tiny", "lora.host=batched", "lora.dropout=0.1"], env=False)
    with pytest.raises(ValueError, match="does not apply LoRA dropout"):
        trainer_host("sequential", fresh_base().model, cfg)
    with pytest.raises(Exception, match="host"):
        load_config(overrides=["model.name=tiny", "lora.host=gathered"], env=False)


@pytest.mark.parametrize("host_cls", [BatchedHost, PeftHost])
def test_weights_that_do_not_match_their_config_leave_nothing_behind(fresh_base, host_cls):
    model = fresh_base().model
    host = host_cls(model, ALL_TARGET_MODULES, 8)
    good = random_lora_weights(model, ALL_TARGET_MODULES, 4, seed=1, std=0.05)
    bad = dict(good)
    bad.pop(sorted(bad)[0])
    with pytest.raises(ValueError, match="lacks|missing"):
        host.add("x", bad, lora_config_dict(4, 8.0, ALL_TARGET_MODULES))
    assert host.names() == []
    params = host.add("y", good, lora_config_dict(4, 8.0, ALL_TARGET_MODULES), trainable=True)
    assert set(params) == set(good) and all(p.requires_grad for p in params.values())
    frozen = host.add("z", good, lora_config_dict(4, 8.0, ALL_TARGET_MODULES))
    assert set(frozen) == set(good) and host.names() == ["y", "z"]
    host.remove("y")
    host.remove("never-added")
    assert host.names() == ["z"]


def test_both_hosts_give_the_same_logits_and_one_class_serves_both_services(fresh_base, tmp_path):
    model_b, model_p = fresh_base().model, fresh_base().model
    weights = random_lora_weights(model_b, ALL_TARGET_MODULES, 4, seed=3, std=0.05)
    config = lora_config_dict(4, 8.0, ALL_TARGET_MODULES)
    batched, peft = BatchedHost(model_b, ALL_TARGET_MODULES, 8), PeftHost(model_p, ALL_TARGET_MODULES, 8)
    for host in (batched, peft):
        host.add("a", weights, config)
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.inference_mode():
        out_b = batched.forward(["a", None], input_ids=ids).logits
        out_p = peft.forward(["a", None], input_ids=ids).logits
    assert torch.allclose(out_b, out_p, atol=1e-4)
    assert not torch.allclose(out_b[0], out_b[1])  # the adapter row differs from the base row

    from populora.store import ArtifactStore
    from tests.trainer.conftest import trainer_config

    svc = TrainerService.from_config(trainer_config("batched"), base=fresh_base(), store=ArtifactStore(tmp_path))
    assert isinstance(svc.pool.host, BatchedHost)
