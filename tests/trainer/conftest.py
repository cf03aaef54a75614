"""Trainer test helpers: private copies of the tiny base (the trainer injects LoRA layers into its base), configs,
and rollout builders."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from populora.config import load_config
from populora.pb import trainer_pb2


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every trainer test runs with one torch thread (tests/conftest.py)."""


@pytest.fixture
def fresh_base(tiny):
    """A deep copy of the session's tiny base, so injected LoRA layers never leak into other tests."""

    def make():
        return dataclasses.replace(tiny, model=copy.deepcopy(tiny.model))

    return make


def trainer_config(mode: str = "sequential", **trainer):
    overrides = ["model.name=tiny", "lora.rank=4", "lora.alpha=8", f"trainer.batch_mode={mode}"]
    overrides += [f"trainer.{k}={v}" for k, v in trainer.items()]
    return load_config(overrides=overrides, env=False)


def make_service(fresh_base, store, mode: str = "sequential", **trainer):
    from services.trainer.service import TrainerService

    return TrainerService.from_config(trainer_config(mode, **trainer), base=fresh_base(), store=store)


def rollouts(n: int = 4, role: str = "student", task_type: str = "code_o", offset: int = 0):
    """n rollouts with distinct responses and rewards 0/1 alternating (so advantages are nonzero)."""
    return [trainer_pb2.Rollout(prompt_token_ids=[10, 11, 12 + i], response_token_ids=[100 + i + offset, 200, 300 + i],
                                reward=float(i % 2), task_type=task_type, role=role) for i in range(n)]


def update_request(ref, rows, seed: int = 0, step: int = 1):
    return trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows, seed=seed, step=step)


def update_one(svc, request):
    """One adapter's TRR++ step through the trainer's UpdateBatch RPC."""
    return svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[request])).results[0]
