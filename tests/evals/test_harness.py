"""The harness on the tiny model and the real sandbox: an adapter scores the same alone and inside a batch of 8,
split batches change nothing, pass@k with samples, and bad targets refused before anything is generated."""

from __future__ import annotations

import pytest

from populora.evals import EvalError, EvalTarget, evaluate
from populora.pb import inference_pb2
from tests.evals.conftest import save_adapter


def _targets(refs, store):
    return [EvalTarget(f"{r.adapter_id}@v{r.version}", r.adapter_id, r.version, str(store.path_of(r)))
            for r in refs]


@pytest.mark.parametrize("benchmark,chat", [("humaneval", False), ("humaneval", True), ("heldout", True)])
def test_an_adapter_alone_and_in_a_batch_of_8_gives_identical_completions_and_scores(services, adapters, store,
                                                                                    benchmark, chat):
    targets = _targets(adapters, store)
    kw = dict(limit=3, max_new_tokens=12, chat=chat)
    batched = evaluate(services, targets, benchmark, **kw)
    alone = evaluate(services, [targets[3]], benchmark, **kw)[0]
    together = batched[3]
    assert together.to_json() == alone.to_json()
    assert [p.answers for p in together.problems] == [p.answers for p in alone.problems]
    assert len({tuple(p.answers for p in r.problems) for r in batched}) > 1, "adapters wrote the same: no mix-up seen"
    assert all(len(p.answers[0]) > 0 for p in alone.problems)


def test_members_of_ranks_4_8_32_in_one_batch_score_as_each_alone(services, store, tiny):
    """Spec 9, "Mixed ranks": an evaluation batch of members at ranks 4, 8 and 32 (one lora_alpha) gives each the
    completions and scores it gets alone."""
    refs = [save_adapter(store, tiny.model, f"run.R{r}", seed=50 + r, rank=r, alpha=16.0) for r in (4, 8, 32)]
    targets = _targets(refs, store)
    kw = dict(limit=3, max_new_tokens=12, chat=True)
    batched = evaluate(services, targets, "heldout", **kw)
    for target, together in zip(targets, batched, strict=True):
        alone = evaluate(services, [target], "heldout", **kw)[0]
        assert together.to_json() == alone.to_json()
        assert [p.answers for p in together.problems] == [p.answers for p in alone.problems], target.label
    assert len({tuple(p.answers for p in r.problems) for r in batched}) > 1, "the ranks wrote the same"


def test_results_have_the_documented_shape_and_split_batches_change_nothing(services, adapters, store):
    targets = [EvalTarget("base", None)] + _targets(adapters[:3], store)
    one = evaluate(services, targets, "humaneval", limit=3, max_new_tokens=8, chat=False, run_id="r")
    split = evaluate(services, targets, "humaneval", limit=3, max_new_tokens=8, chat=False, run_id="r", max_rows=5)
    assert [r.to_json() for r in one] == [r.to_json() for r in split]
    assert [[p.answers for p in r.problems] for r in one] == [[p.answers for p in r.problems] for r in split]
    body = one[0].to_json()
    assert set(body) == {"run_id", "adapter_id", "version", "label", "benchmark", "protocol", "n_problems",
                         "samples", "pass_at_1", "pass_at_k", "splits", "set_apart", "problems"}
    assert [r.protocol for r in one] == ["benchmark", "training", "training", "training"]  # the defaults
    assert (body["splits"], body["set_apart"]) == ({}, [])
    assert (body["adapter_id"], body["label"], body["run_id"], body["n_problems"]) == (None, "base", "r", 3)
    assert body["pass_at_k"] == {1: body["pass_at_1"]}
    assert set(body["problems"][0]) == {"id", "passed", "n", "error"} and body["problems"][0]["id"] == "HumanEval/0"
    assert one[1].adapter_id == adapters[0].adapter_id and one[1].version == 1


def test_samples_give_pass_at_k(services, adapters, store):
    [r] = evaluate(services, _targets(adapters[:1], store), "heldout", limit=3, samples=3, temperature=1.0,
                   max_new_tokens=8)
    assert r.samples == 3 and sorted(r.pass_at_k) == [1, 2, 3]
    assert all(p.n == 3 and len(p.answers) == 3 for p in r.problems)
    assert len(set(r.problems[0].answers)) > 1  # sampled, not greedy


def test_bad_targets_and_settings_are_refused_before_generating(services, adapters, store, tiny):
    target = _targets(adapters[:1], store)[0]
    cases = {
        "nothing to evaluate": [],
        "run.Nope": [EvalTarget("run.Nope@v1", "run.Nope", 1, None)],
        "v9": [EvalTarget("run.A0@v9", "run.A0", 9, None)],
        "no adapter directory": [EvalTarget("x", "run.A0", 1, "/nonexistent/v1")],
        "repeat": [target, target],
    }
    other = save_adapter(store, tiny.model, "run.Other", seed=3, base_model="smollm2-135m")
    cases["trained on base model 'smollm2-135m'"] = _targets([other], store)
    for words, targets in cases.items():
        with pytest.raises(EvalError, match=words):
            evaluate(services, targets, "humaneval", limit=1, max_new_tokens=4)
    for kw, words in [({"samples": 2}, "--temperature > 0"), ({"samples": 0}, "--samples"),
                      ({"temperature": -1.0}, "--temperature")]:
        with pytest.raises(EvalError, match=words):
            evaluate(services, [target], "humaneval", limit=1, **kw)
    with pytest.raises(EvalError, match="unknown benchmark"):
        evaluate(services, [target], "nope")
    with pytest.raises(EvalError, match="--data"):  # read from the user's file only
        evaluate(services, [target], "humaneval-plus")
    # nothing was generated: the base model's rows never reached the backend
    assert services.inference.backend.decoder.steps == 0
    listed = services.inference.ListAdapters(inference_pb2.ListAdaptersRequest())
    assert listed.base_model == "tiny"


def test_over_grpc_the_scores_and_answers_are_the_same(services, adapters, store):
    from tests.conftest import served
    from tests.evals.conftest import EvalServices

    targets = [EvalTarget("base", None)] + _targets(adapters[:2], store)
    local = evaluate(services, targets, "heldout", limit=3, max_new_tokens=8)
    with served(services.inference) as inference, served(services.sandbox) as sandbox:
        remote = evaluate(EvalServices(inference, sandbox), targets, "heldout", limit=3, max_new_tokens=8)
    assert [r.to_json() for r in local] == [r.to_json() for r in remote]
    assert [[p.answers for p in r.problems] for r in local] == [[p.answers for p in r.problems] for r in remote]
