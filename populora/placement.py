"""Which replica of a placed service (trainer, inference) holds an adapter: rendezvous hashing (spec 17).

The owner of an adapter is the replica with the highest blake2b score of (adapter id, replica name), so placement
is a pure function of the adapter id and the set of live replicas: every process that knows the replicas agrees on
it without talking to the others, and a change of the set moves only the adapters it must (the ones a new replica
now wins, or the ones a removed replica held). Python's own `hash` is salted per process and would give each
process its own placement, so it is never used here.

A trainer replica must be an adapter's owner (it holds the optimizer state). An inference replica only reads the
adapter from the store, so one batch may be balanced (`balanced`): each adapter's requests stay together, on its
owner while the owner's share of the batch is not over an even share, else on its next replica in rendezvous order
that has room. With few adapters, pure ownership is uneven (8 adapters on 2 replicas split 4/4 only 27% of the
time) and a batch waits for its largest part.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence


def score(key: str, replica: str) -> int:
    """The 64-bit rendezvous score of `key` on `replica` (the same in every process and on every machine)."""
    digest = hashlib.blake2b(f"{key}\x00{replica}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(key: str, replicas: Sequence[str]) -> str:
    """The replica that owns `key` (an adapter id): the highest score, ties (never seen with 64 bits) to the
    smaller name so the answer does not depend on the order `replicas` are listed in."""
    if not replicas:
        raise ValueError(f"no replica to place '{key}' on")
    return max(replicas, key=lambda r: _preference(key, r))


def ranking(key: str, replicas: Sequence[str]) -> list[str]:
    """The replicas in `key`'s order of preference: its owner first, then the owner if that one were gone, ..."""
    return sorted(replicas, key=lambda r: _preference(key, r), reverse=True)


def _preference(key: str, replica: str) -> tuple[int, tuple[int, ...]]:
    return score(key, replica), _reverse(replica)


def balanced(weights: dict[str, float], replicas: Sequence[str]) -> dict[str, str]:
    """Each key's replica for one batch, `weights[key]` its work: the largest keys first, each on the first replica
    in its `ranking` whose load stays within an even share (the total over the replicas, or the key's own weight
    where one key is larger), else on the least-loaded replica. A pure function of the weights and the replica set;
    a key stays on its owner whenever the owners' split is already even."""
    if not replicas:
        raise ValueError("no replica to place the batch on")
    share = sum(weights.values()) / len(replicas)
    load = dict.fromkeys(replicas, 0.0)
    out: dict[str, str] = {}
    for key in sorted(weights, key=lambda k: (-weights[k], k)):
        order = ranking(key, replicas)
        room = [r for r in order if load[r] + weights[key] <= max(share, weights[key]) * (1 + 1e-9)]
        chosen = room[0] if room else min(order, key=lambda r: load[r])
        load[chosen] += weights[key]
        out[key] = chosen
    return out


def _reverse(name: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in name)


def assign(keys: Iterable[str], replicas: Sequence[str]) -> dict[str, list[str]]:
    """The keys each replica owns, in the order the keys were given (replicas that own none are left out)."""
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(owner(key, replicas), []).append(key)
    return out


def moves(keys: Iterable[str], before: Sequence[str], after: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The keys whose owner changes when the replica set goes from `before` to `after`: key -> (old, new).
    Only keys won by an added replica, or held by a removed one, move."""
    out = {}
    for key in keys:
        old, new = owner(key, before), owner(key, after)
        if old != new:
            out[key] = (old, new)
    return out
