"""The trainer service: versions, isolation of adapters, the frozen base, rejection of bad requests, resume."""

from __future__ import annotations

import grpc
import pytest
import torch

from populora.pb import common_pb2, trainer_pb2
from populora.rpc import ServiceError
from populora.store import OPTIMIZER_STATE
from tests.trainer.conftest import make_service, rollouts, update_one, update_request


def _init(svc, adapter_id, role="student", seed=0):
    return svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=adapter_id, role=role, seed=seed)).adapter


def _weights(store, ref):
    return store.read(store.ref(ref.adapter_id, ref.version)).weights


def test_init_writes_version_1_with_b_zero_and_loads_in_peft(fresh_base, store):
    svc = make_service(fresh_base, store)
    ref = _init(svc, "s0", seed=7)
    assert (ref.adapter_id, ref.version) == ("s0", 1)
    version = store.read(store.ref("s0", 1))
    assert version.rank == 4 and version.meta["written_by"] == "trainer" and version.meta["step"] == 0
    b = [w for k, w in version.weights.items() if "lora_B" in k]
    a = [w for k, w in version.weights.items() if "lora_A" in k]
    assert b and all(torch.count_nonzero(w) == 0 for w in b)
    assert all(w.abs().max() > 0 for w in a)
    model = store.load_into_peft(fresh_base().model, store.ref("s0", 1))  # loads unchanged in PEFT
    assert "s0@v1" in model.peft_config
    # the same seed makes the same adapter
    other = make_service(fresh_base, type(store)(store.root.parent / "other"))
    _init(other, "s0", seed=7)
    for k, w in other.pool.store.read(other.pool.store.ref("s0", 1)).weights.items():
        assert torch.equal(w, version.weights[k])


@pytest.mark.parametrize("mode", ["sequential", "batched"])
def test_update_changes_only_its_adapter_and_never_the_base(fresh_base, store, mode):
    svc = make_service(fresh_base, store, mode, lr=1e-2)
    refs = [_init(svc, f"s{i}", seed=i) for i in range(3)]
    base_before = {k: v.clone() for k, v in svc.pool.host.causal_lm.state_dict().items() if "lora" not in k}
    held_before = {a: {k: p.detach().clone() for k, p in svc.pool.held[a].params.items()} for a in ("s0", "s2")}

    resp = update_one(svc, update_request(refs[1], rollouts()))
    assert (resp.adapter.adapter_id, resp.adapter.version) == ("s1", 2)
    assert resp.stats.tokens == 12 and resp.stats.rollouts == 4 and resp.stats.grad_norm > 0
    assert resp.stats.mean_abs_advantage == pytest.approx(1.0, abs=1e-4) and resp.stats.seconds > 0

    base_after = {k: v for k, v in svc.pool.host.causal_lm.state_dict().items() if "lora" not in k}
    assert base_before.keys() == base_after.keys()
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)
    assert not any(p.requires_grad for n, p in svc.pool.host.causal_lm.named_parameters() if "lora" not in n)
    for a, before in held_before.items():
        assert all(torch.equal(before[k], p) for k, p in svc.pool.held[a].params.items())
    new, old = _weights(store, resp.adapter), _weights(store, refs[1])
    assert any(not torch.equal(new[k], old[k]) for k in new)
    assert store.versions("s0") == [1] and store.versions("s1") == [1, 2]
    opt = store.load(store.ref("s1", 2), with_optimizer=True)[1]
    assert opt and all(k.rsplit(".", 1)[-1] in ("exp_avg", "exp_avg_sq", "step") for k in opt)


def test_each_rollout_trains_pi_at_its_temperature_and_the_truncated_share_is_reported(fresh_base, store):
    """Spec 16 through the RPC: the same weights and rollouts give another loss at T = 0.5 than at the default 1,
    and the update reports the share of truncated draws over its response tokens."""
    svc = make_service(fresh_base, store, "batched")
    plain, scaled = _init(svc, "s0", seed=3), _init(svc, "s1", seed=3)  # the same weights
    hot = rollouts()
    for i, r in enumerate(hot):
        r.temperature, r.truncated_fraction = 0.5, 1.0 if i == 0 else 0.0
    resp = svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[update_request(plain, rollouts()),
                                                                   update_request(scaled, hot)]))
    stats = {r.adapter.adapter_id: r.stats for r in resp.results}
    assert abs(stats["s0"].loss - stats["s1"].loss) > 1e-3
    assert stats["s0"].truncated_fraction == 0 and stats["s1"].truncated_fraction == pytest.approx(0.25)


def test_both_modes_make_the_same_update(fresh_base, tmp_path):
    from populora.store import ArtifactStore

    results = {}
    for mode in ("sequential", "batched"):
        st = ArtifactStore(tmp_path / mode)
        svc = make_service(fresh_base, st, mode, lr=1e-3)
        refs = [_init(svc, f"s{i}", seed=i) for i in range(2)]
        resp = svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
            update_request(refs[0], rollouts()), update_request(refs[1], rollouts(offset=50))]))
        assert resp.mode == mode
        results[mode] = [_weights(st, r.adapter) for r in resp.results]
    for seq, bat in zip(results["sequential"], results["batched"], strict=True):
        for k in seq:
            assert torch.allclose(seq[k], bat[k], atol=1e-6), k


def _code(fn) -> grpc.StatusCode:
    with pytest.raises(ServiceError) as err:
        fn()
    return err.value.code


def _bad(**change):
    r = rollouts(2)
    for k, v in change.items():
        if isinstance(v, list):
            getattr(r[0], k)[:] = v
        else:
            setattr(r[0], k, v)
    return r


BAD_ROLLOUTS = {
    "empty response": lambda: _bad(response_token_ids=[]),
    "empty prompt": lambda: _bad(prompt_token_ids=[]),
    "token beyond vocab": lambda: _bad(response_token_ids=[151936]),
    "negative token": lambda: _bad(prompt_token_ids=[-1, 5]),
    "unknown task type": lambda: _bad(task_type="code_x"),
    "teacher rollout for a student": lambda: _bad(role="teacher"),
    "nan reward": lambda: _bad(reward=float("nan")),
    "old_logprobs of the wrong length": lambda: _bad(old_logprobs=[-0.5]),
    "negative temperature": lambda: _bad(temperature=-0.7),
    "truncated share over 1": lambda: _bad(truncated_fraction=1.5),
    "longer than the base model's context": lambda: _bad(response_token_ids=[5] * 5000),
    "no rollouts": lambda: [],
}


@pytest.mark.parametrize("case", sorted(BAD_ROLLOUTS))
def test_bad_rollouts_are_invalid_and_change_nothing(fresh_base, store, case):
    svc = make_service(fresh_base, store, "batched", micro_batch_tokens=512)
    good, target = _init(svc, "s0"), _init(svc, "s1", seed=1)
    before = {a: {k: p.detach().clone() for k, p in svc.pool.held[a].params.items()} for a in ("s0", "s1")}
    batch = trainer_pb2.UpdateBatchRequest(updates=[update_request(good, rollouts()),
                                                    update_request(target, BAD_ROLLOUTS[case]())])
    assert _code(lambda: svc.UpdateBatch(batch)) == grpc.StatusCode.INVALID_ARGUMENT
    assert store.versions("s0") == [1] and store.versions("s1") == [1]
    for a, w in before.items():
        held = svc.pool.held[a]
        assert held.version == 1 and all(torch.equal(w[k], p) for k, p in held.params.items())
        assert not held.optimizer.state


def test_unknown_stale_and_dropped_adapters_are_failed_precondition(fresh_base, store):
    svc = make_service(fresh_base, store)
    ref = _init(svc, "s0")
    unknown = common_pb2.AdapterRef(adapter_id="nobody", version=1)
    assert _code(lambda: update_one(svc, update_request(unknown, rollouts()))) == grpc.StatusCode.FAILED_PRECONDITION
    v2 = update_one(svc, update_request(ref, rollouts())).adapter
    stale = update_request(ref, rollouts(offset=7))  # v1 again, with other rollouts
    assert _code(lambda: update_one(svc, stale)) == grpc.StatusCode.FAILED_PRECONDITION
    assert store.versions("s0") == [1, 2]
    assert svc.DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id="s0")).dropped
    assert not svc.DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id="s0")).dropped
    assert _code(lambda: update_one(svc, update_request(v2, rollouts()))) == grpc.StatusCode.FAILED_PRECONDITION
    assert store.versions("s0") == [1, 2]  # versions stay in the store
    assert _code(lambda: _init(svc, "s0")) == grpc.StatusCode.FAILED_PRECONDITION  # ids are never reused


def test_a_retried_update_returns_the_version_it_made(fresh_base, store):
    svc = make_service(fresh_base, store)
    ref = _init(svc, "s0")
    first = update_one(svc, update_request(ref, rollouts(), seed=3, step=5))
    again = update_one(svc, update_request(ref, rollouts(), seed=3, step=5))
    assert again.adapter == first.adapter and again.stats.loss == first.stats.loss
    assert store.versions("s0") == [1, 2]


def test_adopt_takes_an_evolver_child_with_a_fresh_optimizer(fresh_base, store):
    svc = make_service(fresh_base, store, lr=1e-2)
    v2 = update_one(svc, update_request(_init(svc, "p0"), rollouts())).adapter
    parent = store.read(store.ref("p0", v2.version))
    child = store.save("c0", {k: w * 0.5 for k, w in parent.weights.items()}, parent.config,
                       meta={"operator": "M2"})
    resp = svc.AdoptAdapter(trainer_pb2.AdoptAdapterRequest(
        adapter=common_pb2.AdapterRef(adapter_id="c0", version=child.version, uri=child.uri), role="student"))
    assert resp.adapter.version == 1 and not svc.pool.held["c0"].optimizer.state
    out = update_one(svc, update_request(resp.adapter, rollouts()))
    assert out.adapter.version == 2
    assert store.read(store.ref("c0", 2)).meta["updates"] == 1
    missing = common_pb2.AdapterRef(adapter_id="c9", version=1)
    assert _code(lambda: svc.AdoptAdapter(trainer_pb2.AdoptAdapterRequest(adapter=missing, role="student"))) \
        == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("mode", ["sequential", "batched"])
def test_a_restarted_trainer_makes_the_uninterrupted_update(fresh_base, tmp_path, mode):
    from populora.store import ArtifactStore

    batches = [rollouts(offset=10 * k) for k in range(4)]

    def run(svc, ref, ks):
        for k in ks:
            ref = update_one(svc, update_request(ref, batches[k], seed=k, step=k)).adapter
        return ref

    st_a = ArtifactStore(tmp_path / "a")
    a = make_service(fresh_base, st_a, mode, lr=1e-2)
    end_a = run(a, _init(a, "s0", seed=3), range(4))

    st_b = ArtifactStore(tmp_path / "b")
    b1 = make_service(fresh_base, st_b, mode, lr=1e-2)
    mid = run(b1, _init(b1, "s0", seed=3), range(2))
    assert (st_b.path_of(st_b.ref("s0", mid.version)) / OPTIMIZER_STATE).exists()
    b2 = make_service(fresh_base, st_b, mode, lr=1e-2)  # a new process on the same store
    end_b = run(b2, mid, range(2, 4))

    assert end_a.version == end_b.version == 5
    wa, wb = _weights(st_a, end_a), _weights(st_b, end_b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    oa = st_a.load(st_a.ref("s0", 5), with_optimizer=True)[1]
    ob = st_b.load(st_b.ref("s0", 5), with_optimizer=True)[1]
    assert oa.keys() == ob.keys() and all(torch.equal(oa[k], ob[k]) for k in oa)


def test_bfloat16_adapters_step_float32_master_weights(fresh_base, store):
    from services.trainer.service import TrainerService
    from tests.trainer.conftest import trainer_config

    base = fresh_base()
    base.model.to(torch.bfloat16)  # as on a GPU with model.dtype=auto
    svc = TrainerService.from_config(trainer_config("batched", lr=1e-5), base=base, store=store)
    ref = _init(svc, "s0")
    assert all(p.dtype == torch.bfloat16 for p in svc.pool.held["s0"].params.values())
    v2 = update_one(svc, update_request(ref, rollouts())).adapter  # B = 0 at init: only B moves in the first step
    v3 = update_one(svc, update_request(v2, rollouts(offset=1))).adapter
    before, after = _weights(store, v2), _weights(store, v3)
    a_keys = [k for k in after if "lora_A" in k]
    assert all(after[k].dtype == torch.float32 for k in after)
    # a 1e-5 step is below bfloat16's resolution at |A| ~ 0.1, yet every A moved: the float32 masters took it
    assert all(not torch.equal(after[k], before[k]) for k in a_keys)
    assert all(torch.equal(svc.pool.held["s0"].params[k], after[k].to(torch.bfloat16)) for k in after)
