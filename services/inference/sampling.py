"""Sampling the next token of each row being decoded: greedy or temperature with top-p, each row from its own seed."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from services.inference.backend import Sampling


@dataclass
class Row:
    """One completion being decoded."""

    request: int
    index: int
    adapter: str | None
    prompt_ids: list[int]
    sampling: Sampling
    generator: torch.Generator | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    truncated: int = 0  # tokens drawn from a nucleus that left out some probability mass (spec 16)
    finish_reason: str = ""
    text: str = ""


# Candidates looked at first for top-p: the nucleus of a trained model at T <= 1 almost always lies in its top 64
# tokens, and topk of 64 is far cheaper than sorting a 50k-150k vocabulary per row per token. Rows whose nucleus
# is wider fall back to a full sort, so the draw is exact either way.
TOP_P_CANDIDATES = 64


def choose_tokens(logits: torch.Tensor, rows: list[Row]) -> torch.Tensor:
    """Next token per row: argmax for greedy rows; for sampled rows a draw from softmax(logits / T) restricted to the
    top-p nucleus (the smallest set of most likely tokens whose mass reaches top_p), by inverse CDF with one uniform
    from the row's own generator, so a row's sample does not depend on the other rows of the batch. (B, V) -> (B,)

    The softmax and the candidate search run for all sampled rows at once; only the uniform draw is per row. A row
    whose nucleus left out a token of non-zero probability counts the draw in `row.truncated`: the policy of spec 16
    is softmax(logits / T) without the nucleus, so the share of such draws says how far sampling strayed from it."""
    tokens = logits.argmax(dim=-1)
    sampled = [i for i, row in enumerate(rows) if row.sampling.temperature > 0]
    if not sampled:
        return tokens
    temperature = torch.tensor([rows[i].sampling.temperature for i in sampled], device=logits.device)
    probs = torch.softmax(logits[sampled].float() / temperature[:, None], dim=-1)  # (S, V)
    k = min(TOP_P_CANDIDATES, probs.shape[-1])
    top_vals, top_ids = probs.topk(k, dim=-1)  # (S, k), most likely first
    top_mass = top_vals.sum(-1).tolist()
    nucleus = [j for j, i in enumerate(sampled) if rows[i].sampling.top_p < 1]
    # tokens of non-zero probability per row with a nucleus: it truncated the row's distribution when it kept fewer
    positive = dict(zip(nucleus, (probs[nucleus] > 0).sum(-1).tolist() if nucleus else [], strict=True))
    for j, i in enumerate(sampled):
        row = rows[i]
        u = float(torch.rand((), generator=row.generator))
        top_p = row.sampling.top_p
        if top_p >= 1:  # no nucleus: the whole distribution, in vocabulary order
            cand_vals, cand_ids = probs[j], None
        elif top_mass[j] >= top_p:
            cand_vals, cand_ids = top_vals[j], top_ids[j]
        else:  # the nucleus is wider than the candidates: sort them all
            cand_vals, cand_ids = torch.sort(probs[j], descending=True)
        if cand_ids is not None:  # keep a token while the mass before it is below top_p
            cand_vals = cand_vals.masked_fill(cand_vals.cumsum(0) - cand_vals >= top_p, 0.0)
            row.truncated += int(int((cand_vals > 0).sum()) < positive[j])
        # in float64: a float32 running sum over a 150k vocabulary drifts by more than a token's own mass where the
        # distribution is flat, so a last-bit difference in the logits (another batch size picks another matmul
        # kernel) would move the pick; in float64 it cannot
        cdf = cand_vals.double().cumsum(0)
        pick = min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), cdf.shape[0] - 1)
        while cand_vals[pick] <= 0:  # u * total landed on the end of the cdf: step back to a token with mass
            pick -= 1
        tokens[i] = pick if cand_ids is None else cand_ids[pick]
    return tokens
