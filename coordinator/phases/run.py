"""What every phase reads: the run's id, configuration, services and artifact store, and its seeds."""

from __future__ import annotations

import random
from dataclasses import dataclass

from coordinator.modelsize import ModelSize, model_size
from coordinator.services import Services
from populora.config import Config
from populora.pb import common_pb2
from populora.rpc import ref_to_pb
from populora.seeds import derive_seed
from populora.store import ArtifactStore


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
