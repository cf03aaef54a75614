"""The `vllm` backend on vLLM for CPU (`make test-vllm` runs this in .venv-vllm): a mixed batch, a version swap,
and greedy output equal to the `hf` backend's on the same adapters.

The `tiny` model's head size (16) is not one vLLM's CPU attention supports, so these tests use SmolLM2-135M
(head size 64) in float32 and skip where vLLM is not importable (the project's main venv).
"""

from __future__ import annotations

import os

import pytest

from populora.config import ALL_TARGET_MODULES
from populora.lora import random_lora_weights
from populora.store import AdapterRef, ArtifactStore, lora_config_dict
from services.inference.backend import Request, Sampling, UnknownAdapter

pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-vllm` builds .venv-vllm and runs this")
pytestmark = pytest.mark.slow
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache; the default takes most of the host

MODEL = "smollm2-135m"
RANK = 8
N_ADAPTERS = 4
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import torch

    from populora.models import load_base_model

    torch.manual_seed(0)
    base = load_base_model(MODEL)
    store = ArtifactStore(tmp_path_factory.mktemp("store"))
    config = lora_config_dict(RANK, 2.0 * RANK, ALL_TARGET_MODULES)
    refs = [store.save(f"a{i}", random_lora_weights(base.model, ALL_TARGET_MODULES, RANK, seed=i, std=0.05), config)
            for i in range(N_ADAPTERS)]
    from services.inference.vllm_backend import VllmBackend

    backend = VllmBackend(base.path, MODEL, store, max_loras=2 * N_ADAPTERS, max_lora_rank=16, max_cpu_loras=8,
                          max_batch=32, max_resident=8, dtype="float32", gpu_memory_utilization=0.2,
                          max_model_len=512, enforce_eager=True)
    return base, store, refs, backend


def _req(rid, adapter, text="Write a Python function that adds two numbers."):
    return Request(rid, adapter, messages=[{"role": "user", "content": text}],
                   sampling=Sampling(max_new_tokens=NEW_TOKENS))


def _mixed(refs):
    """8 rows: adapters and base rows mixed; r0 and r2 share a prompt, r0 on an adapter and r2 on the base."""
    return [_req(f"r{i}", None if i % 3 == 2 else refs[i % len(refs)],
                 text=f"Question {i % 2}: what is 3 + {i % 2}?") for i in range(8)]


def test_mixed_batch_equals_hf_greedy(setup):
    from services.inference.hf import HfBackend

    base, store, refs, backend = setup
    requests = _mixed(refs)
    got = {r.request_id: r for r in backend.generate(requests)}
    assert set(got) == {r.request_id for r in requests}
    assert {got[r.request_id].adapter.key if r.adapter else None for r in requests} >= {"a0@v1", "a1@v1", None}
    hf = HfBackend(base, store, ALL_TARGET_MODULES, max_rank=RANK)
    expected = {r.request_id: r for r in hf.generate(requests)}
    # Two fp32 engines with different kernels agree until a near-tie flips one greedy choice; after that the
    # continuations differ. Tolerance: the first token of every row, and most of each row's tokens before the
    # first disagreement.
    prefix = total = 0
    for rid, res in got.items():
        a, b = res.completions[0].token_ids, expected[rid].completions[0].token_ids
        assert a[:1] == b[:1], (rid, {k: v.completions[0].token_ids for k, v in got.items()},
                                {k: v.completions[0].token_ids for k, v in expected.items()})
        common = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefix, total = prefix + common, total + max(len(a), len(b))
    assert prefix / total >= 0.6, f"vLLM and hf agree on {prefix}/{total} greedy tokens before diverging"
    assert got["r0"].completions[0].token_ids != got["r2"].completions[0].token_ids, "the adapter had no effect"


def test_version_swap_gets_a_new_lora_name_and_id(setup):
    base, store, refs, backend = setup
    [old] = backend.generate([_req("x", AdapterRef("a1", 0))])
    v2 = store.save("a1", random_lora_weights(base.model, ALL_TARGET_MODULES, RANK, seed=99, std=0.05),
                    lora_config_dict(RANK, 2.0 * RANK, ALL_TARGET_MODULES))
    backend.load_adapter(v2)
    [new] = backend.generate([_req("x", AdapterRef("a1", 0))])
    [again] = backend.generate([_req("x", refs[1])])
    assert old.adapter.key == "a1@v1" and new.adapter.key == "a1@v2"
    r1, r2 = backend.lora_request(refs[1]), backend.lora_request(v2)
    assert r1.lora_name != r2.lora_name and r1.lora_int_id != r2.lora_int_id
    assert new.completions[0].token_ids != old.completions[0].token_ids
    assert again.completions[0].token_ids == old.completions[0].token_ids  # v1 still served as v1
    assert backend.unload_adapter(AdapterRef("a1", 0)) == 2
    with pytest.raises(UnknownAdapter):
        backend.generate([_req("x", AdapterRef("missing", 0))])
