"""Log-probabilities of taken tokens from last hidden states, a chunk of tokens at a time, forward and backward.

The LM head maps N hidden states (N, H) to N x V logits; with a 49k-151k vocabulary that is the largest tensor of
an update, and log_softmax plus its backward keep two or three more of its size. Here the logits only ever exist
for `chunk` tokens at once: the forward keeps, per token, log pi(y_t) and the entropy; the backward recomputes
each chunk's logits from the saved hidden states and turns them into the chunk's gradient at once.

With z = W h (+ b) (float32), p = softmax(z), lse = logsumexp(z):
    log pi(y)  = z_y - lse                       d/dz_j = [j = y] - p_j
    H          = lse - sum_j p_j z_j             d/dz_j = -p_j (log p_j + H)
so dL/dz = g_logp ([j = y] - p) - g_H p (log p + H), dL/dh = (dL/dz) W, dL/dW = (dL/dz)^T h.
"""

from __future__ import annotations

import torch
from torch import nn

DEFAULT_CHUNK_TOKENS = 256


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # the head in the model's dtype, then float32: the same rounding as lm_head(hidden).float()
    return nn.functional.linear(hidden, weight, bias).float()  # (n, V)


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk: int, with_entropy: bool):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        for i in range(0, n, chunk):
            # log_softmax, not z_y - logsumexp(z): the same kernel as the whole-logits computation, the same rounding
            logp_all = torch.log_softmax(_chunk_logits(hidden[i: i + chunk], weight, bias), dim=-1)  # (c, V)
            logp[i: i + chunk] = logp_all.gather(-1, targets[i: i + chunk, None]).squeeze(-1)
            if with_entropy:
                entropy[i: i + chunk] = -(logp_all.exp() * logp_all).sum(-1)
            del logp_all
        ctx.save_for_backward(hidden, weight, bias, targets, entropy)
        ctx.chunk, ctx.with_entropy = chunk, with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, entropy = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
        use_entropy = ctx.with_entropy and grad_entropy is not None
        for i in range(0, hidden.shape[0], ctx.chunk):
            sl = slice(i, i + ctx.chunk)
            h = hidden[sl]
            z = _chunk_logits(h, weight, bias)  # (c, V)
            logp_all = torch.log_softmax(z, dim=-1)
            del z
            p = logp_all.exp()  # (c, V)
            g_logp = grad_logp[sl] if grad_logp is not None else torch.zeros_like(entropy[sl])
            if use_entropy:  # -g_H p (log p + H), written into logp_all
                logp_all.add_(entropy[sl, None]).mul_(p).mul_(-grad_entropy[sl, None])
                grad_z = logp_all
                grad_z.addcmul_(p, g_logp[:, None], value=-1.0)
            else:
                grad_z = p.mul_(-g_logp[:, None])
            grad_z.scatter_add_(-1, targets[sl, None], g_logp[:, None])  # + g_logp [j = y]
            grad_z = grad_z.to(weight.dtype)
            if need_h:
                grad_h[sl] = grad_z @ weight
            if need_w:
                grad_w += (grad_z.t() @ h).float()
            if need_b:
                grad_b += grad_z.float().sum(0)
        return (grad_h, grad_w.to(weight.dtype) if need_w else None, grad_b.to(bias.dtype) if need_b else None,
                None, None, None)


def token_logprobs(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False,
                   chunk: int = DEFAULT_CHUNK_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(targets[t] | hidden[t]) (N,) and the entropy of pi at each position (N,; zeros without
    `with_entropy`), through the linear LM `head`, never more than `chunk` tokens' logits at once.

    hidden: (N, H) in the head's dtype; targets: (N,) token ids. Gradients flow into `hidden` (and into the head's
    weight and bias if they require them). Equal to log_softmax(head(hidden).float()) gathered at the targets.
    """
    if chunk < 1:
        raise ValueError(f"the log-probability chunk must be at least 1 token, got {chunk}")
    weight, bias = getattr(head, "weight", None), getattr(head, "bias", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise TypeError(f"the LM head must be a linear layer (a 2-D weight), got {type(head).__name__}")
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty.clone()
    return _ChunkedLogprobs.apply(hidden, weight, bias, targets, int(chunk), bool(with_entropy))


def token_logprobs_whole(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The same quantities with every token's logits at once (N x V), the reference for `token_logprobs`."""
    logp_all = torch.log_softmax(head(hidden).float(), dim=-1)  # (N, V)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else torch.zeros_like(logp)
    return logp, entropy
