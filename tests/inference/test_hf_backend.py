"""The `hf` backend: mixed-adapter batches equal per-adapter runs, version swaps, LRU, seeded sampling, limits."""

from __future__ import annotations

import threading
import time

import pytest

from services.inference.backend import BadRequest, BatchTooLarge, Request, Sampling, UnknownAdapter
from tests.inference.conftest import save_adapter


def _req(rid, adapter=None, text="Write a function.", **sampling):
    sampling.setdefault("max_new_tokens", 8)
    return Request(rid, adapter, messages=[{"role": "user", "content": text}], sampling=Sampling(**sampling))


def _tokens(results):
    return {r.request_id: [c.token_ids for c in r.completions] for r in results}


@pytest.mark.parametrize("host", ["batched", "peft"])
def test_mixed_batch_equals_per_adapter_greedy(make_backend, adapters, host):
    """8 adapters and base rows in one batch, prompts of different lengths (left padding): token for token the
    same as each request served alone."""
    backend = make_backend(host=host)
    requests = []
    for i in range(10):
        adapter = None if i in (3, 7) else adapters[i % len(adapters)]
        requests.append(_req(f"r{i}", adapter, text="def f(x):" + " return x" * (i % 4)))
    mixed = _tokens(backend.generate(requests))
    assert set(mixed) == {r.request_id for r in requests}
    for req in requests:
        alone = _tokens(backend.generate([req]))
        assert alone[req.request_id] == mixed[req.request_id], req.request_id
    per_adapter = {tuple(mixed[f"r{i}"][0]) for i in (0, 1, 2, 4)}
    assert len(per_adapter) > 1, "adapters gave identical outputs: the test would not see a mix-up"


@pytest.mark.parametrize("host", ["batched", "peft"])
@pytest.mark.parametrize("counts", [(2, 2, 2), (3, 1, 2)])
def test_a_batch_of_ranks_4_8_32_gives_each_row_what_it_gets_alone(base, store, tiny, host, counts):
    """Spec 9, "Mixed ranks": members of ranks 4, 8 and 32 (one lora_alpha, so each its own alpha / r) in one batch,
    every row the tokens and log-probabilities it gets served alone. Even counts take the batched decode over
    consecutive slots, uneven ones the padded or grouped one; a smaller rank is zero-padded in the banks."""
    from populora.config import ALL_TARGET_MODULES
    from services.inference.hf import HfBackend

    backend = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=32, max_resident=8, host=host)
    refs = [save_adapter(store, tiny.model, f"m{r}", seed=40 + r, rank=r, alpha=16.0) for r in (4, 8, 32)]
    requests = [_req(f"r{r}.{k}", ref, text="def f(x):" + " return x" * k, max_new_tokens=6, logprobs=True)
                for ref, r, n in zip(refs, (4, 8, 32), counts, strict=True) for k in range(n)]
    mixed = {res.request_id: res for res in backend.generate(requests)}
    for req in requests:
        [alone] = backend.generate([req])
        got = mixed[req.request_id].completions[0]
        assert got.token_ids == alone.completions[0].token_ids, req.request_id
        assert max(abs(x - y) for x, y in zip(got.logprobs, alone.completions[0].logprobs, strict=True)) < 1e-5
    first = {tuple(mixed[f"r{r}.0"].completions[0].token_ids) for r in (4, 8, 32)}
    assert len(first) > 1, "the ranks gave identical outputs: the test would not see a mix-up"


def test_results_carry_prompt_tokens_and_version(make_backend, adapters, base):
    backend = make_backend()
    [res] = list(backend.generate([_req("x", adapters[1].__class__(adapters[1].adapter_id, 0), logprobs=True)]))
    expected = base.tokenizer.apply_chat_template([{"role": "user", "content": "Write a function."}],
                                                  add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert res.prompt_token_ids == list(expected)
    assert res.adapter.key == "a1@v1"  # version 0 = latest
    [c] = res.completions
    assert len(c.token_ids) == 8 and c.finish_reason == "length" and len(c.logprobs) == 8
    assert all(lp <= 0 for lp in c.logprobs)


@pytest.mark.slow
def test_sampling_is_reproducible_with_a_seed(make_backend, adapters):
    """The same request gives the same samples every time it is served, alone or in the same mixed batch. Across
    different batch compositions a row's logits agree only to float rounding (the batched LoRA paths group rows
    differently), and the random tiny model's near-flat distributions turn a 1e-6 change into another token, so that
    a row's draw depends on nothing but its own logits and generator is checked in tests/inference/test_sampling.py."""
    backend = make_backend()
    req = _req("s", adapters[0], temperature=1.0, top_p=0.9, seed=42, n=3, max_new_tokens=10)
    first = _tokens(backend.generate([req]))["s"]
    assert _tokens(backend.generate([req]))["s"] == first
    other_batch = [_req("other", adapters[2], max_new_tokens=4), req, _req("b", None, max_new_tokens=3)]
    second = _tokens(backend.generate(other_batch))["s"]
    assert _tokens(backend.generate(other_batch))["s"] == second
    assert all(len(t) == 10 for t in first + second)
    assert len({tuple(t) for t in first}) > 1, "n completions of one request must differ (seed + k)"
    third = _tokens(backend.generate([_req("s", adapters[0], temperature=1.0, top_p=0.9, seed=43, n=3,
                                           max_new_tokens=10)]))["s"]
    assert third != first


def test_stop_strings_and_eos(make_backend, adapters, base):
    backend = make_backend()
    [free] = backend.generate([_req("f", adapters[0], max_new_tokens=12)])
    text = free.completions[0].text
    assert len(text) > 2
    stop = text[1:3]
    [stopped] = backend.generate([_req("f", adapters[0], max_new_tokens=12, stop=(stop,))])
    c = stopped.completions[0]
    assert c.finish_reason == "stop" and c.text.endswith(stop) and stop not in c.text[:-1 * len(stop)] + "\0"
    assert len(c.token_ids) < 12


def test_version_swap_under_load(make_backend, store, adapters, tiny):
    """A batch running on a0@v1 keeps v1 to its end while a0@v2 is saved, loaded and served beside it."""
    backend = make_backend()
    long_req = _req("long", adapters[0], max_new_tokens=40)
    v1_alone = _tokens(backend.generate([long_req]))["long"]
    out = {}
    worker = threading.Thread(target=lambda: out.update(run=list(backend.generate([long_req]))))
    steps_before = backend.decoder.steps
    worker.start()
    while backend.decoder.steps < steps_before + 3:  # the batch is decoding
        time.sleep(0.005)
    v2 = save_adapter(store, tiny.model, "a0", seed=100)
    assert v2.version == 2
    backend.load_adapter(v2)
    [swapped] = backend.generate([_req("new", adapters[0].__class__("a0", 0), max_new_tokens=40)])
    worker.join(timeout=60)
    assert backend.decoder.steps > steps_before + 40, "the long batch finished before the swap: not under load"
    [old] = out["run"]
    assert old.adapter.key == "a0@v1" and swapped.adapter.key == "a0@v2"
    assert [c.token_ids for c in old.completions] == v1_alone
    assert [c.token_ids for c in swapped.completions] != v1_alone
    assert {r.key for r in backend.adapters()} >= {"a0@v1", "a0@v2"}


def test_lru_eviction_and_reload(make_backend, adapters):
    backend = make_backend(max_resident=3)
    for ref in adapters[:3]:
        assert not backend.load_adapter(ref).already_resident
    assert backend.load_adapter(adapters[0]).already_resident  # a0 is now the most recently used
    outcome = backend.load_adapter(adapters[3])
    assert [r.key for r in outcome.evicted] == ["a1@v1"]
    assert [r.key for r in backend.adapters()] == ["a2@v1", "a0@v1", "a3@v1"]
    first = _tokens(backend.generate([_req("x", adapters[1])]))["x"]  # evicted: reloaded from the store
    assert "a1@v1" in {r.key for r in backend.adapters()} and len(backend.adapters()) == 3
    backend.load_adapter(adapters[4]), backend.load_adapter(adapters[5]), backend.load_adapter(adapters[6])
    assert "a1@v1" not in {r.key for r in backend.adapters()}
    assert _tokens(backend.generate([_req("x", adapters[1])]))["x"] == first
    assert backend.unload_adapter(adapters[6].__class__("a6", 0)) == 1
    assert "a6@v1" not in {r.key for r in backend.adapters()}


def test_bad_requests(make_backend, adapters):
    backend = make_backend(max_batch=4, max_resident=2)
    from populora.store import AdapterRef

    with pytest.raises(UnknownAdapter, match="nope"):
        backend.generate([_req("x", AdapterRef("nope", 0))])
    with pytest.raises(UnknownAdapter, match="a0@v9"):
        backend.generate([_req("x", AdapterRef("a0", 9))])
    with pytest.raises(BatchTooLarge, match="max_batch=4"):
        backend.generate([_req("x", adapters[0], n=5)])
    with pytest.raises(BatchTooLarge, match="max_resident_adapters=2"):
        backend.generate([_req(f"x{i}", adapters[i]) for i in range(3)])
    with pytest.raises(BadRequest, match="exactly one"):
        backend.generate([Request("x", None, prompt="hi", messages=[{"role": "user", "content": "hi"}])])
    with pytest.raises(BadRequest, match="max_new_tokens"):
        backend.generate([_req("x", max_new_tokens=0)])
    with pytest.raises(BadRequest, match="repeated"):
        backend.generate([_req("x"), _req("x")])
    with pytest.raises(BadRequest, match="role"):
        backend.generate([Request("x", messages=[{"role": "robot", "content": "hi"}])])
    assert _tokens(backend.generate([_req("ok", adapters[0])]))["ok"]  # still serving


def test_prefill_groups_sort_by_length_within_the_budget():
    from services.inference.decoder import prefill_groups

    lengths = [30, 5, 12, 31, 6, 100, 11]
    groups = prefill_groups(lengths, budget=40)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(g == sorted(g) for g in groups)
    for g in groups:  # within the budget, or one over-long prompt alone
        assert len(g) * max(lengths[i] for i in g) <= 40 or len(g) == 1
    assert [5] in groups  # longer than the budget: alone
    assert {1, 4} <= set(next(g for g in groups if 1 in g))  # the two shortest share a pass
    assert prefill_groups([7], budget=1) == [[0]]


@pytest.mark.slow
@pytest.mark.parametrize("merge", [True, False])
def test_grouped_prompt_pass_and_growing_cache_change_no_token(make_backend, adapters, monkeypatch, merge):
    """Prompts of very different lengths in many small prompt groups (merged into one slab cache that grows in
    place past its first allocation, finished rows leaving the batch late), or in one pass when the model's cache
    cannot be merged: greedy rows token for token what one pass over the whole batch, and each request alone, give.
    (A row's logits move by float rounding, about 1e-6 here, with its padding, so a sampled row is only checked to
    repeat itself: a uniform draw landing within that of a token's edge picks its neighbour.)"""
    import services.inference.kv_cache as kv_cache

    backend = make_backend()
    requests = []
    for i in range(9):
        adapter = None if i == 4 else adapters[i % len(adapters)]
        requests.append(_req(f"g{i}", adapter, text="def f(x):" + " return x + 1" * (3 * i),
                             max_new_tokens=5 + 9 * i, ignore_eos=True))
    requests.append(_req("s", adapters[1], text="x" * 40, temperature=0.7, top_p=0.5, seed=3, n=3,
                         max_new_tokens=45, ignore_eos=True))
    backend.decoder.prefill_tokens = 10**9
    one_pass = _tokens(backend.generate(requests))
    if not merge:
        monkeypatch.setattr(kv_cache, "mergeable", lambda cache: False)
    made = []
    real_slab_cache = kv_cache.slab_cache
    monkeypatch.setattr(kv_cache, "slab_cache", lambda *a: made.append(real_slab_cache(*a)) or made[-1])
    backend.decoder.prefill_tokens = 64
    grouped = _tokens(backend.generate(requests))
    assert bool(made and made[-1] is not None) == merge  # the slab cache, or transformers' own in one pass
    sampled = grouped.pop("s")
    assert grouped == {k: v for k, v in one_pass.items() if k != "s"}
    assert _tokens(backend.generate(requests))["s"] == sampled
    for req in (requests[0], requests[8]):
        assert _tokens(backend.generate([req]))[req.request_id] == grouped[req.request_id]
    assert [len(t) for t in sampled] == [45, 45, 45] and len({tuple(t) for t in sampled}) == 3
    assert len(grouped["g8"][0]) == 5 + 9 * 8 > kv_cache.CACHE_GROWTH


def test_slab_layer_grows_in_place_and_selects_rows():
    import torch

    from services.inference.kv_cache import CACHE_GROWTH, SlabLayer

    k = torch.zeros(3, 2, 4 + CACHE_GROWTH, 5)
    layer = SlabLayer(k.clone(), k.clone(), filled=4, limit=4 + 3 * CACHE_GROWTH)
    for step in range(CACHE_GROWTH + 3):
        new = torch.full((3, 2, 1, 5), float(step + 1))
        keys, values = layer.update(new, new + 0.5)
        assert keys.shape == (3, 2, 5 + step, 5) and float(keys[0, 0, -1, 0]) == step + 1
    assert layer.get_seq_length() == 4 + CACHE_GROWTH + 3 and layer.k_slab.shape[2] == 4 + 2 * CACHE_GROWTH
    assert layer.get_mask_sizes(1) == (4 + CACHE_GROWTH + 4, 0)
    layer.batch_select_indices(torch.tensor([2, 0, 0]))
    assert layer.keys.shape[0] == 3 and torch.equal(layer.keys[1], layer.keys[2])
