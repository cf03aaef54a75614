"""Synthetic PEFT adapters for the evolver tests: small shapes, written to a real artifact store."""

from __future__ import annotations

import pytest
import torch

from populora.lora import lora_keys
from populora.store import lora_config_dict

# (module, d_in, d_out): a two-layer model with distinct shapes per projection, like a real decoder.
SMALL_MODULES = [(f"model.layers.{i}.{suffix}", d_in, d_out) for i in range(2) for suffix, d_in, d_out in [
    ("self_attn.q_proj", 24, 24), ("self_attn.k_proj", 24, 8), ("self_attn.v_proj", 24, 8),
    ("self_attn.o_proj", 24, 24), ("mlp.gate_proj", 24, 40), ("mlp.up_proj", 24, 40), ("mlp.down_proj", 40, 24)]]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_weights(rank: int, seed: int, modules=SMALL_MODULES, dtype=torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for module, d_in, d_out in modules:
        key_a, key_b = lora_keys(module)
        out[key_a] = torch.randn(rank, d_in, generator=g).to(dtype)
        out[key_b] = torch.randn(d_out, rank, generator=g).to(dtype)
    return out


def save_parent(store, adapter_id: str, rank: int = 8, seed: int = 0, alpha: float | None = None,
                modules=SMALL_MODULES, targets=TARGETS, meta=None, dtype=torch.float32, config_extra=None):
    config = lora_config_dict(rank, alpha if alpha is not None else 2.0 * rank, targets)
    config.update(config_extra or {})
    return store.save(adapter_id, random_weights(rank, seed, modules, dtype), config, meta=meta)


def delta_w(weights: dict[str, torch.Tensor], module: str) -> torch.Tensor:
    key_a, key_b = lora_keys(module)
    return weights[key_b].double() @ weights[key_a].double()


@pytest.fixture
def parents(store):
    """Two rank-8 parents P1 (better) and P2 in the store."""
    return save_parent(store, "P1", seed=1), save_parent(store, "P2", seed=2)
