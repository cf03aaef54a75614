"""Rendezvous placement (spec 17): the same in every process, balanced, and moving only what a change must move."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from populora.placement import assign, balanced, moves, owner, ranking, score

IDS = [f"run.{r}{i}" for r in "TS" for i in range(500)]


def test_owner_is_deterministic_and_independent_of_listing_order():
    replicas = ["10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"]
    first = {a: owner(a, replicas) for a in IDS}
    assert first == {a: owner(a, list(reversed(replicas))) for a in IDS}
    # another interpreter (its own hash salt) places every adapter the same
    code = ("from populora.placement import owner; import sys; "
            f"print(','.join(owner(a, {replicas!r}) for a in {IDS[:50]!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PYTHONPATH": "."}).stdout.strip()
    assert out.split(",") == [first[a] for a in IDS[:50]]
    assert score("a", "b") == score("a", "b") and 0 <= score("a", "b") < 2**64


def test_balance():
    replicas = [f"trainer-{i}" for i in range(4)]
    counts = Counter(owner(a, replicas) for a in IDS)
    assert set(counts) == set(replicas)
    assert all(abs(c - len(IDS) / 4) < 0.15 * len(IDS) / 4 for c in counts.values()), counts


def test_adding_a_replica_moves_only_what_it_wins():
    two, three = ["a", "b"], ["a", "b", "c"]
    moved = moves(IDS, two, three)
    assert all(new == "c" for _old, new in moved.values())  # nothing moves between the old replicas
    assert 0.25 < len(moved) / len(IDS) < 0.42  # about 1/3
    assert moved.keys() == {a for a in IDS if owner(a, three) == "c"}  # exactly what the new one wins


def test_removing_a_replica_moves_only_its_own():
    three, two = ["a", "b", "c"], ["a", "c"]
    moved = moves(IDS, three, two)
    assert moved.keys() == {a for a in IDS if owner(a, three) == "b"}
    assert all(old == "b" for old, _new in moved.values())


def test_assign_keeps_order_and_covers_every_key():
    placed = assign(IDS, ["x", "y"])
    assert sorted(k for ks in placed.values() for k in ks) == sorted(IDS)
    for ks in placed.values():
        assert ks == [a for a in IDS if a in set(ks)]
    assert assign(IDS, ["only"]) == {"only": IDS}


def test_no_replicas_is_an_error():
    with pytest.raises(ValueError, match="no replica"):
        owner("x", [])


def test_ranking_starts_with_the_owner_and_is_the_owner_as_replicas_go():
    replicas = ["a", "b", "c", "d"]
    for key in IDS[:100]:
        order = ranking(key, replicas)
        assert sorted(order) == replicas and order[0] == owner(key, replicas)
        assert order[1] == owner(key, [r for r in replicas if r != order[0]])


def test_a_balanced_batch_is_even_and_keeps_owners_where_it_can():
    replicas = ["inference-0", "inference-1"]
    for start in range(0, 400, 8):  # many populations of 8 equal adapters: owners alone split them unevenly
        keys = IDS[start:start + 8]
        where = balanced(dict.fromkeys(keys, 96.0), replicas)
        assert sorted(where) == sorted(keys) and Counter(where.values()) == {r: 4 for r in replicas}
        owned = Counter(owner(k, replicas) for k in keys)
        kept = sum(where[k] == owner(k, replicas) for k in keys)
        assert kept == 8 - abs(owned[replicas[0]] - 4)  # only the owner's surplus moves
    # an even split by owner is left as it is; the same weights give the same answer in any order
    even = [k for k in IDS if owner(k, replicas) == replicas[0]][:3] + [k for k in IDS if owner(k, replicas)
                                                                          == replicas[1]][:3]
    assert balanced(dict.fromkeys(even, 1.0), replicas) == {k: owner(k, replicas) for k in even}
    weights = {k: float(i % 5 + 1) for i, k in enumerate(IDS[:40])}
    assert balanced(weights, replicas) == balanced(dict(reversed(list(weights.items()))), list(reversed(replicas)))


def test_a_balanced_batch_with_uneven_work_waits_for_no_more_than_its_largest_key():
    weights = {"big": 10.0, **{f"s{i}": 1.0 for i in range(10)}}
    where = balanced(weights, ["a", "b", "c"])
    load = Counter()
    for k, r in where.items():
        load[r] += weights[k]
    assert max(load.values()) == 10.0  # the big key alone; the small ones share the others
    assert balanced({}, ["a"]) == {}
    with pytest.raises(ValueError, match="no replica"):
        balanced({"x": 1.0}, [])
