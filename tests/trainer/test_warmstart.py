"""The trainer's WarmStart (spec 13) on the tiny model: the fit lowers its loss, the cache hits, misses and rebuilds a
damaged entry, members start from the warm weights, and bad requests change nothing."""

from __future__ import annotations

import grpc
import pytest
import torch

from populora.config import load_config
from populora.pb import trainer_pb2
from populora.rpc import ServiceError
from populora.store import ADAPTER_WEIGHTS, ArtifactStore
from populora.tasks.prompts import teacher_messages
from populora.tasks.seedgen import generate_programs, proposal_text
from services.trainer.service import TrainerService
from tests.conftest import served


def _service(fresh_base, store, tmp_path, **warm):
    overrides = ["model.name=tiny", "lora.rank=4", "lora.alpha=8", "trainer.batch_mode=sequential",
                 f"warmstart.cache_dir={tmp_path / 'cache'}"] + [f"warmstart.{k}={v}" for k, v in warm.items()]
    return TrainerService.from_config(load_config(overrides=overrides, env=False), base=fresh_base(), store=store)


def _examples(n: int = 4) -> list[trainer_pb2.SftExample]:
    """Short teacher examples in the exact proposal format (a prompt without references keeps them small)."""
    out = []
    for p in generate_programs(n, seed=0):
        msgs = teacher_messages("code_o", [])
        out.append(trainer_pb2.SftExample(prompt=[trainer_pb2.ChatTurn(**m) for m in msgs],
                                          response=proposal_text(p, "code_o"), task_type="code_o", role="teacher"))
    return out


def _request(adapter_id: str, steps: int = 6, use_cache: bool = True, **kw) -> trainer_pb2.WarmStartRequest:
    fields = {"seed": 1, "batch_size": 2, "lr": 1e-2, **kw}
    fields.setdefault("examples", _examples())
    return trainer_pb2.WarmStartRequest(adapter_id=adapter_id, steps=steps, use_cache=use_cache, **fields)


def _weights(store, adapter_id, version=1):
    return store.read(store.ref(adapter_id, version)).weights


@pytest.mark.parametrize("prompt_grad", [False, True])
def test_a_few_steps_lower_the_loss_and_write_version_1(fresh_base, store, tmp_path, prompt_grad):
    svc = _service(fresh_base, store, tmp_path)
    resp = svc.WarmStart(_request("warm", steps=8, use_cache=False, prompt_grad=prompt_grad))
    losses = list(resp.losses)
    assert len(losses) == 8 and not resp.cached and resp.tokens > 0 and resp.fit_seconds > 0
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.1, losses
    version = store.read(store.ref("warm", 1))
    assert version.meta["written_by"] == "warmstart" and version.meta["digest"] == resp.digest
    assert any(torch.count_nonzero(w) for k, w in version.weights.items() if "lora_B" in k)  # it moved from B = 0
    assert not svc.pool.held  # the warm adapter is a starting point, not a member


@pytest.mark.slow
def test_cache_hit_miss_and_damaged_entries(fresh_base, tmp_path):
    first = _service(fresh_base, ArtifactStore(tmp_path / "run1"), tmp_path)
    made = first.WarmStart(_request("r1.warm", steps=2))
    assert not made.cached
    # another run (new store, new trainer) with the same request: taken from the cache, no step run
    second = _service(fresh_base, ArtifactStore(tmp_path / "run2"), tmp_path)
    hit = second.WarmStart(_request("r2.warm", steps=2))
    assert hit.cached and hit.digest == made.digest and list(hit.losses) == list(made.losses)
    w1, w2 = _weights(first.pool.store, "r1.warm"), _weights(second.pool.store, "r2.warm")
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    # other hyperparameters: another digest, a miss
    other = second.WarmStart(_request("r2.other", steps=3))
    assert not other.cached and other.digest != made.digest

    # a damaged entry (bytes changed after it was written) is detected, removed and fitted again
    entry = next(p for p in (tmp_path / "cache" / "adapters").iterdir() if made.digest[:32] in p.name)
    weights_file = entry / "v1" / ADAPTER_WEIGHTS
    raw = bytearray(weights_file.read_bytes())
    raw[-8:] = b"\x00\x00\x80\x7f" * 2
    weights_file.write_bytes(bytes(raw))
    third = _service(fresh_base, ArtifactStore(tmp_path / "run3"), tmp_path)
    refit = third.WarmStart(_request("r3.warm", steps=2))
    assert not refit.cached and refit.digest == made.digest
    w3 = _weights(third.pool.store, "r3.warm")
    assert all(torch.equal(w1[k], w3[k]) for k in w1)  # the same fit again: same seed, same examples
    # a truncated file, and an entry whose write never finished, are misses too
    weights_file.write_bytes(weights_file.read_bytes()[:100])
    assert not _service(fresh_base, ArtifactStore(tmp_path / "run4"), tmp_path).WarmStart(_request("r4.w", steps=2)).cached
    assert _service(fresh_base, ArtifactStore(tmp_path / "run5"), tmp_path).WarmStart(_request("r5.w", steps=2)).cached
    import shutil
    shutil.rmtree(entry / "v1")
    (entry / ".tmp-v1-crashed").mkdir()
    assert not _service(fresh_base, ArtifactStore(tmp_path / "run6"), tmp_path).WarmStart(_request("r6.w", steps=2)).cached


def test_members_start_from_the_warm_adapter(fresh_base, store, tmp_path):
    svc = _service(fresh_base, store, tmp_path)
    warm = svc.WarmStart(_request("warm", steps=2, use_cache=False)).adapter
    for adapter_id, role in (("T0", "teacher"), ("S0", "student"), ("B0", "both")):
        ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id=adapter_id, role=role, seed=9,
                                                             init_from=warm)).adapter
        member, start = store.read(store.ref(ref.adapter_id, 1)), _weights(store, "warm")
        assert member.meta["init_from"] == "warm@v1" and member.meta["written_by"] == "trainer"
        assert all(torch.equal(member.weights[k], start[k]) for k in start)
        assert not store.load(store.ref(ref.adapter_id, 1), with_optimizer=True)[1]  # a fresh optimizer
    # a member of another rank cannot start from it
    with pytest.raises(ServiceError) as err:
        svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="S9", role="student", rank=8, init_from=warm))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "rank" in err.value.message
    assert not store.versions("S9")


def test_bad_warm_start_requests_change_nothing(fresh_base, store, tmp_path):
    svc = _service(fresh_base, store, tmp_path)
    ex = _examples(1)[0]
    bad = [
        _request("w", examples=[]),
        _request("w", steps=0),
        _request("w", lr=-1.0),
        _request("w", examples=[trainer_pb2.SftExample(prompt=ex.prompt, response=ex.response, task_type="code_z",
                                                       role="teacher")]),
        _request("w", examples=[trainer_pb2.SftExample(prompt=ex.prompt, response=ex.response, task_type="code_o",
                                                       role="judge")]),
        _request("w", examples=[trainer_pb2.SftExample(prompt=ex.prompt, response="  ", task_type="code_o",
                                                       role="student")]),
        _request("w", examples=[trainer_pb2.SftExample(prompt=[trainer_pb2.ChatTurn(role="tool", content="x")],
                                                       response="y", task_type="code_o", role="student")]),
        _request("w", examples=[trainer_pb2.SftExample(prompt=ex.prompt, response="x " * 5000,
                                                       task_type="code_o", role="student")]),
        _request("bad id/../x"),
    ]
    for req in bad:
        with pytest.raises(ServiceError) as err:
            svc.WarmStart(req)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, err.value.message
    assert not store.adapter_ids() and not (tmp_path / "cache").exists()
    svc.WarmStart(_request("w", steps=1, use_cache=False))
    with pytest.raises(ServiceError) as err:  # the same id fitted on other examples: refused, not overwritten
        svc.WarmStart(_request("w", steps=2, use_cache=False))
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_warm_start_over_grpc(fresh_base, store, tmp_path):
    svc = _service(fresh_base, store, tmp_path)
    with served(svc) as client:
        resp = client.WarmStart(_request("warm", steps=2, use_cache=False))
        assert (resp.adapter.adapter_id, resp.adapter.version) == ("warm", 1) and len(resp.losses) == 2
        again = client.WarmStart(_request("warm", steps=2, use_cache=False))  # a retried call: the same version
        assert again.digest == resp.digest and store.versions("warm") == [1]
        with pytest.raises(ServiceError) as err:
            client.WarmStart(_request("warm2", examples=[]))
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
