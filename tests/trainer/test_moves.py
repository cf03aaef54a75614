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
