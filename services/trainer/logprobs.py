"""Log-probabilities of taken tokens from last hidden states, a chunk of tokens at a time, forward and backward.

The LM head maps N hidden states (N, H) to N x V logits; with a 49k-151k vocabulary that is the largest tensor of
an update, and log_softmax plus its backward keep two or three more of its size. Here the logits only ever exist
for `chunk` tokens at once: the forward keeps, per token, log pi(y_t) = log_softmax((W h (+ b)) / T_t)_y and the
entropy H = -sum_j p_j log p_j; the backward runs each chunk's forward again from the saved hidden states, with
autograd, and takes that chunk's gradient before the next (activation checkpointing of the head, one chunk at a time).

T_t is the temperature token t was sampled at (spec 16: the policy is the sampling distribution, top-p aside); it
divides the float32 logits as inference divides them, so the same weights give the same log-probabilities.
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
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk: int, with_entropy: bool):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        for i in range(0, n, chunk):
            logp[i: i + chunk], entropy[i: i + chunk] = _whole(hidden[i: i + chunk], weight, bias,
                                                              targets[i: i + chunk], with_entropy,
                                                              _rows(temperature, slice(i, i + chunk)))
        ctx.save_for_backward(hidden, weight, bias, targets, temperature)
        ctx.chunk, ctx.with_entropy = chunk, with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, temperature = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b else None
        for i in range(0, hidden.shape[0], ctx.chunk):
            sl = slice(i, i + ctx.chunk)
            # the chunk's forward again, with autograd: the same operations as the whole-logits path, so the same
            # gradient, rounding included; its (c, V) tensors are freed before the next chunk
            with torch.enable_grad():
                h = hidden[sl].detach().requires_grad_(need_h)
                w = weight.detach().requires_grad_(need_w)
                b = bias.detach().requires_grad_(need_b) if bias is not None else None
                logp, entropy = _whole(h, w, b, targets[sl], ctx.with_entropy, _rows(temperature, sl))
                outputs, grads = [logp], [grad_logp[sl]]
                if ctx.with_entropy:
                    outputs.append(entropy)
                    grads.append(grad_entropy[sl])
                inputs = [x for x, need in ((h, need_h), (w, need_w), (b, need_b)) if need]
                got = iter(torch.autograd.grad(outputs, inputs, grads))
            if need_h:
                grad_h[sl] = next(got)
            if need_w:
                grad_w += next(got)
            if need_b:
                grad_b += next(got)
        return grad_h, grad_w, grad_b, None, None, None, None


def _rows(temperature: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
    return None if temperature is None else temperature[sl]


def _whole(hidden, weight, bias, targets, with_entropy: bool,
           temperature: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    logits = _chunk_logits(hidden, weight, bias)  # (n, V)
    if temperature is not None:
        logits = logits / temperature[:, None]
    logp_all = torch.log_softmax(logits, dim=-1)  # (n, V)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)  # (n,)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else torch.zeros_like(logp)
    return logp, entropy


def token_logprobs(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False,
                   chunk: int = DEFAULT_CHUNK_TOKENS, temperature: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(targets[t] | hidden[t]) (N,) and the entropy of pi at each position (N,; zeros without
    `with_entropy`), through the linear LM `head`, never more than `chunk` tokens' logits at once.

    hidden: (N, H) in the head's dtype; targets: (N,) token ids; temperature: (N,) float32, each token's sampling
    temperature T_t > 0, or None for T = 1 everywhere. Gradients flow into `hidden` (and into the head's weight and
    bias if they require them). Equal to log_softmax(head(hidden).float() / T) gathered at the targets.
    """
    if chunk < 1:
        raise ValueError(f"the log-probability chunk must be at least 1 token, got {chunk}")
    weight, bias = getattr(head, "weight", None), getattr(head, "bias", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise TypeError(f"the LM head must be a linear layer (a 2-D weight), got {type(head).__name__}")
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty.clone()
    return _ChunkedLogprobs.apply(hidden, weight, bias, targets, temperature, int(chunk), bool(with_entropy))


def token_logprobs_whole(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False,
                         temperature: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The same quantities with every token's logits at once (N x V), the reference for `token_logprobs`."""
    return _whole(hidden, head.weight, head.bias, targets, with_entropy, temperature)
