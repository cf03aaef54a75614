"""A Generate batch split by placement over two inference replicas gives the tokens one replica gives, in the
batch's order, and each replica loads only the adapters the balanced split gave it; a Score request split so gives
one replica's scores, in the rows' order."""

from __future__ import annotations

import copy

import grpc
import pytest

from coordinator.clients.replicas import PlacedInference, Replicas
from populora.config import ALL_TARGET_MODULES, load_config
from populora.pb import common_pb2, inference_pb2
from populora.placement import balanced, owner
from populora.rpc import ServiceError, make_server


def _service(tiny, store):
    from populora.models import BaseModel
    from services.inference.hf import HfBackend
    from services.inference.service import InferenceService

    base = BaseModel(tiny.name, copy.deepcopy(tiny.model), tiny.tokenizer, tiny.path, 0.0)
    return InferenceService(HfBackend(base, store, ALL_TARGET_MODULES, max_rank=16, max_resident=16),
                            default_max_new_tokens=8)


def test_a_split_batch_gives_one_replicas_tokens(tiny, store, adapters):
    services = [_service(tiny, store) for _ in range(3)]
    servers = [make_server([s], 0, token="t") for s in services]
    names = [f"127.0.0.1:{port}" for _, port, _ in servers]
    cfg = load_config(preset="cpu-tiny", env=False, overrides=["services.token=t"])
    one = PlacedInference(Replicas("inference", cfg, addresses=lambda: [(names[0], names[0])]))
    two = PlacedInference(Replicas("inference", cfg, addresses=lambda: [(n, n) for n in names[1:]]))
    requests = [inference_pb2.GenerationRequest(
        request_id=f"r{i}", adapter=common_pb2.AdapterRef(adapter_id=a.adapter_id, version=a.version),
        prompt=f"def f{i}(x):", sampling=inference_pb2.SamplingParams(temperature=1.0, max_new_tokens=8, seed=i, n=2))
        for i, a in enumerate(adapters)]
    requests.append(inference_pb2.GenerationRequest(request_id="base", prompt="x =", sampling=requests[0].sampling))
    try:
        got = [list(p.Generate(inference_pb2.GenerateRequest(requests=requests))) for p in (one, two)]
        assert [r.request_id for r in got[1]] == [r.request_id for r in requests]
        tokens = [{r.request_id: [list(c.token_ids) for c in r.completions] for r in g} for g in got]
        assert tokens[0] == tokens[1] and all(len(t) == 2 for t in tokens[1].values())
        where = balanced({r.adapter.adapter_id or r.request_id: 16.0 for r in requests}, names[1:])
        for i, name in enumerate(names[1:], start=1):
            resident = {a.adapter_id for a in services[i].ListAdapters(inference_pb2.ListAdaptersRequest()).adapters}
            assert resident == {a.adapter_id for a in adapters if where[a.adapter_id] == name}
            assert resident  # both replicas generated
        listed = two.ListAdapters(inference_pb2.ListAdaptersRequest())
        assert sorted(a.adapter_id for a in listed.adapters) == sorted(a.adapter_id for a in adapters)
        # a retired adapter is unloaded wherever a batch put it
        gone = adapters[0]
        assert two.UnloadAdapter(inference_pb2.UnloadAdapterRequest(
            adapter=common_pb2.AdapterRef(adapter_id=gone.adapter_id, version=gone.version))).unloaded
        assert all(gone.adapter_id not in {a.adapter_id for a in s.ListAdapters(
            inference_pb2.ListAdaptersRequest()).adapters} for s in services[1:])
        rows = [inference_pb2.ScoreRow(row_id=r.request_id, adapter=r.adapter, prompt=r.prompt, continuation=" x * 2")
                for r in requests]
        scored = [p.Score(inference_pb2.ScoreRequest(rows=rows)).scores for p in (one, two)]
        assert [s.row_id for s in scored[1]] == [r.row_id for r in rows]
        assert [s.logprob for s in scored[1]] == pytest.approx([s.logprob for s in scored[0]], abs=1e-4)
        assert len({round(s.logprob, 3) for s in scored[1]}) > 1
    finally:
        one.close()
        two.close()
        for server, _, _ in servers:
            server.stop(None)


class _Recorder:
    """Stands for one inference replica's client: answers each request with its id, and keeps what it was sent."""

    def __init__(self):
        self.sent: list[str] = []
        self.unload_error: ServiceError | None = None

    def Generate(self, req):
        self.sent += [r.request_id for r in req.requests]
        return [inference_pb2.GenerateResult(request_id=r.request_id) for r in req.requests]

    def UnloadAdapter(self, req):
        if self.unload_error is not None:
            raise self.unload_error
        return inference_pb2.UnloadAdapterResponse(unloaded=1)

    def close(self):
        pass


def _recorded(names: list[str]) -> tuple[PlacedInference, dict[str, _Recorder]]:
    cfg = load_config(preset="cpu-tiny", env=False, overrides=["services.token=t"])
    replicas = Replicas("inference", cfg, addresses=lambda: [(n, n) for n in names])
    recorders = {n: _Recorder() for n in names}
    for n in names:
        replicas.remotes[n].close()
        replicas.remotes[n] = recorders[n]
    return PlacedInference(replicas), recorders


def test_a_generation_batch_whose_owners_are_uneven_is_split_evenly():
    names = ["inference-0:50053", "inference-1:50053"]
    # eight adapters of which six are owned by the first replica: by owner alone one part would be 3x the other
    first = [f"a{i}" for i in range(200) if owner(f"a{i}", names) == names[0]][:6]
    second = [f"a{i}" for i in range(200) if owner(f"a{i}", names) == names[1]][:2]
    placed, recorders = _recorded(names)
    requests = [inference_pb2.GenerationRequest(
        request_id=f"{a}/r{k}", adapter=common_pb2.AdapterRef(adapter_id=a, version=1),
        sampling=inference_pb2.SamplingParams(max_new_tokens=32, n=1)) for a in first + second for k in range(2)]
    got = list(placed.Generate(inference_pb2.GenerateRequest(requests=requests)))
    assert [r.request_id for r in got] == [r.request_id for r in requests]
    sent = {n: {rid.split("/")[0] for rid in rec.sent} for n, rec in recorders.items()}
    assert [len(recorders[n].sent) for n in names] == [8, 8]  # four adapters' requests each, kept together
    assert set(second) <= sent[names[1]] and len(sent[names[0]] & set(first)) == 4  # only the surplus moved


def test_unloading_skips_a_replica_that_is_gone_and_fails_on_a_real_error(monkeypatch):
    names = ["inference-0:50053", "inference-1:50053"]
    placed, recorders = _recorded(names)
    ref = common_pb2.AdapterRef(adapter_id="a0", version=1)
    assert placed.UnloadAdapter(inference_pb2.UnloadAdapterRequest(adapter=ref)).unloaded == 2
    recorders[names[1]].unload_error = ServiceError(grpc.StatusCode.UNAVAILABLE, "gone")
    monkeypatch.setattr(placed.replicas, "_answers", lambda name: False)  # its health check fails too
    assert placed.UnloadAdapter(inference_pb2.UnloadAdapterRequest(adapter=ref)).unloaded == 1
    assert placed.replicas.live() == [names[0]]
    recorders[names[0]].unload_error = ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "bad ref")
    with pytest.raises(ServiceError, match="bad ref"):
        placed.UnloadAdapter(inference_pb2.UnloadAdapterRequest(adapter=ref))
