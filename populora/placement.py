"""Which replica of a placed service (trainer, inference) holds an adapter: rendezvous hashing (spec 17).

The owner of an adapter is the replica with the highest blake2b score of (adapter id, replica name), so placement
is a pure function of the adapter id and the set of live replicas: every process that knows the replicas agrees on
it without talking to the others, and a change of the set moves only the adapters it must (the ones a new replica
now wins, or the ones a removed replica held). Python's own `hash` is salted per process and would give each
process its own placement, so it is never used here.
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
    return max(replicas, key=lambda r: (score(key, r), _reverse(r)))


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
