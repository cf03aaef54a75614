"""Equal-compute checkpoints (spec 14): where each arm stands when both have spent the same compute."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
# A step whose cumulative compute exceeds the checkpoint by at most this fraction of it still counts as not past:
# compute summed step by step in floating point can land a hair above a budget it was sized to meet exactly.
REL_TOL = 1e-12


@dataclass(frozen=True)
class ArmAtCheckpoint:
    """One arm's last step not past a checkpoint; all None when even its first step is past it."""

    step: int | None
    flops: float | None  # that step's cumulative compute
    gap: float | None  # checkpoint minus that compute: what the arm had left unspent (>= 0 up to REL_TOL)


@dataclass(frozen=True)
class Checkpoint:
    """The arms at one compute checkpoint (fraction x budget)."""

    fraction: float
    flops: float
    arms: dict[str, ArmAtCheckpoint]

    def difference(self, arm: str, other: str) -> float | None:
        """Compute of `arm` minus that of `other` at their states here; None when either has none."""
        a, b = self.arms[arm].flops, self.arms[other].flops
        return None if a is None or b is None else a - b

    @property
    def spread(self) -> float | None:
        """Largest minus smallest compute among the arms here (with two arms, their absolute difference); None
        when an arm has no state at this checkpoint."""
        values = [a.flops for a in self.arms.values()]
        if not values or any(v is None for v in values):
            return None
        return max(values) - min(values)


def _validated(arm: str, steps: Sequence[tuple[int, float]]) -> tuple[list[int], list[float]]:
    numbers = [int(s) for s, _ in steps]
    flops = [float(f) for _, f in steps]
    for i in range(len(steps)):
        if not math.isfinite(flops[i]) or flops[i] < 0:
            raise ValueError(f"arm {arm!r}, step {numbers[i]}: cumulative compute {flops[i]} is not a finite "
                             "number >= 0")
        if i and numbers[i] <= numbers[i - 1]:
            raise ValueError(f"arm {arm!r}: steps must increase, got {numbers[i - 1]} then {numbers[i]}")
        if i and flops[i] < flops[i - 1]:
            raise ValueError(f"arm {arm!r}: compute must be cumulative (never decrease), got {flops[i - 1]} at "
                             f"step {numbers[i - 1]} then {flops[i]} at step {numbers[i]}")
    return numbers, flops


def equal_compute_checkpoints(arms: Mapping[str, Sequence[tuple[int, float]]], budget: float,
                              fractions: Sequence[float] = DEFAULT_FRACTIONS) -> list[Checkpoint]:
    """Each arm's last state not past each compute checkpoint, and the gap (spec 14).

    `arms[name]` lists that arm's steps as (step, cumulative FLOPs after the step), in step order. A checkpoint is
    fraction x budget; at each, every arm is represented by its last step whose cumulative compute is not past the
    checkpoint (equal counts as not past), and the gap is the checkpoint minus that step's compute. The paper's
    "compute-matched" means exactly this: compare the arms where they have spent the same compute, never the same
    step number, and report how far short of the checkpoint each one's state lies, since one arm's steps are
    larger than the other's. An arm whose first step is already past a checkpoint has no state there: step, flops
    and gap are all None (include a step 0 at compute 0 to represent the starting adapters instead).
    """
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"the compute budget must be a positive number of FLOPs, got {budget}")
    for f in fractions:
        if not 0.0 < f <= 1.0:
            raise ValueError(f"a checkpoint fraction must lie in (0, 1], got {f}")
    validated = {arm: _validated(arm, steps) for arm, steps in arms.items()}
    out = []
    for f in fractions:
        at = f * budget
        states = {}
        for arm, (numbers, flops) in validated.items():
            i = bisect.bisect_right(flops, at * (1.0 + REL_TOL)) - 1  # last index with compute <= checkpoint
            states[arm] = (ArmAtCheckpoint(step=numbers[i], flops=flops[i], gap=at - flops[i]) if i >= 0
                           else ArmAtCheckpoint(step=None, flops=None, gap=None))
        out.append(Checkpoint(fraction=f, flops=at, arms=states))
    return out
