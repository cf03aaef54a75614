"""Selection for evolutionary replacement: the worst ceil(gamma*N) of a sub-population and parents (spec 8)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Member:
    """An active member of a sub-population with its conservative skill mu - k*sigma."""

    adapter_id: str
    conservative_skill: float


@dataclass
class ReplacementPlan:
    """Retire `retire_id`; its child is made from `parent_ids` (better first; one parent means mutation only)."""

    role: str
    retire_id: str
    parent_ids: list[str] = field(default_factory=list)


def rank(members: Sequence[Member]) -> list[Member]:
    """Best first by conservative skill; ties broken by id so the order is deterministic."""
    return sorted(members, key=lambda m: (-m.conservative_skill, m.adapter_id))


def n_to_replace(n: int, gamma: float) -> int:
    """ceil(gamma*N), but always leaving at least one survivor to be a parent (spec 8: at N=4, gamma=0.25, one)."""
    # A tiny epsilon keeps float error (0.25*4 = 1.0000000001) from rounding up an exact product.
    return max(0, min(math.ceil(gamma * n - 1e-9), n - 1))


def tournament(pool: Sequence[Member], size: int, rng: random.Random) -> Member:
    """The best of `size` members drawn without replacement from `pool`."""
    entrants = rng.sample(list(pool), min(size, len(pool)))
    return rank(entrants)[0]


def choose_parents(top_half: Sequence[Member], tournament_size: int, rng: random.Random) -> list[str]:
    """Two distinct parents by two tournaments on the survivors' top half, better first (one if only one)."""
    first = tournament(top_half, tournament_size, rng)
    rest = [m for m in top_half if m.adapter_id != first.adapter_id]
    if not rest:
        return [first.adapter_id]
    second = tournament(rest, tournament_size, rng)
    return [m.adapter_id for m in rank([first, second])]


def select_for_replacement(role: str, members: Sequence[Member], gamma: float, tournament_size: int,
                           rng: random.Random) -> list[ReplacementPlan]:
    """Rank by mu - k*sigma, retire the worst ceil(gamma*N), draw parents from the survivors' top half (spec 8)."""
    ranked = rank(members)
    n_out = n_to_replace(len(ranked), gamma)
    if n_out == 0:
        return []
    survivors = ranked[: len(ranked) - n_out]
    top_half = survivors[: max(1, math.ceil(len(survivors) / 2))]
    worst_first = list(reversed(ranked[len(survivors):]))
    return [ReplacementPlan(role, m.adapter_id, choose_parents(top_half, tournament_size, rng))
            for m in worst_first]
