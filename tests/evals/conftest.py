"""Fixtures of the evaluation tests: a real sandbox service over the session's zygote pool, and a real inference
service over a private copy of the tiny model with a store of adapters."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from populora.config import ALL_TARGET_MODULES, load_config
from populora.lora import random_lora_weights
from populora.store import lora_config_dict

RANK = 8


@dataclass
class EvalServices:
    """What the harness needs: .inference and .sandbox (coordinator.clients.services.Services has both)."""

    inference: object
    sandbox: object


@pytest.fixture(scope="session")
def tiny_cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-run")
    return load_config(preset="cpu-tiny", overrides=[f"run.output_dir={root}"], env=False)


@pytest.fixture
def sandbox(zygote, tiny_cfg):
    from services.sandbox.service import SandboxService

    return SandboxService(zygote, tiny_cfg.tasks, tiny_cfg.sandbox)


def save_adapter(store, model, adapter_id: str, seed: int, base_model: str = "tiny", rank: int = RANK,
                 alpha: float | None = None):
    weights = random_lora_weights(model, ALL_TARGET_MODULES, rank, seed=seed, std=0.3)
    return store.save(adapter_id, weights, lora_config_dict(rank, alpha or 2.0 * rank, ALL_TARGET_MODULES,
                                                            base_model),
                      meta={"base_model": base_model, "step": seed})


@pytest.fixture
def adapters(store, tiny):
    return [save_adapter(store, tiny.model, f"run.A{i}", seed=i) for i in range(8)]


@pytest.fixture
def inference(tiny, store, one_torch_thread):
    from populora.models import BaseModel
    from services.inference.hf import HfBackend
    from services.inference.service import InferenceService

    base = BaseModel(tiny.name, copy.deepcopy(tiny.model), tiny.tokenizer, tiny.path, 0.0)
    return InferenceService(HfBackend(base, store, ALL_TARGET_MODULES, max_rank=32, max_resident=16), 32)


@pytest.fixture
def services(inference, sandbox):
    return EvalServices(inference, sandbox)
