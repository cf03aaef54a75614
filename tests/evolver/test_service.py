"""The evolver service end to end: store in and out, in-process and gRPC clients, PEFT loading, the CLI, and bad
inputs that must fail clearly and write nothing."""

import argparse
import copy
import json

import grpc
import pytest
import torch

from populora.config import EvolutionConfig
from populora.lora import lora_keys
from populora.pb import common_pb2, evolver_pb2
from populora.rpc import ServiceError
from populora.store import lora_config_dict
from services.evolver.cli import main as cli_main
from services.evolver.service import EvolverService
from tests.conftest import served
from tests.evolver.conftest import SMALL_MODULES, TARGETS, delta_w, save_parent


def pb_ref(adapter_id, version=1):
    return common_pb2.AdapterRef(adapter_id=adapter_id, version=version)


def breed_request(operator, parents, child_id="C1", seed=7, **params):
    return evolver_pb2.BreedRequest(parents=[pb_ref(p) for p in parents], operator=operator, seed=seed,
                                    child_id=child_id, params=params)


@pytest.fixture
def client(store):
    return EvolverService(store, EvolutionConfig())


def test_breed_writes_child_v1_with_parents_config_and_epsilon(store, parents, client):
    resp = client.Breed(breed_request("M1", ["P1"]))
    assert (resp.child.adapter_id, resp.child.version) == ("C1", 1)
    assert resp.child.uri == store.ref("C1", 1).uri
    child, parent = store.read(store.ref("C1", 1)), store.read(parents[0])
    assert child.config == parent.config
    assert child.meta["epsilon"] == pytest.approx(resp.epsilon) and child.meta["operator"] == "M1"
    assert child.meta["parents"] == ["P1@v1"] and child.meta["seed"] == 7
    assert json.loads(resp.params_json)["epsilon"] == pytest.approx(resp.epsilon)
    assert resp.relative_change > 0 and resp.effective_rank == 8 and resp.seconds > 0
    assert resp.stats["modules"] == len(SMALL_MODULES)
    # the reported relative change is the dense one
    num = sum(float((delta_w(child.weights, m) - delta_w(parent.weights, m)).norm() ** 2) for m, _, _ in SMALL_MODULES)
    den = sum(float(delta_w(parent.weights, m).norm() ** 2) for m, _, _ in SMALL_MODULES)
    assert resp.relative_change == pytest.approx((num / den) ** 0.5, rel=1e-6)
    # the child's epsilon is what its own children inherit
    grandchild = client.Breed(breed_request("M1", ["C1"], child_id="G1", seed=1))
    assert grandchild.epsilon != resp.epsilon
    assert abs(grandchild.epsilon / resp.epsilon - 1) < 0.3


def test_epsilon_survives_trainer_versions(store, client):
    """The trainer writes v2, v3, ... without the member's ε; the evolver finds it in the earlier version."""
    save_parent(store, "M", seed=1, meta={"epsilon": 0.5})
    save_parent(store, "M", seed=2, meta={"step": 10})  # a trainer update
    resp = client.Breed(evolver_pb2.BreedRequest(parents=[pb_ref("M", 2)], operator="M1", seed=1, child_id="MC"))
    assert abs(resp.epsilon / 0.5 - 1) < 0.3


def test_crossover_and_latest_version(store, parents, client):
    save_parent(store, "P2", seed=5)  # P2 v2
    resp = client.Breed(evolver_pb2.BreedRequest(parents=[pb_ref("P1"), pb_ref("P2", 0)], operator="X4",
                                                 seed=1, child_id="C2", params={"eta": 1.2}))
    assert store.read(store.ref("C2", 1)).meta["parents"] == ["P1@v1", "P2@v2"]
    assert json.loads(resp.params_json)["eta"] == 1.2


def test_list_operators(client):
    ops = {o.name: o for o in client.ListOperators(evolver_pb2.ListOperatorsRequest()).operators}
    assert sorted(ops) == ["M1", "M2", "M3", "M4", "R1", "X1", "X2", "X3", "X4"]
    assert ops["M4"].defaults["epsilon"] == 0.15 and ops["X1"].defaults["p"] == 0.7
    assert ops["X1"].n_parents == 2 and ops["M3"].n_parents == 1 and ops["X2"].description


def _assert_nothing_written(store, child_id="C1"):
    assert store.versions(child_id) == []
    d = store.adapter_dir(child_id)
    assert not d.exists() or not any(d.iterdir())


@pytest.mark.parametrize("setup,request_args,code,words", [
    (lambda s: save_parent(s, "Q", modules=SMALL_MODULES[:7]), ("X2", ["P1", "Q"]), "INVALID_ARGUMENT",
     "target modules"),
    (lambda s: save_parent(s, "Q", targets=["q_proj"]), ("X3", ["P1", "Q"]), "INVALID_ARGUMENT",
     "differ in target_modules"),
    (lambda s: save_parent(s, "Q", modules=[(m, 24, 30) if "k_proj" in m else (m, i, o)
                                            for m, i, o in SMALL_MODULES]), ("X4", ["P1", "Q"]),
     "INVALID_ARGUMENT", "shape of base_model.model.model.layers.0.self_attn.k_proj"),
    (lambda s: save_parent(s, "Q", config_extra={"use_rslora": True}), ("X1", ["P1", "Q"]), "INVALID_ARGUMENT",
     "use_rslora"),
    (lambda s: save_parent(s, "Q", config_extra={"use_dora": True}), ("M1", ["Q"]), "INVALID_ARGUMENT", "DoRA"),
    (lambda s: save_parent(s, "Q", config_extra={"bias": "all"}), ("M1", ["Q"]), "INVALID_ARGUMENT", "bias"),
    (lambda s: None, ("M1", ["P1", "P2"]), "INVALID_ARGUMENT", "takes 1 parent"),
    (lambda s: None, ("X1", ["P1"]), "INVALID_ARGUMENT", "takes 2 parent"),
    (lambda s: None, ("M9", ["P1"]), "INVALID_ARGUMENT", "unknown operator"),
    (lambda s: None, ("M1", ["nope"]), "NOT_FOUND", "nope@v1"),
])
def test_bad_inputs_fail_clearly_and_write_nothing(store, parents, client, setup, request_args, code, words):
    setup(store)
    with pytest.raises(ServiceError) as err:
        client.Breed(breed_request(*request_args))
    assert err.value.code.name == code and words in err.value.message, err.value.message
    _assert_nothing_written(store)


@pytest.mark.parametrize("operator,params,words", [
    ("M1", {"p": 0.5}, "no parameter(s) ['p']"),
    ("X1", {"p": 1.0}, "p=1 must be in [0, 1)"),
    ("X3", {"k": 8.0}, "k=8 must be an integer in [1, 7]"),
    ("X3", {"k": 2.5}, "integer"),
    ("X4", {"eta_min": 2.0, "eta_max": 1.0}, "eta_max"),
    ("M2", {"fraction": 0.0}, "fraction=0"),
    ("R1", {"rank": 8.0}, "R1 changes the rank"),
    ("R1", {"rank": 600.0}, "rank=600 must be an integer in [1, 512]"),
    ("M1", {"rank": 16.0}, "no parameter(s) ['rank']"),
])
def test_bad_params_fail_clearly(store, parents, client, operator, params, words):
    refs = ["P1", "P2"][:2 if operator[0] == "X" else 1]
    with pytest.raises(ServiceError) as err:
        client.Breed(breed_request(operator, refs, **params))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and words in err.value.message, err.value.message
    _assert_nothing_written(store)


def test_existing_child_and_bad_child_id(store, parents, client):
    client.Breed(breed_request("M2", ["P1"]))
    before = store.read(store.ref("C1", 1)).weights
    with pytest.raises(ServiceError) as err:
        client.Breed(breed_request("M1", ["P1"]))
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION and "already exists" in err.value.message
    after = store.read(store.ref("C1", 1)).weights
    assert all(torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ServiceError) as err:
        client.Breed(breed_request("M1", ["P1"], child_id="../x"))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_corrupt_parent_is_invalid(store, parents, client):
    (store.path_of(parents[0]) / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad")
    with pytest.raises(ServiceError) as err:
        client.Breed(breed_request("M1", ["P1"]))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "safetensors" in err.value.message
    _assert_nothing_written(store)


def test_grpc_client_same_answers_and_codes(store, parents):
    service = EvolverService(store, EvolutionConfig())
    with served(service) as remote:
        resp = remote.Breed(breed_request("X2", ["P1", "P2"], child_id="R1"))
        local = service.Breed(breed_request("X2", ["P1", "P2"], child_id="R2"))
        a, b = store.read(store.ref("R1", 1)).weights, store.read(store.ref("R2", 1)).weights
        assert all(torch.equal(a[k], b[k]) for k in a), "same seed, same child over gRPC and in-process"
        assert resp.relative_change == local.relative_change
        assert len(remote.ListOperators(evolver_pb2.ListOperatorsRequest()).operators) == 9
        with pytest.raises(ServiceError) as err:
            remote.Breed(breed_request("X1", ["P1"], child_id="R3"))
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "takes 2 parent" in err.value.message


def _tiny_parent(store, adapter_id, model, seed, rank=4):
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, mod in model.named_modules():
        if name.rsplit(".", 1)[-1] in TARGETS and isinstance(mod, torch.nn.Linear):
            key_a, key_b = lora_keys(name)
            weights[key_a] = torch.randn(rank, mod.in_features, generator=g) * 0.1
            weights[key_b] = torch.randn(mod.out_features, rank, generator=g) * 0.1
    return store.save(adapter_id, weights, lora_config_dict(rank, 2.0 * rank, TARGETS))


def test_child_loads_in_peft_and_runs_forward(store, tiny):
    from peft import PeftModel

    _tiny_parent(store, "T1", tiny.model, 1)
    _tiny_parent(store, "T2", tiny.model, 2)
    client = EvolverService(store, EvolutionConfig())
    resp = client.Breed(breed_request("X1", ["T1", "T2"], child_id="TC"))
    model = PeftModel.from_pretrained(copy.deepcopy(tiny.model), store.path_of(store.ref("TC", 1)))
    ids = tiny.tokenizer("def f(a): return a", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
        with model.disable_adapter():
            base = model(ids).logits
    assert torch.isfinite(logits).all() and not torch.allclose(logits, base)
    loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert len(loaded) == 2 * 7 * 2 and resp.effective_rank == 4


@pytest.mark.parametrize("operator,parents,params,rank", [("R1", ["T1"], {"rank": 8.0}, 8),
                                                         ("X4", ["T3", "T1"], {}, 8), ("X2", ["T1", "T3"], {}, 4)])
def test_a_child_of_another_rank_loads_in_peft_with_its_update(store, tiny, operator, parents, params, rank):
    """Across ranks (spec §9, "Mixed ranks") the child is a plain PEFT adapter of its own rank: R1 at ε = 0 and X4 at
    η = 1 give the first parent's update at another rank or alpha/r, and PEFT computes the same logits from it."""
    from peft import PeftModel

    _tiny_parent(store, "T1", tiny.model, 1)
    _tiny_parent(store, "T3", tiny.model, 3, rank=8)
    exact = {"R1": {"epsilon": 0.0}, "X4": {"eta": 1.0}}.get(operator, {})
    resp = EvolverService(store, EvolutionConfig()).Breed(breed_request(operator, parents, child_id="TC",
                                                                        **params, **exact))
    assert resp.rank == rank and json.loads(resp.params_json)["rank"] == rank
    ids = tiny.tokenizer("def f(a): return a", return_tensors="pt").input_ids
    logits = {}
    for adapter_id in ("TC", parents[0]):
        model = PeftModel.from_pretrained(copy.deepcopy(tiny.model), store.path_of(store.ref(adapter_id, 1)))
        assert model.peft_config["default"].r == store.read(store.ref(adapter_id, 1)).rank
        with torch.no_grad():
            logits[adapter_id] = model(ids).logits
    if operator in exact:
        assert torch.allclose(logits["TC"], logits[parents[0]], atol=1e-4), resp.relative_change
    else:
        assert torch.isfinite(logits["TC"]).all()


def _cli_args(operator, parents, out, seed=0, params=()):
    return argparse.Namespace(operator=operator, parents=[str(p) for p in parents], out=str(out), seed=seed,
                              param=list(params))


def test_cli_writes_a_peft_directory_and_prints_json(store, parents, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("POPULORA_CONFIG", raising=False)
    out = tmp_path / "child"
    paths = [store.path_of(r) for r in parents]
    assert cli_main(_cli_args("X4", paths, out, seed=3, params=["eta=1.0"])) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["operator"] == "X4" and summary["params"]["eta"] == 1.0 and summary["relative_change"] < 1e-5
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors",
                                                    "meta.json"]
    assert json.loads((out / "adapter_config.json").read_text()) == store.read(parents[0]).config


@pytest.mark.parametrize("operator,n,params,words", [
    ("M1", 2, [], "takes 1 parent"),
    ("M1", 1, ["epsilon"], "name=value"),
    ("M1", 1, ["epsilon=abc"], "not a number"),
    ("Z1", 1, [], "unknown operator"),
    ("M1", 1, ["zeta=1"], "no parameter"),
])
def test_cli_bad_input_exit_2_and_writes_nothing(store, parents, tmp_path, capsys, operator, n, params, words):
    out = tmp_path / "child"
    code = cli_main(_cli_args(operator, [store.path_of(r) for r in parents][:n], out, params=params))
    assert code == 2 and words in capsys.readouterr().err
    assert not out.exists()
    code = cli_main(_cli_args("M1", [tmp_path / "missing"], out))
    assert code == 2 and "not a directory" in capsys.readouterr().err and not out.exists()
