"""generation.batch_invariant: a request's tokens and log-probabilities are the same bits whatever was asked beside
it and whatever slots its adapter took (what bench.faults needs to hold a distributed run under faults to the
one-process run)."""

from __future__ import annotations

import pytest

from populora.config import load_config
from services.inference.backend import Request, Sampling, ScoreRow


def _req(rid, adapter, text, **sampling):
    sampling.setdefault("max_new_tokens", 10)
    return Request(rid, adapter, messages=[{"role": "user", "content": text}], sampling=Sampling(**sampling))


def _out(results):
    return {r.request_id: [(c.token_ids, c.logprobs) for c in r.completions] for r in results}


def test_a_request_gives_the_same_bits_alone_in_a_mix_and_in_other_slots(make_backend, adapters):
    requests = [_req(f"r{i}", None if i == 3 else adapters[i % len(adapters)], "def f(x):" + " return x" * (i % 4),
                     temperature=1.0, seed=100 + i, n=1 + i % 3, logprobs=True) for i in range(9)]
    one = make_backend(batch_invariant=True)
    mixed = _out(one.generate(requests))
    assert all(c[1] for r in mixed.values() for c in r)  # log-probabilities came back
    for req in requests:
        assert _out(one.generate([req])) == {req.request_id: mixed[req.request_id]}, req.request_id
    # every adapter unloaded and loaded again in the reverse order (other bank slots), the batch asked in reverse
    for ref in one.adapters():
        one.unload_adapter(ref)
    for a in reversed(adapters):
        one.load_adapter(a)
    assert _out(one.generate(list(reversed(requests)))) == mixed


def test_a_score_row_gives_the_same_bits_alone_and_in_a_mix(make_backend, adapters):
    rows = [ScoreRow(f"s{i}", None if i % 4 == 0 else adapters[i % len(adapters)],
                     [{"role": "user", "content": "def f(x):" + " return x" * (i % 3)}],
                     continuation="'ab'" + ", 1" * (i % 3) + "</answer>") for i in range(8)]
    backend = make_backend(batch_invariant=True)
    mixed = {r.row_id: r.logprob for r in backend.score(rows)}
    for row in rows:
        [alone] = backend.score([row])
        assert alone.logprob == mixed[row.row_id], row.row_id


def test_vllm_cannot_promise_it():
    with pytest.raises(ValueError, match="batch_invariant is served by the hf backend only"):
        load_config(preset="cpu-tiny", env=False,
                    overrides=["generation.batch_invariant=true", "generation.backend=vllm"])
