"""Packed base weights (populora/lora/prepack.py): the same logits as the plain matmul, passes with gradients on the
module's own weight, and what is not packable is left alone."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.adapters import make_host
from populora.config import ALL_TARGET_MODULES
from populora.lora import prepack
from tests.inference.conftest import save_adapter

pytestmark = pytest.mark.skipif(prepack.supported(torch.zeros(1, 1)) is not None,
                                reason="this torch build cannot pack weights")


@pytest.fixture
def refs(tiny, store):
    return [save_adapter(store, tiny.model, f"a{i}", seed=i) for i in range(3)]  # a0@v1, a1@v1, a2@v1


def _host(tiny, store, refs, packed: bool):
    model = copy.deepcopy(tiny.model)
    host = make_host("batched", model, ALL_TARGET_MODULES, 8)
    stats = host.prepack() if packed else None
    for ref in refs:
        host.add(ref.key, store.read(ref).weights, store.read(ref).config)
    return host, stats


def _batch(tiny, rows: int = 5, length: int = 7):
    ids = torch.randint(5, tiny.tokenizer.vocab_size - 5, (rows, length), generator=torch.Generator().manual_seed(3))
    return ids, torch.ones_like(ids)


def test_packed_logits_equal_the_plain_ones(tiny, store, refs):
    """A mixed batch (three adapters and the base), prompt pass and a decode step, through packed and plain weights."""
    plain, _ = _host(tiny, store, refs, packed=False)
    packed, stats = _host(tiny, store, refs, packed=True)
    layers = len(packed.multi.layers)
    assert stats.packed == layers + 1 and stats.skipped is None  # every projection and the LM head
    assert all(layer.packed is not None for layer in packed.multi.layers.values())
    ids, mask = _batch(tiny)
    names = ["a0@v1", "a1@v1", None, "a2@v1", "a0@v1"]
    with torch.inference_mode():
        want = plain.forward(names, input_ids=ids, attention_mask=mask).logits
        got = packed.forward(names, input_ids=ids, attention_mask=mask).logits
        one = packed.forward(names[:1], input_ids=ids[:1, :1], attention_mask=mask[:1, :1]).logits
        one_plain = plain.forward(names[:1], input_ids=ids[:1, :1], attention_mask=mask[:1, :1]).logits
    assert want.abs().max() > 0.1  # a real signal, not zeros on both sides
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(one, one_plain, rtol=1e-4, atol=1e-4)


def test_a_pass_with_gradients_uses_the_modules_own_weight(tiny):
    """The trainer's passes: packing changes nothing for them, and the LM head still gives its weight a gradient."""
    head = torch.nn.Linear(16, 9, bias=False)
    layer_model = make_host("batched", copy.deepcopy(tiny.model), ALL_TARGET_MODULES, 8)
    prepack.pack(layer_model.multi.layers.values(), head)
    assert head.packed is not None
    head.packed.weight = torch.ops.mkldnn._reorder_linear_weight(torch.zeros(9, 16), prepack.ROWS_HINT)
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert head(x).abs().max() == 0  # no gradients: the packed weight (zeroed above) answers
    head.weight.requires_grad_(True)
    out = head(x)  # gradients on: the module's own weight
    torch.testing.assert_close(out, torch.nn.functional.linear(x, head.weight, head.bias))
    out.sum().backward()
    assert head.weight.grad is not None and head.weight.grad.abs().max() > 0


def test_what_cannot_be_packed_is_left_alone(tiny):
    assert "bfloat16" in prepack.supported(torch.zeros(2, 2, dtype=torch.bfloat16))
    assert "meta" in prepack.supported(torch.zeros(2, 2, device="meta"))
    model = copy.deepcopy(tiny.model).to(torch.bfloat16)
    host = make_host("batched", model, ALL_TARGET_MODULES, 8)
    stats = host.prepack()
    assert stats.packed == 0 and "bfloat16" in stats.skipped
    assert all(layer.packed is None for layer in host.multi.layers.values())
    peft = make_host("peft", copy.deepcopy(tiny.model), ALL_TARGET_MODULES, 8)
    assert peft.prepack().packed == 0


def test_the_backend_packs_unless_configured_off(store):
    from populora.config.loader import load_config
    from services.inference.hf import HfBackend

    on = HfBackend.from_config(load_config("cpu-tiny"), store)
    assert on.packing.packed == len(on.host.multi.layers) + 1
    off = HfBackend.from_config(load_config("cpu-tiny", overrides=["generation.prepack_weights=false"]), store)
    assert off.packing is None
    assert all(layer.packed is None for layer in off.host.multi.layers.values())
