"""An adapter moving between trainer replicas on one store (spec 17): the new owner takes it from its latest
stored version with its optimizer state, recognises an update the old owner made, and an old owner that gets it
back continues from the newer version; the result is the same as on one trainer, nothing lost or applied twice."""

from __future__ import annotations

import torch

from populora.pb import trainer_pb2
from populora.store import ArtifactStore
from tests.trainer.conftest import make_service, rollouts, update_one, update_request


def _init(svc):
    return svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="s0", role="student", seed=3)).adapter


def test_an_adapter_moving_between_replicas_ends_as_on_one_trainer(fresh_base, tmp_path):
    batches = [rollouts(offset=10 * k) for k in range(4)]

    def step(svc, ref, k):
        return update_one(svc, update_request(ref, batches[k], seed=k, step=k))

    one_store = ArtifactStore(tmp_path / "one")
    one = make_service(fresh_base, one_store, lr=1e-2)
    ref = _init(one)
    for k in range(4):
        ref = step(one, ref, k).adapter

    store = ArtifactStore(tmp_path / "two")
    a = make_service(fresh_base, store, lr=1e-2)
    b = make_service(fresh_base, store, lr=1e-2)
    v1 = _init(a)
    made = step(a, v1, 0)  # a updates, then (say) dies before its answer arrives: the update is sent to b
    again = step(b, v1, 0)
    assert again.adapter == made.adapter and again.stats.loss == made.stats.loss
    assert store.versions("s0") == [1, 2]  # not applied twice
    v3 = step(b, again.adapter, 1).adapter  # b continues from the stored version and its optimizer state
    v4 = step(a, v3, 2).adapter  # back on a, which held v2: it takes v3 from the store
    v5 = step(b, v4, 3).adapter
    assert v5.version == ref.version == 5 and store.versions("s0") == [1, 2, 3, 4, 5]
    w1, w2 = one_store.read(one_store.ref("s0", 5)).weights, store.read(store.ref("s0", 5)).weights
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    o1 = one_store.load(one_store.ref("s0", 5), with_optimizer=True)[1]
    o2 = store.load(store.ref("s0", 5), with_optimizer=True)[1]
    assert o1.keys() == o2.keys() and all(torch.equal(o1[k], o2[k]) for k in o1)


def test_a_moved_adapter_is_freed_without_being_retired(fresh_base, tmp_path):
    store = ArtifactStore(tmp_path)
    a, b = (make_service(fresh_base, store, lr=1e-2) for _ in range(2))
    v2 = update_one(a, update_request(_init(a), rollouts(), seed=0, step=1)).adapter
    assert a.DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id="s0", moved=True)).dropped
    assert "s0" not in a.pool.held  # its memory is free
    v3 = update_one(b, update_request(v2, rollouts(offset=5), seed=1, step=2)).adapter
    v4 = update_one(a, update_request(v3, rollouts(offset=9), seed=2, step=3)).adapter  # it came back to a
    assert v4.version == 4 and store.versions("s0") == [1, 2, 3, 4]


def test_a_replica_joining_between_steps_takes_its_share_and_the_old_owner_frees_it(fresh_base, tmp_path):
    """Two trainer servers on one store behind the coordinator's PlacedTrainer: the population starts on one; the
    second joins; the next update sends each adapter to its new owner, which takes it from the store, and the old
    owner frees the ones that moved."""
    from coordinator.clients.replicas import PlacedTrainer, Replicas
    from populora.placement import owner
    from populora.rpc import make_server
    from tests.trainer.conftest import trainer_config

    store = ArtifactStore(tmp_path)
    svcs = [make_service(fresh_base, store, lr=1e-2) for _ in range(2)]
    servers = [make_server([s], 0, token="t") for s in svcs]
    names = [f"127.0.0.1:{port}" for _, port, _ in servers]
    live = [names[0]]
    cfg = trainer_config()
    cfg.services.token = "t"
    trainer = PlacedTrainer(Replicas("trainer", cfg, addresses=lambda: [(n, n) for n in live]))
    try:
        ids = [f"s{i}" for i in range(8)]
        refs = {a: trainer.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=a, role="student", seed=i)).adapter
                for i, a in enumerate(ids)}
        assert set(svcs[0].pool.held) == set(ids) and not svcs[1].pool.held
        live.append(names[1])
        trainer.replicas.refresh()
        resp = trainer.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
            update_request(refs[a], rollouts(offset=i), seed=i) for i, a in enumerate(ids)]))
        assert [r.adapter.adapter_id for r in resp.results] == ids and all(r.adapter.version == 2
                                                                          for r in resp.results)
        moved = {a for a in ids if owner(a, names) == names[1]}
        assert moved and set(svcs[1].pool.held) == moved and set(svcs[0].pool.held) == set(ids) - moved
        assert all(store.versions(a) == [1, 2] for a in ids)
    finally:
        trainer.close()
        for server, _, _ in servers:
            server.stop(None)
