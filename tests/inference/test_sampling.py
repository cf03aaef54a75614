"""Sampling in the hf backend: draws stay inside the top-p nucleus (narrow or wider than the candidates looked at
first), follow its probabilities, and a request's n completions share one prompt pass without changing them."""

from __future__ import annotations

import torch

from services.inference.backend import Request, Sampling
from services.inference.sampling import TOP_P_CANDIDATES, Row, choose_tokens


def _rows(n: int, temperature: float, top_p: float, seed: int = 0) -> list[Row]:
    return [Row(0, i, None, [1], Sampling(temperature=temperature, top_p=top_p),
                torch.Generator().manual_seed(seed + i)) for i in range(n)]


def test_draws_stay_in_the_nucleus_and_follow_its_probabilities():
    vocab = 1000
    logits = torch.full((1, vocab), -30.0)
    logits[0, :4] = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    counts = torch.zeros(vocab)
    for seed in range(3000):
        counts[int(choose_tokens(logits, _rows(1, 1.0, 0.9, seed))[0])] += 1
    assert counts[3:].sum() == 0  # the nucleus at 0.9 is the first three tokens
    freq = counts[:3] / counts.sum()
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15]) / 0.95, atol=0.04), freq


def test_a_nucleus_wider_than_the_candidates_is_drawn_from_in_full():
    vocab = 4 * TOP_P_CANDIDATES
    logits = torch.zeros(2, vocab)  # flat: the 0.9 nucleus holds 90% of the vocabulary
    seen = set()
    for seed in range(400):
        seen.update(choose_tokens(logits, _rows(2, 1.0, 0.9, seed)).tolist())
    assert max(seen) >= TOP_P_CANDIDATES and len(seen) > TOP_P_CANDIDATES


def test_greedy_and_sampled_rows_in_one_batch():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    rows = _rows(3, 1.0, 1.0)
    rows[1] = Row(0, 1, None, [1], Sampling(temperature=0.0), None)
    assert int(choose_tokens(logits, rows)[1]) == int(logits[1].argmax())
    first = choose_tokens(logits, _rows(3, 1.0, 1.0))
    assert torch.equal(first, choose_tokens(logits, _rows(3, 1.0, 1.0)))  # same generators, same draws


def test_a_rows_draws_depend_only_on_its_logits_and_generator():
    """The row's tokens over several steps are the same alone and among other rows (greedy, other temperatures and
    nuclei, a flat row that takes the full-sort path), for a peaked and a flat distribution."""
    gen = torch.Generator().manual_seed(1)
    vocab = 4 * TOP_P_CANDIDATES
    for flat in (False, True):
        steps = [torch.randn(vocab, generator=gen) * (0.01 if flat else 3.0) for _ in range(12)]
        alone = _rows(1, 1.0, 0.9, seed=7)
        mine = _rows(1, 1.0, 0.9, seed=7)[0]
        others = [Row(0, 1, None, [1], Sampling(temperature=0.0), None),
                  Row(0, 2, None, [1], Sampling(temperature=0.7, top_p=0.5), torch.Generator().manual_seed(3)),
                  Row(0, 3, None, [1], Sampling(temperature=1.0, top_p=0.95), torch.Generator().manual_seed(4))]
        for k, logits in enumerate(steps):
            by_itself = int(choose_tokens(logits[None], alone)[0])
            batch = torch.stack([torch.zeros(vocab), torch.randn(vocab, generator=gen), logits,
                                 torch.randn(vocab, generator=gen) * 0.01])
            rows = [others[0], others[1], mine, others[2]] if k % 2 else [others[1], others[0], mine, others[2]]
            assert int(choose_tokens(batch, rows)[2]) == by_itself, (flat, k)


def test_n_completions_share_the_prompt_pass_and_match_one_alone(make_backend, adapters):
    backend = make_backend()
    msgs = [{"role": "user", "content": "def f(x): return x"}]
    [alone] = backend.generate([Request("a", adapters[0], messages=msgs, sampling=Sampling(max_new_tokens=6))])
    [many] = backend.generate([Request("m", adapters[0], messages=msgs, sampling=Sampling(max_new_tokens=6, n=3))])
    assert [c.token_ids for c in many.completions] == [alone.completions[0].token_ids] * 3
