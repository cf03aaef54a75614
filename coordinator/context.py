"""What a phase needs: the run's config, the five service clients (in-process or gRPC), the state store, the store."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from coordinator.state import StateStore
from populora.config import Config
from populora.store import ArtifactStore


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts (run seed, step, adapter id, ...): same inputs, same seed, any process."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def rng_for(*parts: object) -> random.Random:
    return random.Random(derive_seed(*parts))


@dataclass
class Clients:
    inference: object
    trainer: object
    league: object
    sandbox: object
    evolver: object


def make_clients(cfg: Config) -> Clients:
    """In-process clients over locally built services (embedded) or gRPC clients (distributed)."""
    from services.evolver.client import make_client as evolver_client
    from services.inference.client import make_client as inference_client
    from services.league.client import make_client as league_client
    from services.sandbox.client import make_client as sandbox_client
    from services.trainer.client import make_client as trainer_client

    return Clients(inference=inference_client(cfg), trainer=trainer_client(cfg), league=league_client(cfg),
                   sandbox=sandbox_client(cfg), evolver=evolver_client(cfg))


@dataclass
class RunContext:
    """Everything a phase reads; phases persist their results through `state`, keyed by (run, step, phase)."""

    run_id: str
    cfg: Config
    clients: Clients
    state: StateStore
    store: ArtifactStore
    progress: bool = True
    _cache: dict = field(default_factory=dict)

    def result(self, step: int, phase: str) -> dict:
        key = (step, phase)
        if key not in self._cache:
            got = self.state.get(self.run_id, step, phase)
            if got is None:
                raise RuntimeError(f"run {self.run_id}: phase '{phase}' of step {step} has no persisted result")
            self._cache[key] = got
        return self._cache[key]

    def maybe_result(self, step: int, phase: str) -> dict | None:
        try:
            return self.result(step, phase)
        except RuntimeError:
            return None

    def seed(self, *parts: object) -> int:
        return derive_seed(self.cfg.run.seed, self.run_id, *parts)

    def rng(self, *parts: object) -> random.Random:
        return random.Random(self.seed(*parts))
