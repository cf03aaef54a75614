import json
import multiprocessing as mp
import os
import signal

import pytest
import torch
from peft import PeftModel

from populora.store import (
    AdapterRef,
    ArtifactStore,
    StoreError,
    lora_config_dict,
    lora_factors,
    peft_module_names,
)


def random_adapter(base, rank=4, seed=0):
    """PEFT-keyed random LoRA weights for every q_proj/v_proj of a model."""
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, mod in base.named_modules():
        if name.endswith(("q_proj", "v_proj")):
            weights[f"base_model.model.{name}.lora_A.weight"] = torch.randn(rank, mod.in_features, generator=g)
            weights[f"base_model.model.{name}.lora_B.weight"] = torch.randn(mod.out_features, rank, generator=g)
    return weights, lora_config_dict(rank, 2.0 * rank, ["q_proj", "v_proj"])


def test_roundtrip_and_versions(store, tiny):
    w, cfg = random_adapter(tiny.model)
    r1 = store.save("T0", w, cfg, meta={"step": 0, "role": "teacher"})
    r2 = store.save("T0", w, cfg)
    assert (r1.version, r2.version) == (1, 2)
    assert store.versions("T0") == [1, 2] and store.latest("T0") == r2
    got = store.read(r1)
    assert got.meta["role"] == "teacher" and got.rank == 4 and got.scaling == 2.0
    assert all(torch.equal(got.weights[k], w[k]) for k in w)
    mods = peft_module_names(got.weights)
    assert len(mods) == 4
    a, b = lora_factors(got.weights, mods[0])
    assert a.shape[0] == 4 and b.shape[1] == 4
    with pytest.raises(StoreError, match="immutable"):
        store.save("T0", w, cfg, version=1)


def test_loads_with_plain_peft(store, tiny):
    w, cfg = random_adapter(tiny.model)
    ref = store.save("S1", w, cfg)
    model = PeftModel.from_pretrained(tiny.model, store.path_of(ref))
    try:
        sd = model.state_dict()
        key = next(k for k in w if "q_proj.lora_A" in k)
        peft_key = key.replace("lora_A.weight", "lora_A.default.weight")
        assert torch.equal(sd[peft_key], w[key])
        ids = torch.tensor([[1, 2, 3]])
        with torch.no_grad():
            with_lora = model(ids).logits
            with model.disable_adapter():
                without = model(ids).logits
        assert not torch.allclose(with_lora, without)
    finally:
        model.unload()


def _slow_writer(root, ready):
    from populora.store import ArtifactStore as S

    s = S(root)
    big = {"base_model.model.x.lora_A.weight": torch.zeros(4, 4_000_000),
           "base_model.model.x.lora_B.weight": torch.zeros(8, 4)}
    ready.set()
    while True:  # write until killed
        s.save("K", big, {"r": 4, "target_modules": ["x"]})


def test_killed_write_leaves_no_visible_version(tmp_path):
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_slow_writer, args=(str(tmp_path), ready))
    p.start()
    ready.wait(60)
    import time

    time.sleep(0.8)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    store = ArtifactStore(tmp_path)
    for v in store.versions("K"):  # every visible version is complete and readable
        store.read(AdapterRef("K", v))
    visible = [d.name for d in store.adapter_dir("K").iterdir() if not d.name.startswith(".")]
    assert all(d.startswith("v") for d in visible)


def test_corrupt_and_missing_are_clear(store, tiny):
    w, cfg = random_adapter(tiny.model)
    ref = store.save("C", w, cfg)
    path = store.path_of(ref)
    (path / "adapter_model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(StoreError, match="corrupt"):
        store.read(ref)
    (path / "adapter_config.json").write_text("{not json")
    with pytest.raises(StoreError, match="corrupt"):
        store.read(ref)
    with pytest.raises(StoreError, match="not found"):
        store.read(AdapterRef("C", 9))
    with pytest.raises(StoreError, match="no version"):
        store.latest("nobody")


def test_bad_ids_and_foreign_uris(store, tiny):
    w, cfg = random_adapter(tiny.model)
    with pytest.raises(StoreError, match="invalid adapter id"):
        store.save("../escape", w, cfg)
    ref = store.save("A", w, cfg)
    with pytest.raises(StoreError, match="not this store"):
        store.path_of(AdapterRef("A", 1, "file:///etc"))
    assert json.loads((store.path_of(ref) / "adapter_config.json").read_text())["peft_type"] == "LORA"


def test_resolve_names_the_stored_version(store, tiny):
    w, cfg = random_adapter(tiny.model)
    store.save("R", w, cfg)
    r2 = store.save("R", w, cfg)
    assert store.resolve(AdapterRef("R", 0)) == r2  # 0 = the latest
    assert store.resolve(AdapterRef("R", 1)) == store.ref("R", 1)
    with pytest.raises(StoreError, match=r"R@v7 is not in the store .*versions present: \[1, 2\]"):
        store.resolve(AdapterRef("R", 7))
    with pytest.raises(StoreError, match="no version"):
        store.resolve(AdapterRef("nobody", 0))
    with pytest.raises(StoreError, match="not this store"):
        store.resolve(AdapterRef("R", 1, "file:///etc"))


def test_never_pickle(store, tiny):
    w, cfg = random_adapter(tiny.model)
    ref = store.save("P", w, cfg, optimizer_state={"step": torch.tensor(3.0)})
    files = sorted(p.name for p in store.path_of(ref).iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", "meta.json", "optimizer.safetensors"]
    _, opt = store.load(ref, with_optimizer=True)
    assert opt["step"].item() == 3.0
