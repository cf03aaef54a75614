"""The coordinator's view of placed replicas: naming them, splitting a batch by owner and merging it in order, and
sending a lost replica's part to the adapters' new owners."""

from __future__ import annotations

import grpc
import pytest

from coordinator.clients.replicas import Replicas, replica_addresses, resolve
from coordinator.clients.services import open_services
from populora.config import ConfigError, load_config
from populora.placement import owner
from populora.ports import free_port
from populora.rpc import Remote, ServiceError

IDS = [f"run.{r}{i}" for r in "TS" for i in range(12)]


def _cfg(*over: str):
    return load_config(preset="cpu-tiny", env=False, overrides=["outage.wait_s=0", *over])


def _replicas(names: list[str]) -> Replicas:
    return Replicas("trainer", _cfg(), addresses=lambda: [(n, n) for n in names])


def test_endpoints_name_the_replicas():
    cfg = _cfg("services.trainer.replicas=[127.0.0.1:7001, 127.0.0.1:7002]")
    assert replica_addresses(cfg.services.trainer) == [("127.0.0.1:7001",) * 2, ("127.0.0.1:7002",) * 2]
    assert replica_addresses(cfg.services.inference) == [("127.0.0.1:50051",) * 2]  # one endpoint: as before
    (name, address), = resolve("localhost", 7003)
    assert address == "127.0.0.1:7003" and name.endswith(":7003")
    with pytest.raises(ServiceError, match="does not resolve"):
        resolve("no-such-host.invalid", 1)
    for bad in ("services.trainer.replicas=[127.0.0.1]", "services.evolver.replicas=[127.0.0.1:1]",
                "services.inference.replicas=[a:1, a:1]"):
        with pytest.raises(ConfigError):
            _cfg(bad)


def test_one_endpoint_is_a_plain_remote_and_several_are_placed():
    from coordinator.clients.replicas import PlacedInference, PlacedTrainer

    plain = open_services(_cfg("run.deployment=distributed"))
    placed = open_services(_cfg("run.deployment=distributed", "services.trainer.replicas=[127.0.0.1:7001,"
                                "127.0.0.1:7002]", "services.inference.resolve=true", "services.inference.host=localhost"))
    try:
        assert isinstance(plain.trainer, Remote) and isinstance(plain.inference, Remote)
        assert isinstance(placed.trainer, PlacedTrainer) and isinstance(placed.inference, PlacedInference)
    finally:
        plain.close()
        placed.close()


def test_a_batch_is_split_by_owner_and_merged_in_order():
    names = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    replicas = _replicas(names)
    seen: dict[str, list[str]] = {}

    def call(remote, part):
        seen[remote.address] = part
        return [f"{a}@{remote.address}" for a in part]

    out = replicas.scatter(IDS, lambda a: a, call)
    assert out == [f"{a}@{owner(a, names)}" for a in IDS]
    assert set(seen) == set(names) and all(owner(a, names) == n for n, part in seen.items() for a in part)
    replicas.close()


def test_a_lost_replicas_part_goes_to_the_new_owners():
    names = [f"127.0.0.1:{free_port()}" for _ in range(2)]  # nothing listens: a probe finds no one
    dead = names[0]
    replicas = _replicas(names)
    calls: list[tuple[str, list[str]]] = []

    def call(remote, part):
        calls.append((remote.address, part))
        if remote.address == dead:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "connection refused")
        return [f"{a}@{remote.address}" for a in part]

    out = replicas.scatter(IDS, lambda a: a, call)
    assert out == [f"{a}@{names[1]}" for a in IDS]  # every item once, in order, from the live replica
    assert replicas.dead == {dead} and replicas.live() == [names[1]]
    moved = [a for a in IDS if owner(a, names) == dead]
    assert (names[1], moved) in calls  # the lost part, sent again
    # an error that is not a lost replica is the caller's
    with pytest.raises(ServiceError, match="bad"):
        replicas.scatter(IDS, lambda a: a, lambda r, p: (_ for _ in ()).throw(
            ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "bad")))
    replicas.close()


def test_no_live_replica_is_unavailable_after_the_outage_wait():
    replicas = _replicas([f"127.0.0.1:{free_port()}"])

    def call(remote, part):
        raise ServiceError(grpc.StatusCode.UNAVAILABLE, "connection refused")

    with pytest.raises(Exception, match="no trainer replica answers"):
        replicas.scatter(IDS[:2], lambda a: a, call)
    replicas.close()


def test_a_name_that_does_not_resolve_yet_waits_like_an_outage():
    cfg = _cfg("services.trainer.resolve=true", "services.trainer.host=no-such-host.invalid")
    replicas = Replicas("trainer", cfg)  # the replicas may start after the coordinator
    assert replicas.remotes == {}
    with pytest.raises(Exception, match="no trainer replica answers"):
        replicas.live()
