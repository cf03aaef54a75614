"""Task buffers (spec 10): one FIFO per task type with a cap, seeded with the identity triplet, sampled
without replacement. Every code type has one; a math type (spec 18) has one in a run that plays it."""

from __future__ import annotations

import random
from collections import deque

from populora.config import CODE_TASK_TYPES, MATH_TASK_TYPES
from populora.tasks.triplet import Triplet, identity_triplet


class BufferSet:
    """One FIFO buffer per task type. Adding beyond `cap` drops the oldest entry (spec 10 [choice]); each
    buffer starts with the identity triplet so the first prompts have a reference."""

    def __init__(self, cap: int, seed: int = 0, task_types: list[str] | tuple[str, ...] = ()):
        """One buffer per code type, and one per math type among `task_types` (the run's)."""
        if cap < 1:
            raise ValueError(f"buffer cap must be >= 1, got {cap}")
        self.cap = cap
        self.seed = seed
        kept = CODE_TASK_TYPES + tuple(t for t in MATH_TASK_TYPES if t in task_types)
        self._buffers: dict[str, deque[Triplet]] = {t: deque([identity_triplet(t)], maxlen=cap) for t in kept}

    def _buffer(self, task_type: str) -> deque[Triplet]:
        if task_type not in self._buffers:
            raise KeyError(f"no buffer of task type {task_type!r}: this run's buffers hold {list(self._buffers)}")
        return self._buffers[task_type]

    def add(self, t: Triplet) -> None:
        self._buffer(t.task_type).append(t)

    def size(self, task_type: str) -> int:
        return len(self._buffer(task_type))

    def __len__(self) -> int:
        return sum(len(b) for b in self._buffers.values())

    def entries(self, task_type: str) -> list[Triplet]:
        return list(self._buffer(task_type))

    def sample(self, task_type: str, k: int, rng: random.Random) -> list[Triplet]:
        """k triplets drawn without replacement (k capped at the buffer's size); deterministic given rng."""
        buf = self._buffer(task_type)
        return rng.sample(list(buf), min(max(k, 0), len(buf)))

    def to_json(self) -> dict:
        return {"cap": self.cap, "seed": self.seed,
                "buffers": {t: [x.to_dict() for x in b] for t, b in self._buffers.items()}}

    @classmethod
    def from_json(cls, d: dict) -> BufferSet:
        out = cls(int(d["cap"]), int(d.get("seed", 0)))
        kept = CODE_TASK_TYPES + tuple(t for t in MATH_TASK_TYPES if t in d["buffers"])
        for t in kept:
            out._buffers[t] = deque((Triplet.from_dict(x) for x in d["buffers"].get(t, [])), maxlen=out.cap)
        return out
