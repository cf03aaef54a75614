"""The trainer's memory model: the bytes a TRR++ update adds to a trainer at rest, from the model's shapes, the
micro-batch and the memory settings (docs/trainer.md, Memory).

Each term is what the code keeps alive at that moment: the decoder's saved activations (`trr.response_logprobs`,
`populora.adapters.layer_checkpointing`), one chunk of the LM head's logits and their gradients (`logprobs.py`),
the adapters' gradients, the pool's all-or-nothing snapshot and its store write (`pool.py`). The per-layer counts
were taken from the tensors autograd saves in Qwen2 decoder layers with the batched LoRA layer (float32 and
bfloat16, SDPA and eager attention); `tests/trainer/test_memory.py` holds the whole prediction within 25% of the
measured peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

MB = 2**20
F32 = 4  # log-probabilities, AdamW's master weights and moments are float32 whatever the model computes in
ENTROPY_COPIES = 2  # float32 (tokens x vocabulary) tensors the entropy term adds to a chunk's backward (measured)


class MemoryLimitError(ValueError):
    """A micro-batch that cannot fit `trainer.memory_limit_mb`, even as a single row."""


@dataclass(frozen=True)
class ModelShape:
    """What a pass's memory depends on: a decoder of `layers` layers, hidden size, MLP size, attention and key/value
    heads, vocabulary, bytes per element of its activations, and whether its attention keeps the (t x t) scores."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    dtype_bytes: int
    eager_attention: bool = False

    @classmethod
    def of(cls, causal_lm: nn.Module) -> ModelShape:
        c = causal_lm.config.get_text_config()
        return cls(c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads,
                   getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                   causal_lm.get_output_embeddings().weight.shape[0], next(causal_lm.parameters()).element_size(),
                   getattr(causal_lm.config, "_attn_implementation", None) == "eager")

    def target_dims(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of the projections LoRA targets in one layer."""
        h, i = self.hidden, self.intermediate
        kv = self.kv_heads * (h // self.heads)
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h), "gate_proj": (h, i),
                "up_proj": (h, i), "down_proj": (i, h)}


@dataclass(frozen=True)
class AdapterShape:
    """One adapter of an update: its LoRA parameters, its rank summed over one layer's target modules (r x targets),
    the bytes per element it computes in, and whether it has Adam moments yet (from its first step on)."""

    params: int
    rank_per_layer: int
    dtype_bytes: int
    moments: bool

    @classmethod
    def of(cls, params: Sequence[torch.Tensor], layers: int, moments: bool) -> AdapterShape:
        """From a held adapter's parameters, each module's A (r, d_in) then its B (d_out, r), as both adapter hosts
        give them: r is the side the two share, which is not the smaller one when r exceeds d_in or d_out (rank 64
        on the tiny model's 32-wide key projection)."""
        ranks = 0
        for a, b in zip(params[0::2], params[1::2], strict=False):
            ranks += a.shape[0] if a.shape[0] == b.shape[1] else (min(a.shape) + min(b.shape)) // 2
        return cls(sum(p.numel() for p in params), ranks // layers, params[0].element_size(), moments)

    @classmethod
    def fresh(cls, model: ModelShape, rank: int, targets: Sequence[str], moments: bool = True) -> AdapterShape:
        """From a rank and target modules: P = layers x r x sum over targets of (d_in + d_out)."""
        dims = model.target_dims()
        per_layer = sum(dims[t][0] + dims[t][1] for t in targets)
        return cls(model.layers * rank * per_layer, rank * len(targets), model.dtype_bytes, moments)

    def rest_bytes(self) -> int:
        """Held between updates: the weights, a float32 master copy when they compute in less, two Adam moments."""
        master = F32 if self.dtype_bytes != F32 else 0
        return self.params * (self.dtype_bytes + master + (2 * F32 if self.moments else 0))


def base_bytes(causal_lm: nn.Module) -> int:
    """The base model's resident weights and buffers (tied weights once)."""
    storages = {}
    for t in [*causal_lm.parameters(), *causal_lm.buffers()]:
        s = t.untyped_storage()
        storages[(s.device, s.data_ptr())] = s.nbytes()
    return sum(storages.values())


def layer_bytes(model: ModelShape, rows: int, width: int, rank_per_layer: int) -> int:
    """What one decoder layer keeps for its backward pass, for `rows` rows of `width` tokens. Per token, in the
    model's dtype: 4I (gate, its SiLU, up, their product), 9H (the layer's input and the two norms' outputs, q, k
    and v repeated to every head, the attention's output and its contiguous copy, the residual sum) and r per LoRA
    module; the two norms' float32 inputs besides when the model computes in less. With eager attention, every
    head's (t x t) softmax, in float32, and its copy in the model's dtype when that is another."""
    b = model.dtype_bytes
    per_token = b * (4 * model.intermediate + 9 * model.hidden + rank_per_layer)
    if b != F32:
        per_token += 2 * model.hidden * F32
    scores = rows * model.heads * width**2 * (F32 + (b if b != F32 else 0)) if model.eager_attention else 0
    return rows * width * per_token + scores


def head_bytes(model: ModelShape, tokens: int, entropy: bool) -> int:
    """One chunk of `tokens` response tokens through the LM head, at its peak (the chunk's backward): per token and
    vocabulary entry the float32 log-softmax, its gradient and the logits' gradient (and that gradient in the
    model's dtype when it is not float32); with the entropy, the softmax and the entropy's gradients besides."""
    b = model.dtype_bytes
    per = 3 * F32 + (b if b != F32 else 0) + (ENTROPY_COPIES * F32 if entropy else 0)
    return tokens * model.vocab * per


def pass_bytes(model: ModelShape, rows: int, width: int, response: int, rank_per_layer: int, chunk: int,
               checkpointing: bool, entropy: bool) -> int:
    """The peak of one micro-batch's forward and backward pass: `rows` rows padded to `width` tokens, `response` of
    them predicted, `chunk` = trainer.logprob_chunk_tokens, `checkpointing` = trainer.activation_checkpointing.

    Kept through the pass: every layer's activations, or with checkpointing only each layer's input (and the last
    norm's). On top, the larger of the LM head's chunk (with the gathered hidden states and their gradient) and,
    with checkpointing, one layer run again in the backward with its gradients."""
    b, tokens = model.dtype_bytes, rows * width
    layer = layer_bytes(model, rows, width, rank_per_layer)
    if checkpointing:
        # in the backward one layer runs again; its MLP's gradients (about two of I per token) come on top
        kept, again = (model.layers + 1) * tokens * model.hidden * b, layer + 2 * tokens * model.intermediate * b
    else:
        kept, again = model.layers * layer, 0
    head = head_bytes(model, min(response, chunk), entropy) + 2 * response * model.hidden * b
    return kept + max(head, again)


def snapshot_bytes(adapters: Sequence[AdapterShape]) -> int:
    """The pool's all-or-nothing copy of every updated adapter: float32 weights and, once they exist, the moments."""
    return sum(a.params * F32 * (3 if a.moments else 1) for a in adapters)


def training_bytes(adapters: Sequence[AdapterShape], pass_peak: int, on_cpu: bool) -> int:
    """The update's peak over the snapshot: the gradients with the largest micro-batch's pass or one adapter's AdamW
    step (its float32 temporaries), or one version's store write (safetensors' copy of the moments, in host
    memory: counted on a CPU only)."""
    grads = sum(a.params * a.dtype_bytes for a in adapters)
    largest = max((a.params for a in adapters), default=0)
    step = 2 * largest * F32
    write = 2 * largest * F32 if on_cpu else 0
    return max(grads + max(pass_peak, step), write)


def update_bytes(model: ModelShape, adapters: Sequence[AdapterShape], micro_batches: Sequence[tuple[int, int, int]],
                 chunk: int, checkpointing: bool, entropy: bool, on_cpu: bool) -> int:
    """The peak one update adds to the trainer at rest; `micro_batches`: (rows, padded width, response tokens).
    Every adapter's own size counts in the snapshot, the gradients and the step; a pass's activations take the
    largest rank's r per token for every row (members of mixed ranks share a batched pass: rows of a smaller rank
    keep less, so a mixed batch is over-predicted by at most that term, 4% of a token's on SmolLM2 at rank 64)."""
    rank = max((a.rank_per_layer for a in adapters), default=0)
    peak = max((pass_bytes(model, rows, width, response, rank, chunk, checkpointing, entropy)
                for rows, width, response in micro_batches), default=0)
    return snapshot_bytes(adapters) + training_bytes(adapters, peak, on_cpu)
