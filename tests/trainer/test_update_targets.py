"""An update reaches the adapter it names and no other: in one UpdateBatch of several adapters (batched in one pass,
or one after the other), each adapter's new version is, bit for bit in the sequential mode and within fp32
reordering in the batched one, the version an update of that adapter alone would make; an adapter the batch does not
name keeps its weights and optimizer state."""

from __future__ import annotations

import pytest
import torch

from populora.pb import trainer_pb2
from populora.rpc import ref_from_pb
from tests.trainer.conftest import make_service, rollouts, update_one, update_request

IDS = ("t0", "s0", "s1")


def _init(svc) -> dict[str, trainer_pb2.UpdateResponse]:
    return {a: svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=a, role="student", seed=i)).adapter
            for i, a in enumerate(IDS)}


def _rows(adapter: str):
    # each adapter its own rollouts: rewards that favour other tokens, so a mix-up shows in the weights
    return rollouts(4, offset=7 * IDS.index(adapter))


def _weights(store, ref) -> dict[str, torch.Tensor]:
    version, opt = store.load(ref_from_pb(ref), with_optimizer=True)
    return {**version.weights, **{f"opt.{k}": v for k, v in opt.items()}}


@pytest.mark.parametrize("mode", ["sequential", "batched"])
def test_each_update_reaches_its_own_adapter(fresh_base, tmp_path, mode):
    from populora.store import ArtifactStore

    together = ArtifactStore(tmp_path / "together")
    svc = make_service(fresh_base, together, mode=mode, lr=1e-2)
    refs = _init(svc)
    named = ("t0", "s1")  # s0 is not in the batch
    resp = svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
        update_request(refs[a], _rows(a), seed=3, step=1) for a in named]))
    made = {ref_from_pb(r.adapter).adapter_id: r.adapter for r in resp.results}
    assert set(made) == set(named)
    assert together.versions("s0") == [1]
    for a in named:
        alone_store = ArtifactStore(tmp_path / f"alone-{a}")
        alone = make_service(fresh_base, alone_store, mode=mode, lr=1e-2)
        alone_ref = _init(alone)[a]
        expected = _weights(alone_store, update_one(alone, update_request(alone_ref, _rows(a), seed=3, step=1)).adapter)
        got = _weights(together, made[a])
        before = _weights(together, refs[a])
        assert any(not torch.equal(got[k], before[k]) for k in got), f"{a} did not move"
        for k in expected:
            if mode == "sequential":
                assert torch.equal(got[k], expected[k]), (a, k)
            else:
                assert torch.allclose(got[k], expected[k], rtol=1e-5, atol=1e-7), (a, k)
