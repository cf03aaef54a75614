"""Log-probabilities in chunks equal the whole-logits computation: values, entropy, loss and gradients."""

from __future__ import annotations

import pytest
import torch

from populora.adapters import BatchedHost
from services.trainer.logprobs import token_logprobs, token_logprobs_whole
from services.trainer.trr import TrrSettings, collate, make_rows, response_logprobs, trr_update
from tests.trainer.test_batched import TARGETS, _grads, _setup


def _head(vocab: int = 97, hidden: int = 16, bias: bool = True, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    head = torch.nn.Linear(hidden, vocab, bias=bias)
    with torch.no_grad():
        head.weight.mul_(4)  # peaked distributions, where a wrong log-sum-exp would show
    return head


@pytest.mark.parametrize("chunk", [1, 3, 7, 50, 1000])
@pytest.mark.parametrize("scaled", [False, True])
def test_chunked_values_and_gradients_equal_the_whole_logits(chunk, scaled):
    """Also with a per-token sampling temperature (spec 16): pi = softmax(logits / T_t)."""
    head = _head()
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(23, 16, generator=g)
    targets = torch.randint(0, 97, (23,), generator=g)
    g_logp, g_ent = torch.randn(23, generator=g), torch.randn(23, generator=g)
    temperature = torch.tensor([0.7] * 11 + [1.3] * 12) if scaled else None

    def run(fn, **kw):
        head.zero_grad(set_to_none=True)
        h = hidden.clone().requires_grad_(True)
        logp, ent = fn(head, h, targets, with_entropy=True, temperature=temperature, **kw)
        ((logp * g_logp).sum() + (ent * g_ent).sum()).backward()
        return logp.detach(), ent.detach(), h.grad, head.weight.grad.clone(), head.bias.grad.clone()

    got, want = run(token_logprobs, chunk=chunk), run(token_logprobs_whole)
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a - b).abs().max()
    assert got[2].abs().sum() > 0 and got[1].min() > 0  # gradients reach the hidden states; entropy is positive
    logits = head(hidden).detach() / (1.0 if temperature is None else temperature[:, None])
    assert torch.allclose(got[0], torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0], atol=1e-5)


def test_without_entropy_the_entropy_is_zero_and_logprobs_match():
    head = _head(bias=False)
    hidden = torch.randn(9, 16, requires_grad=True)
    targets = torch.randint(0, 97, (9,))
    logp, ent = token_logprobs(head, hidden, targets, chunk=2)
    want, _ = token_logprobs_whole(head, hidden, targets)
    assert torch.allclose(logp, want, atol=1e-6) and torch.count_nonzero(ent) == 0
    assert (logp <= 0).all()


def test_a_chunk_below_one_token_is_refused():
    with pytest.raises(ValueError, match="at least 1 token"):
        token_logprobs(_head(), torch.randn(2, 16), torch.tensor([0, 1]), chunk=0)


def test_the_update_on_tiny_gives_the_whole_logits_loss_and_lora_gradients(fresh_base):
    """A micro-batch of the tiny model (vocabulary 151,936): log pi, the loss and every LoRA gradient with 3-token
    chunks against the whole (tokens x vocabulary) logits."""
    multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
    jobs = _setup(multi, [4, 2], fresh_base().model)
    rows, _ = make_rows(jobs, 1e-6)
    mb = collate(rows, [j.adapter for j in jobs], multi.device)
    params = [p for j in jobs for p in j.params]

    def loss_and_grads(logprobs):
        for p in params:
            p.grad = None
        logp, ent = logprobs()
        loss = (-mb.inv_tokens * mb.advantages * logp - 0.01 * mb.inv_tokens * ent).sum()
        loss.backward()
        return logp.detach(), float(loss.detach()), [p.grad.clone() for p in params]

    def whole():
        hidden = multi.hidden_states(mb.adapters, mb.input_ids, mb.attention_mask)[mb.pred_rows, mb.pred_pos]
        return token_logprobs_whole(multi.output_layer(), hidden, mb.targets, with_entropy=True)

    logp_c, loss_c, grads_c = loss_and_grads(lambda: response_logprobs(multi, mb, True, chunk=3))
    logp_w, loss_w, grads_w = loss_and_grads(whole)
    assert mb.targets.shape[0] > 3  # more than one chunk
    assert (logp_c - logp_w).abs().max() <= 1e-5 and abs(loss_c - loss_w) <= 1e-5
    for a, b in zip(grads_c, grads_w, strict=True):
        assert (a - b).abs().max() <= 1e-5
    assert any(g.abs().sum() > 0 for g in grads_c)


def test_trr_update_does_not_depend_on_the_chunk(fresh_base):
    def run(chunk):
        multi = BatchedHost(fresh_base().model, TARGETS, max_rank=8)
        jobs = _setup(multi, [4, 4], fresh_base().model)
        stats = trr_update(multi, jobs, TrrSettings(grad_clip=1e9, entropy_coef=0.01, logprob_chunk_tokens=chunk),
                           multi.device)
        return stats, _grads(jobs)

    (s1, g1), (s2, g2) = run(2), run(10**6)
    for a, b in zip(s1, s2, strict=True):
        assert abs(a.loss - b.loss) <= 1e-5 and abs(a.grad_norm - b.grad_norm) <= 1e-5 * max(1.0, b.grad_norm)
    for job_a, job_b in zip(g1, g2, strict=True):
        for a, b in zip(job_a, job_b, strict=True):
            assert (a - b).abs().max() <= 1e-5
