"""model.base_matmul=bfloat16: the base's products in bfloat16 (populora/lora/prepack.py), and the bounds of what it
moves, measured on SmolLM2 against the float32 products: greedy answers, the log-probabilities of the chosen tokens,
an update's gradients; and that an update still learns. The default (`native`) is untouched: its bits are the
seeded runs' (tests/e2e)."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.lora.prepack import PackedLinear, bfloat16_native

pytestmark = pytest.mark.skipif(not bfloat16_native(), reason="these cores have no native bfloat16 product")

# The bounds (docs/performance.md): measured 0.08 on SmolLM2 and 3 of 4 greedy answers the same to their end
LOGPROB_BOUND = 0.15
GREEDY_SAME_AT_LEAST = 0.5
PROMPTS = ["Write a Python function that returns the sum of the squares of a list of integers.",
           "def f(x):\n    return [i * 2 for i in x if i % 3]\n\nWhat is f([1, 2, 3, 4, 5, 6])? Answer:",
           "Explain what a binary search does, in two sentences.",
           "Given the program below, deduce its input.\n```python\ndef f(s):\n    return s[::-1].upper()\n```\n"
           "Output: 'OLLEH'"]


def test_a_packed_bfloat16_product_is_float32_in_and_out_within_bfloat16_rounding():
    linear = torch.nn.Linear(64, 48)
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = PackedLinear(linear, torch.bfloat16)(x), linear(x)
    assert got.dtype == torch.float32 and torch.allclose(got, want, rtol=3e-2, atol=3e-2)
    assert not torch.equal(got, want)  # the products did run in bfloat16


@pytest.fixture(scope="module")
def smol():
    from populora.models import load_base_model

    return load_base_model("smollm2-135m")


def _backend(smol, store, base_matmul: str):
    from populora.config import ALL_TARGET_MODULES
    from populora.models import BaseModel
    from services.inference.hf import HfBackend

    own = BaseModel(smol.name, copy.deepcopy(smol.model), smol.tokenizer, smol.path, 0.0)
    return HfBackend(own, store, ALL_TARGET_MODULES, max_rank=16, base_matmul=base_matmul)


def _greedy(backend, n: int = 48):
    from services.inference.backend import Request, Sampling

    reqs = [Request(f"r{i}", None, messages=[{"role": "user", "content": p}],
                    sampling=Sampling(max_new_tokens=n, temperature=0.0, logprobs=True)) for i, p in enumerate(PROMPTS)]
    return {r.request_id: r for r in backend.generate(reqs)}


@pytest.mark.slow
def test_greedy_answers_and_log_probabilities_stay_within_the_bounds(smol, tmp_path):
    from populora.store import ArtifactStore

    store = ArtifactStore(tmp_path)
    torch.set_num_threads(1)
    native, low = _backend(smol, store, "native"), _backend(smol, store, "bfloat16")
    assert low.packing.packed > 0
    a, b = _greedy(native), _greedy(low)
    same = [a[k].completions[0].token_ids == b[k].completions[0].token_ids for k in a]
    assert sum(same) >= GREEDY_SAME_AT_LEAST * len(same), same
    # the native answers' tokens, read by the bfloat16 products: each chosen token's log-probability
    worst = 0.0
    for r in a.values():
        prompt, tokens = r.prompt_token_ids, r.completions[0].token_ids
        ids = torch.tensor([prompt + tokens])
        logps = []
        for backend in (native, low):
            with torch.inference_mode():
                logits = backend.host.forward([None], input_ids=ids).logits[0, len(prompt) - 1:-1].float()
            logps.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]))
        worst = max(worst, float((logps[0] - logps[1]).abs().max()))
    assert 0 < worst <= LOGPROB_BOUND, worst


def test_the_warm_start_fits_in_the_native_dtype(tiny):
    from populora.adapters import make_host

    host = make_host("batched", copy.deepcopy(tiny.model), ["q_proj", "v_proj"], 8)
    assert host.lower_products(torch.bfloat16).packed > 0
    layers = list(host.multi.layers.values())
    with host.native_products():
        assert all(layer.low is None for layer in layers)
    assert all(layer.low is not None and layer.low.dtype == torch.bfloat16 for layer in layers)


UPDATE_COSINE_AT_LEAST = 0.95  # measured 0.979 (grad norms within 0.3%)


def _trainer(base, store, base_matmul: str, *overrides: str):
    from populora.config import load_config
    from services.trainer.service import TrainerService

    cfg = load_config(overrides=[f"model.name={base.name}", "trainer.batch_mode=batched", "lora.rank=8",
                                 "lora.alpha=16", f"model.base_matmul={base_matmul}", *overrides], env=False)
    return TrainerService.from_config(cfg, base=base, store=store)


@pytest.mark.slow
def test_an_update_moves_the_adapter_the_same_way(smol, tmp_path):
    import dataclasses

    from bench.trainer_memory import rollouts
    from populora.pb import trainer_pb2
    from populora.store import ArtifactStore

    torch.set_num_threads(1)
    moves, norms = [], []
    for base_matmul in ("native", "bfloat16"):
        store = ArtifactStore(tmp_path / base_matmul)
        svc = _trainer(dataclasses.replace(smol, model=copy.deepcopy(smol.model)), store, base_matmul)
        rows = rollouts(1, 4, 160, svc.pool.host.vocab_size, prompt_share=0.5)[0]
        ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="a", role="student", seed=0)).adapter
        got = svc.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=[
            trainer_pb2.UpdateRequest(adapter=ref, rollouts=rows, seed=0, step=1)])).results[0]
        before, after = store.read(ref).weights, store.read(got.adapter).weights
        moves.append(torch.cat([(after[k] - before[k]).flatten() for k in sorted(before)]))
        norms.append(got.stats.grad_norm)
    assert float(torch.nn.functional.cosine_similarity(moves[0], moves[1], dim=0)) >= UPDATE_COSINE_AT_LEAST
    assert norms[1] == pytest.approx(norms[0], rel=0.02)


@pytest.mark.slow
def test_an_update_in_bfloat16_products_still_learns(tiny, store):
    """tests/trainer/test_learning.py's signal with the base's products in bfloat16: rewarding a token raises it to
    the top of the tiny model's vocabulary."""
    import dataclasses

    from populora.pb import trainer_pb2
    from tests.trainer.conftest import update_one, update_request
    from tests.trainer.test_learning import _batch, _target

    def fresh_base():
        return dataclasses.replace(tiny, model=copy.deepcopy(tiny.model))

    torch.set_num_threads(1)
    svc = _trainer(fresh_base(), store, "bfloat16", "lora.rank=4", "lora.alpha=8", "trainer.lr=1e-2")
    ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="s0", role="student", seed=0)).adapter
    start, start_rank = _target(store, fresh_base().model, ref)
    gen = torch.Generator().manual_seed(0)
    for step in range(30):
        ref = update_one(svc, update_request(ref, _batch(gen), seed=step, step=step)).adapter
    end, end_rank = _target(store, fresh_base().model, ref)
    assert start_rank > 1000 and end_rank == 0 and end > start + 1.0, (start_rank, end_rank, start, end)
