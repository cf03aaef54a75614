"""What every phase reads: the run's id, configuration, services and artifact store, and its seeds."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.clients.services import Services
from coordinator.run.modelsize import ModelSize, model_size
from populora.config import Config
from populora.pb import common_pb2
from populora.rpc import ref_to_pb
from populora.seeds import derive_seed
from populora.store import ArtifactStore


class _StoreRanks(dict):
    """Adapter id -> rank, each read once from its adapter_config.json (ArtifactStore.rank)."""

    def __init__(self, store: ArtifactStore):
        super().__init__()
        self.store = store

    def __missing__(self, adapter_id: str) -> int:
        self[adapter_id] = rank = self.store.rank(adapter_id)
        return rank


@dataclass
class Run:
    """What every phase reads: the run's id and configuration, the services, the artifact store."""

    run_id: str
    cfg: Config
    services: Services
    store: ArtifactStore
    progress: bool = False

    @property
    def size(self) -> ModelSize:
        """N of spec 14 (the base model's parameters and an adapter's), for charging compute."""
        return model_size(self.cfg)

    def ranks(self) -> Mapping[str, int] | None:
        """Each adapter's rank, read from the store as it is asked for (spec 9, "Mixed ranks"); None in a run of one
        rank, where every adapter has lora.rank."""
        return _StoreRanks(self.store) if len(self.cfg.ranks) > 1 else None

    def seed(self, *parts: object) -> int:
        """A seed for one random choice of this run: same parts, same seed, in any process (resume-safe)."""
        return derive_seed(self.cfg.run.seed, self.run_id, *parts)

    def rng(self, *parts: object) -> random.Random:
        return random.Random(self.seed(*parts))

    def ref(self, adapter_id: str, version: int) -> common_pb2.AdapterRef:
        return ref_to_pb(self.store.ref(adapter_id, version))

    def evaluates(self, step: int) -> bool:
        """The population is scored on the held-out benchmark every eval.every steps, step 0 included (0 = never)."""
        return self.cfg.eval.every > 0 and step % self.cfg.eval.every == 0

    def evolves(self, step: int) -> bool:
        """Evolution replaces members every k steps, in population mode only (spec 8)."""
        return self.cfg.run.mode == "population" and step % self.cfg.evolution.every_k == 0
