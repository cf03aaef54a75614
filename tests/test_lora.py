"""The batched multi-adapter LoRA layer: mixed batches equal per-adapter passes (outputs and gradients)."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.config import ALL_TARGET_MODULES
from populora.lora import LoraError, MultiLoraModel, random_lora_weights
from populora.store import lora_config_dict

RANK = 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def base(tiny):
    return copy.deepcopy(tiny.model)


def _config(rank=RANK, alpha=16.0):
    return lora_config_dict(rank, alpha, ALL_TARGET_MODULES)


def _model(base, n=3, mode="segments", trainable=False):
    mlm = MultiLoraModel(base, ALL_TARGET_MODULES, max_rank=16, mode=mode)
    for i in range(n):
        mlm.add_adapter(f"a{i}", random_lora_weights(base, ALL_TARGET_MODULES, RANK, seed=i, std=0.2), _config(),
                        trainable=trainable)
    return mlm


def _inputs(batch=6, length=5):
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 1000, (batch, length), generator=gen)


@pytest.mark.parametrize("mode", ["segments", "gather"])
@pytest.mark.parametrize("rows", [
    ["a0", "a0", None, "a1", "a2", "a2"],      # sorted: contiguous slices
    ["a1", None, "a0", "a1", "a2", "a0"],      # interleaved: index groups
    [None, "a0", "a0", "a1", "a1", "a2", "a2"],  # k rows per adapter in slot order: one bmm over the banks
])
def test_mixed_batch_equals_per_adapter(base, mode, rows):
    mlm = _model(base, mode=mode)
    ids = _inputs(len(rows))
    with mlm.use_rows(rows) as plan:
        assert (plan.uniform is not None) == (rows[0] is None)
    with torch.no_grad():
        mixed = mlm(ids, adapter_names=rows).logits
        for i, name in enumerate(rows):
            alone = mlm(ids[i:i + 1], adapter_names=[name]).logits
            torch.testing.assert_close(mixed[i:i + 1], alone, rtol=1e-4, atol=1e-5)
        plain = mlm(ids).logits  # no adapter_names: the base
        b = rows.index(None)
        torch.testing.assert_close(mixed[b], plain[b], rtol=1e-4, atol=1e-5)
    a = rows.index("a0")
    assert not torch.allclose(mixed[a], plain[a], atol=1e-3), "the adapter changes nothing: test is vacuous"


def test_matches_peft(base, tiny):
    """Same weights loaded by PEFT give the same logits: the keys, shapes and alpha/r scaling are PEFT's."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    weights = random_lora_weights(base, ALL_TARGET_MODULES, RANK, seed=7, std=0.2)
    cfg = _config(alpha=24.0)
    ids = _inputs(2)
    peft_model = get_peft_model(copy.deepcopy(tiny.model), LoraConfig(**{k: cfg[k] for k in (
        "r", "lora_alpha", "target_modules")}))
    # our keys are PEFT's saved keys as they are: every one is taken, and every LoRA weight PEFT has comes from them
    loaded = set_peft_model_state_dict(peft_model, weights)
    assert not loaded.unexpected_keys and not [k for k in loaded.missing_keys if "lora_" in k]
    saved = get_peft_model_state_dict(peft_model)
    assert sorted(saved) == sorted(weights)
    assert all(torch.equal(saved[k], weights[k]) for k in weights)
    mlm = MultiLoraModel(base, ALL_TARGET_MODULES, max_rank=RANK)
    mlm.add_adapter("x", weights, cfg)
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
        got = mlm(ids, adapter_names=["x", "x"]).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["segments", "gather"])
def test_gradients_reach_only_own_rows(base, mode):
    mlm = _model(base, n=2, mode=mode, trainable=True)
    ids = _inputs(4)
    rows = ["a1", "a0", None, "a1"]

    def loss_of(batch_ids, names):
        return mlm(batch_ids, adapter_names=names).logits.float().pow(2).mean(dim=(1, 2)).sum()

    loss_of(ids, rows).backward()
    mixed = {n: [p.grad.clone() for p in mlm.parameters_of(n)] for n in ("a0", "a1")}
    for n in ("a0", "a1"):
        for p in mlm.parameters_of(n):
            p.grad = None
    for n in ("a0", "a1"):
        picks = [i for i, r in enumerate(rows) if r == n]
        loss_of(ids[picks], [n] * len(picks)).backward()
        alone = [p.grad for p in mlm.parameters_of(n)]
        assert all(p.requires_grad for p in mlm.parameters_of(n))
        for g_mixed, g_alone in zip(mixed[n], alone, strict=True):
            torch.testing.assert_close(g_mixed, g_alone, rtol=1e-4, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in mixed["a0"])
    assert not any(p.requires_grad for p in base.parameters() if p is not None and not _is_lora(mlm, p))


def _is_lora(mlm, p):
    return any(p is q for n in mlm.adapter_names() for q in mlm.parameters_of(n))


def test_state_dict_round_trip_and_remove(base):
    mlm = _model(base, n=1)
    weights = mlm.state_dict_of("a0")
    assert all(k.startswith("base_model.model.") for k in weights)
    assert len(weights) == 2 * len(mlm.layers)
    mlm.add_adapter("copy", weights, _config())
    ids = _inputs(2)
    with torch.no_grad():
        torch.testing.assert_close(mlm(ids, adapter_names=["a0", "copy"]).logits[0],
                                   mlm(ids, adapter_names=["copy", "a0"]).logits[0])
    mlm.remove_adapter("copy")
    assert mlm.adapter_names() == ["a0"]
    with pytest.raises(LoraError, match="not loaded"):
        mlm(ids, adapter_names=["copy", None])


def test_bad_adapters_are_refused(base):
    mlm = MultiLoraModel(base, ALL_TARGET_MODULES, max_rank=4)
    with pytest.raises(LoraError, match="rank 8 > max_rank 4"):
        mlm.add_adapter("big", random_lora_weights(base, ALL_TARGET_MODULES, 8, seed=0), _config())
    small = random_lora_weights(base, ALL_TARGET_MODULES, 4, seed=0)
    key = next(k for k in small if k.endswith("lora_A.weight"))
    small[key] = small[key][:, :3]
    with pytest.raises(LoraError, match="expected"):
        mlm.add_adapter("bad", small, _config(rank=4))
    with pytest.raises(LoraError, match="no lora_A"):
        mlm.add_adapter("empty", {"x": torch.zeros(1)}, _config(rank=4))
    mlm.restore()
    assert isinstance(base.model.layers[0].self_attn.q_proj, torch.nn.Linear)


def test_slots_are_reused_and_banks_grow(base):
    mlm = _model(base, n=3)
    assert [mlm.slot_of(n) for n in ("a0", "a1", "a2")] == [0, 1, 2] and mlm.slot_of(None) == -1
    ids = _inputs(2)
    with torch.no_grad():
        before = mlm(ids, adapter_names=["a2", "a2"]).logits
        mlm.remove_adapter("a1")
        mlm.add_adapter("b", random_lora_weights(base, ALL_TARGET_MODULES, 4, seed=9, std=0.2), _config(rank=4))
        assert mlm.slot_of("b") == 1  # the freed slot; a smaller rank is zero-padded in the bank
        for i in range(3):
            mlm.add_adapter(f"c{i}", random_lora_weights(base, ALL_TARGET_MODULES, RANK, seed=20 + i), _config())
        torch.testing.assert_close(mlm(ids, adapter_names=["a2", "a2"]).logits, before)  # survived the growth
        rows = [None, "a0", "b", "a2", "c0"]
        mixed = mlm(_inputs(5), adapter_names=rows).logits
        for i, name in enumerate(rows):
            torch.testing.assert_close(mixed[i], mlm(_inputs(5)[i:i + 1], adapter_names=[name]).logits[0],
                                       rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mlm.state_dict_of("b")[next(iter(mlm.state_dict_of("b")))].shape[0], 4)


@pytest.mark.parametrize("kind", ["padded", "grouped"])
def test_decode_step_with_uneven_rows_equals_rows_alone(base, monkeypatch, kind):
    """A one-token step with uneven rows per adapter (slot 1 without rows) runs as batched matmuls over the slot
    banks, padded or grouped, and gives every row what it gets alone; a longer pass keeps the per-adapter path."""
    import populora.lora.paths as paths
    import populora.lora.rows as rows_module

    if kind == "grouped":
        assert rows_module.grouped_mm_works(torch.device("cpu"), torch.float32)  # the CPU path is real, not skipped
    monkeypatch.setattr(rows_module, "PAD_ROWS_PER_SLOT", 10**6 if kind == "padded" else -1)
    mlm = _model(base, n=4)
    rows = [None, "a0", "a0", "a0", "a2", "a3", "a3"]
    ids = _inputs(len(rows), length=1)
    with torch.no_grad():
        with mlm.use_rows(rows) as plan:
            assert plan.uniform is None and plan.span is not None and plan.span.kind == kind
            assert (plan.span.start, plan.span.end, plan.span.first, plan.span.slots) == (1, 7, 0, 4)
        with monkeypatch.context() as m:  # the step must not fall back to the per-adapter matmuls
            m.setattr(paths, "slices", lambda *a: pytest.fail("decode step took the slices path"))
            mixed = mlm(ids, adapter_names=rows).logits
        for i, name in enumerate(rows):
            torch.testing.assert_close(mixed[i:i + 1], mlm(ids[i:i + 1], adapter_names=[name]).logits,
                                       rtol=1e-4, atol=1e-5)
        longer = _inputs(len(rows), length=3)
        torch.testing.assert_close(mlm(longer, adapter_names=rows).logits[4],
                                   mlm(longer[4:5], adapter_names=["a2"]).logits[0], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(mixed[1], mixed[0], atol=1e-3), "the adapter changes nothing: test is vacuous"


def test_span_needs_slot_order_and_no_gradients(base):
    mlm = _model(base, n=3)
    with torch.no_grad():
        with mlm.use_rows(["a2", "a0"]) as plan:  # rows not in slot order: the per-adapter path
            assert plan.span is None
        with mlm.use_rows(["a0", None, "a1"]) as plan:  # base rows between adapters
            assert plan.span is None
    with mlm.use_rows(["a0", "a1", "a1"]) as plan:  # gradients on (training): never the batched path
        assert plan.span is None


def test_adapter_covering_some_modules_leaves_the_rest_at_the_base(base, tiny):
    """An adapter on q_proj only, in a freed slot whose former adapter covered every module: its rows get the base
    everywhere else, on every path (per-adapter slices, uniform bmm, decode span), equal to PEFT's."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    mlm = _model(base, n=3)
    mlm.remove_adapter("a1")
    weights = random_lora_weights(base, ["q_proj"], RANK, seed=5, std=0.2)
    cfg = lora_config_dict(RANK, 16.0, ["q_proj"])
    mlm.add_adapter("q", weights, cfg)
    assert mlm.slot_of("q") == 1
    peft_model = get_peft_model(copy.deepcopy(tiny.model), LoraConfig(r=RANK, lora_alpha=16.0,
                                                                       target_modules=["q_proj"]))
    set_peft_model_state_dict(peft_model, weights)
    with torch.no_grad():
        for length in (1, 4):
            ids = _inputs(4, length=length)
            want = peft_model(input_ids=ids).logits
            for rows in (["q"] * 4, ["a0", "q", "q", "a2"], ["a0", "a0", "q", "q"]):
                got = mlm(ids, adapter_names=rows).logits
                for i in (i for i, r in enumerate(rows) if r == "q"):
                    torch.testing.assert_close(got[i], want[i], rtol=1e-4, atol=1e-5)


def test_an_adapter_added_later_on_fewer_modules_runs_batched_with_the_others(base):
    """The second adapter covers q_proj only, so the other modules' banks were sized for the first slot alone: every
    bank is grown to the model's capacity, and the batched paths (uniform bmm, decode span) slice both slots."""
    mlm = MultiLoraModel(base, ALL_TARGET_MODULES, max_rank=RANK)
    mlm.add_adapter("a0", random_lora_weights(base, ALL_TARGET_MODULES, RANK, seed=0, std=0.2), _config())
    mlm.add_adapter("q", random_lora_weights(base, ["q_proj"], RANK, seed=1, std=0.2),
                    lora_config_dict(RANK, 16.0, ["q_proj"]))
    with torch.no_grad():
        for rows, length in ((["a0", "q"], 3), (["a0", "q", "q"], 1)):
            ids = _inputs(len(rows), length=length)
            mixed = mlm(ids, adapter_names=rows).logits
            for i, name in enumerate(rows):
                torch.testing.assert_close(mixed[i], mlm(ids[i:i + 1], adapter_names=[name]).logits[0],
                                           rtol=1e-4, atol=1e-5)
