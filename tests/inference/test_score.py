"""Score: the log-probability of a continuation after a prompt, without generating. What the `hf` backend gives is
the sum of log_softmax over the continuation's tokens of a plain transformers forward pass (PEFT for an adapter);
base and adapter rows mixed in one request give what each gives alone; bad rows are refused with a clear error, over
the service as over the backend, and a backend that does not score says so."""

from __future__ import annotations

import copy

import grpc
import pytest
import torch

from populora.pb import common_pb2, inference_pb2
from populora.rpc import ServiceError
from services.inference.backend import BadRequest, BatchTooLarge, InferenceBackend, ScoreRow, UnknownAdapter
from services.inference.hf import score_groups
from services.inference.service import InferenceService

MESSAGES = [{"role": "system", "content": "Answer inside <answer>...</answer>."},
            {"role": "user", "content": "What does f(3) return?\n```python\ndef f(a):\n    return a * 2\n```"}]
PREFIX = "<think></think>\n<answer>"


def _reference(model, tokenizer, messages, prefix: str, continuation: str) -> tuple[float, int]:
    """The sum of the continuation tokens' log-probabilities, from one forward pass of `model` over the whole
    sequence (no batching, no padding), and their count."""
    from populora.tasks.prompts import chat_token_ids

    context = chat_token_ids(tokenizer, messages) + tokenizer.encode(prefix, add_special_tokens=False)
    target = tokenizer.encode(continuation, add_special_tokens=False)
    ids = torch.tensor([context + target])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(context) - 1:-1], dim=-1)
    return float(logp.gather(1, torch.tensor(target)[:, None]).sum()), len(target)


def _peft(tiny, store, ref):
    """The tiny model with the adapter version loaded by PEFT from its stored directory."""
    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(tiny.model), str(store.path_of(ref))).eval()


@pytest.mark.parametrize("host", ["batched", "peft"])
def test_a_score_is_the_sum_of_log_softmax_of_a_plain_forward_pass(make_backend, adapters, tiny, store, host):
    backend = make_backend(host=host)
    rows = [ScoreRow("base", None, MESSAGES, prefix=PREFIX, continuation="6</answer>"),
            ScoreRow("a0", adapters[0], MESSAGES, prefix=PREFIX, continuation="[1, 2, 'x']"),
            ScoreRow("a1", adapters[1], MESSAGES, continuation="<think>double</think>\n<answer>6</answer>")]
    got = {r.row_id: r for r in backend.score(rows)}
    plain = {"base": tiny.model, "a0": _peft(tiny, store, adapters[0]), "a1": _peft(tiny, store, adapters[1])}
    for row in rows:
        want, n = _reference(plain[row.row_id], tiny.tokenizer, row.messages, row.prefix, row.continuation)
        assert got[row.row_id].tokens == n > 1
        assert got[row.row_id].logprob == pytest.approx(want, abs=1e-3 * n), row.row_id
        assert got[row.row_id].logprob < 0
    assert got["a0"].adapter.key == "a0@v1" and got["base"].adapter is None
    from populora.tasks.prompts import chat_token_ids

    context = len(chat_token_ids(tiny.tokenizer, MESSAGES))
    assert got["a1"].prompt_tokens == context
    assert got["base"].prompt_tokens == context + len(tiny.tokenizer.encode(PREFIX, add_special_tokens=False))
    # the adapters move the scores: a row scored under another version would be seen
    same = [ScoreRow(f"v{i}", a, MESSAGES, prefix=PREFIX, continuation="6</answer>") for i, a in enumerate(adapters)]
    values = [r.logprob for r in backend.score(same)]
    assert len({round(v, 4) for v in values}) == len(values)


def test_base_and_adapter_rows_mixed_give_what_each_gives_alone(make_backend, adapters, tiny):
    """Rows of eight adapters and the base, prompts and continuations of different lengths, in one request (several
    passes, left-padded), score as each row does alone; prompts given as text, token ids or messages agree."""
    backend = make_backend()
    rows = []
    for i in range(12):
        adapter = None if i % 5 == 0 else adapters[i % len(adapters)]
        messages = [{"role": "user", "content": "def f(x):" + " return x" * (i % 4)}]
        rows.append(ScoreRow(f"r{i}", adapter, messages, prefix=PREFIX if i % 2 else "",
                             continuation="'ab'" + ", 1" * (i % 3) + "</answer>"))
    mixed = {r.row_id: r.logprob for r in backend.score(rows)}
    for row in rows:
        [alone] = backend.score([row])
        assert alone.logprob == pytest.approx(mixed[row.row_id], abs=1e-4), row.row_id
    from populora.tasks.prompts import chat_token_ids

    ids = chat_token_ids(tiny.tokenizer, rows[3].messages)
    text = tiny.tokenizer.decode(ids)
    as_ids = ScoreRow("ids", rows[3].adapter, prompt_token_ids=ids, prefix=rows[3].prefix,
                      continuation=rows[3].continuation)
    as_text = ScoreRow("text", rows[3].adapter, prompt=text, prefix=rows[3].prefix, continuation=rows[3].continuation)
    got = {r.row_id: r.logprob for r in backend.score([as_ids, as_text])}
    assert got["ids"] == pytest.approx(mixed["r3"], abs=1e-4)
    assert got["text"] == pytest.approx(mixed["r3"], abs=1e-4)


def test_score_groups_bound_tokens_and_kept_logits():
    lengths, kept = [10, 300, 40, 41, 39, 500], [3, 3, 30, 2, 2, 2]
    groups = score_groups(lengths, kept, tokens=200, logits=40)
    assert sorted(i for g in groups for i in g) == list(range(6))
    for g in groups:
        if len(g) > 1:
            assert len(g) * max(lengths[i] for i in g) <= 200 and len(g) * max(kept[i] for i in g) <= 40
    assert [5] in groups and [1] in groups  # over the budget alone: a pass of its own


def test_bad_rows_are_refused_before_any_work(make_backend, adapters, tiny):
    from populora.store import AdapterRef

    backend = make_backend(max_batch=4)
    ok = ScoreRow("ok", adapters[0], MESSAGES, continuation="6")
    cases = [
        ([ScoreRow("x", None, MESSAGES, continuation="")], BadRequest, "continuation is empty"),
        ([ScoreRow("x", None, MESSAGES, continuation="6"), ScoreRow("x", None, MESSAGES, continuation="7")],
         BadRequest, "row_id is repeated"),
        ([ScoreRow("x", None, MESSAGES, prompt="p", continuation="6")], BadRequest, "exactly one of"),
        ([ScoreRow("x", None, None, continuation="6")], BadRequest, "exactly one of"),
        ([ScoreRow("x", None, prompt_token_ids=[1, 10**9], continuation="6")], BadRequest, "outside the vocabulary"),
        ([ScoreRow("x", None, MESSAGES, continuation="6 " * 5000)], BadRequest, "over the model's context"),
        ([ok, ScoreRow("x", AdapterRef("nope", 0), MESSAGES, continuation="6")], UnknownAdapter, "nope"),
        ([ScoreRow(f"r{i}", None, MESSAGES, continuation="6") for i in range(5)], BatchTooLarge, "max_batch=4"),
        ([], BadRequest, "empty score request"),
    ]
    for rows, kind, words in cases:
        with pytest.raises(kind, match=words):
            backend.score(rows)
    assert backend.score([ok])[0].tokens == 1


def test_the_service_maps_rows_and_errors(make_backend, adapters):
    service = InferenceService(make_backend())
    request = inference_pb2.ScoreRequest(rows=[
        inference_pb2.ScoreRow(row_id="b", messages=[inference_pb2.ChatMessage(**m) for m in MESSAGES],
                               prefix=PREFIX, continuation="6</answer>"),
        inference_pb2.ScoreRow(row_id="a", adapter=common_pb2.AdapterRef(adapter_id="a2"),
                               messages=[inference_pb2.ChatMessage(**m) for m in MESSAGES], prefix=PREFIX,
                               continuation="6</answer>")])
    got = service.Score(request).scores
    assert [s.row_id for s in got] == ["b", "a"]
    assert not got[0].HasField("adapter") and got[1].adapter.adapter_id == "a2" and got[1].adapter.version == 1
    assert got[0].tokens == got[1].tokens > 0 and got[0].logprob != got[1].logprob
    request.rows[1].continuation = ""
    with pytest.raises(ServiceError) as e:
        service.Score(request)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "continuation is empty" in e.value.message
    request.rows[1].continuation = "6"
    request.rows[1].adapter.adapter_id = "missing"
    with pytest.raises(ServiceError) as e:
        service.Score(request)
    assert e.value.code == grpc.StatusCode.NOT_FOUND


class _GeneratesOnly(InferenceBackend):
    """A backend that implements generation alone (as the `vllm` backend does): Score is refused by name."""

    name = "generates-only"

    def generate(self, requests):
        return iter(())


def test_a_backend_that_does_not_score_says_so():
    from services.inference.vllm_backend import VllmBackend

    assert VllmBackend.score is InferenceBackend.score  # the vllm backend takes the refusal below
    request = inference_pb2.ScoreRequest(rows=[inference_pb2.ScoreRow(row_id="r", prompt="p", continuation="c")])
    with pytest.raises(ServiceError) as e:
        InferenceService(_GeneratesOnly()).Score(request)
    assert e.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert "generates-only backend does not score" in e.value.message and "generation.backend=hf" in e.value.message
