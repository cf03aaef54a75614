"""Fixtures of the inference tests: a private copy of the tiny model (the LoRA layer wraps it in place), a store
with 8 random adapters, and an `hf` backend over both."""

from __future__ import annotations

import copy

import pytest

from populora.config import ALL_TARGET_MODULES
from populora.lora import random_lora_weights
from populora.store import lora_config_dict

RANK = 8
N_ADAPTERS = 8


def save_adapter(store, model, adapter_id: str, seed: int, rank: int = RANK, alpha: float | None = None):
    weights = random_lora_weights(model, ALL_TARGET_MODULES, rank, seed=seed, std=0.3)
    return store.save(adapter_id, weights, lora_config_dict(rank, alpha or 2.0 * rank, ALL_TARGET_MODULES))


@pytest.fixture
def base(tiny):
    from populora.models import BaseModel

    return BaseModel(tiny.name, copy.deepcopy(tiny.model), tiny.tokenizer, tiny.path, 0.0)


@pytest.fixture
def adapters(store, tiny):
    return [save_adapter(store, tiny.model, f"a{i}", seed=i) for i in range(N_ADAPTERS)]


@pytest.fixture
def make_backend(base, store):
    from services.inference.hf import HfBackend

    def make(**kw):
        kw.setdefault("max_resident", 16)
        return HfBackend(base, store, ALL_TARGET_MODULES, max_rank=16, **kw)

    return make


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny model's matmuls are too small to gain from a second thread, and on a shared 2-core machine
    busy-waiting OpenMP threads make them many times slower; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
