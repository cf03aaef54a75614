"""The useful executed FLOPs' counter (populora/analysis/work.py) against counts done by hand on the tiny model's shapes
(populora.models.TINY_CONFIG: hidden 64, MLP 128, 2 layers, 4 query heads and 2 key/value heads of 16, a 151,936-token
vocabulary, tied embeddings) with a rank-4 adapter on all seven projections."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from populora.analysis.work import (
    Completion,
    Count,
    Precision,
    Shapes,
    decode_bytes,
    decode_step,
    decode_steps,
    prompt_group,
    prompt_pass,
    update,
)
from populora.config import ALL_TARGET_MODULES
from populora.models import TINY_CONFIG

TINY = Shapes.of(SimpleNamespace(**TINY_CONFIG), rank=4, targets=ALL_TARGET_MODULES)

# By hand, per token and forward. One layer's projections, d_in x d_out:
#   q 64x64 = 4,096; k 64x32 = 2,048; v 2,048; o 4,096; gate 64x128 = 8,192; up 8,192; down 128x64 = 8,192
#   = 36,864 weights a layer, 73,728 in 2 layers: 147,456 FLOPs a token (a multiply and an add per weight).
PROJECTIONS = 2 * (2 * (4096 + 2048 + 2048 + 4096 + 8192 + 8192 + 8192))
# The adapter, rank 4: 4 x (d_in + d_out) per module = 4 x (128 + 96 + 96 + 128 + 192 + 192 + 192) = 4,096 a layer.
ADAPTER = 2 * (2 * 4 * 1024)
# The head: 151,936 x 64 weights.
HEAD = 2 * 151936 * 64
# Attention per layer and query head, for each key the query sees: 16 multiply-adds for its score and 16 for the
# value it weighs: 2 x 16 + 2 x 16 FLOPs, times 4 heads and 2 layers.
PER_KEY = 2 * 4 * (2 * 16 + 2 * 16)


def test_the_shapes_are_the_tiny_model_s():
    assert (TINY.hidden, TINY.intermediate, TINY.layers, TINY.heads, TINY.kv_heads, TINY.head_dim, TINY.vocab) == (
        64, 128, 2, 4, 2, 16, 151936)
    assert PROJECTIONS == 147_456 and ADAPTER == 16_384 and HEAD == 19_447_808 and PER_KEY == 512
    # the embedding is counted once (tied), the norms (2 a layer and the final one) beside the projections
    assert TINY.parameters() == 73_728 + 64 * 5 + 151936 * 64


def test_a_prompt_pass_runs_every_layer_for_every_token_and_the_head_once():
    # 10 tokens: token i sees i keys (1 .. 10): 55 keys in all; the head only on the last token (logits_to_keep=1)
    got = prompt_pass(TINY, 10)
    assert got == Count(projections=10 * 147_456, head=19_447_808, adapter=10 * 16_384, attention=55 * 512)
    assert got.useful == 1_474_560 + 19_447_808 + 163_840 + 28_160 == 21_114_368
    assert prompt_pass(TINY, 10, rank=0).adapter == 0  # the bare base


def test_a_decode_step_runs_every_layer_attention_over_its_cache_and_the_head_for_each_row():
    # one row whose new token sees 20 keys (19 cached and itself)
    got = decode_step(TINY, [20])
    assert got.useful == 147_456 + 16_384 + 20 * 512 + 19_447_808 == 19_621_888
    # two rows at 20 and 30: everything twice, attention over 50 keys
    assert decode_step(TINY, [20, 30]).useful == 2 * (147_456 + 16_384 + 19_447_808) + 50 * 512


def test_an_update_computes_activation_gradients_through_the_frozen_base_and_weight_gradients_for_the_adapter():
    # 6 prompt and 4 response tokens, no checkpointing
    got = update(TINY, [(6, 4)])
    # forward: 10 tokens through every layer, attention over 1 + ... + 10 = 55 keys, the head on the 4 response tokens
    forward = Count(projections=10 * 147_456, adapter=10 * 16_384, attention=55 * 512, head=4 * 19_447_808)
    # backward, base: one activation-gradient product per base product whose input needs a gradient. Layer 0's q, k
    # and v read the embedding, which needs none; its o, gate, up and down read what its adapters changed:
    #   layer 0: 2 x (4,096 + 8,192 + 8,192 + 8,192) = 57,344; layer 1: 2 x 36,864 = 73,728
    base_back = 10 * (57_344 + 73_728)
    # backward, adapter, per module: both weight gradients 2r(d_in + d_out), the gradient through B 2r x d_out, and
    # through A to its input 2r x d_in where that input needs one (not layer 0's q, k, v):
    #   a module whose input needs it: 4r(d_in + d_out); layer 1: 4 x 4 x 1,024 = 16,384; layer 0's o, gate, up, down:
    #   16 x (128 + 192 + 192 + 192) = 11,264; layer 0's q: 8 x 64 + 16 x 64 = 1,536, k and v: 8 x 64 + 16 x 32 = 1,024
    adapter_back = 10 * (16_384 + 11_264 + 1_536 + 1_024 + 1_024)
    # backward, attention: the gradients of the scores' weights, of V, of Q and of K: twice the forward's two
    attention_back = 2 * 55 * 512
    # backward, head: the gradient into the hidden state on the 4 response tokens (the head itself is frozen)
    head_back = 4 * 19_447_808
    assert got == forward + Count(projections=base_back, adapter=adapter_back, attention=attention_back,
                                  head=head_back, recomputed=4 * 19_447_808)  # the chunked head runs again
    assert got.useful == 2_785_280 + 476_160 + 84_480 + 155_582_464 == 158_928_384
    # activation checkpointing runs each layer's forward again: executed, not useful
    again = update(TINY, [(6, 4)], checkpointing=True)
    assert again.useful == got.useful
    assert again.recomputed == got.recomputed + 10 * (147_456 + 16_384) + 55 * 512


def test_padding_is_executed_on_its_own_line():
    # prompts of 3 and 5 tokens left-padded to 5: the short one runs 2 padding tokens, at contexts 4 and 5
    got = prompt_group(TINY, [3, 5])
    assert got.useful == prompt_pass(TINY, 3).useful + prompt_pass(TINY, 5).useful
    assert got.padding == 2 * (147_456 + 16_384) + (4 + 5) * 512
    # an update micro-batch right-padded to 12: the row of 10 runs 2 more tokens forward and backward
    padded = update(TINY, [(6, 4)], width=12)
    assert padded.useful == update(TINY, [(6, 4)]).useful and padded.padding > 0
    assert padded.padding == (update(TINY, [(6, 6)]).executed - update(TINY, [(6, 4)]).executed
                              - 2 * 3 * 19_447_808)  # less the head on the 2 tokens, which a padding token skips


def test_a_decode_step_reads_every_weight_once_in_its_stored_precision_and_the_kv_cache():
    # float32: projections 73,728 + head 9,723,904 + norms 320 weights, 4 bytes; one adapter 8,192 weights;
    # the KV cache of a row at 20 keys: 2 (k, v) x 2 layers x 32 x 20 values
    fp32 = decode_bytes(TINY, [20], [4], Precision())
    assert fp32 == 4 * (73_728 + 9_723_904 + 320 + 8_192) + 4 * (2 * 2 * 32 * 20)
    # bfloat16 products (model.base_matmul): the projections are stored in 2 bytes; the rest as before
    assert decode_bytes(TINY, [20], [4], Precision(base="bfloat16")) == fp32 - 2 * 73_728


def test_the_decode_steps_of_a_batch_hold_the_rows_still_generating():
    # rows of 1, 3 and 4 generated tokens after prompts of 5, 6 and 7: the first token is the prompt pass's, so step 1
    # runs rows 2 and 3 at contexts 7 and 8, step 2 the same rows at 8 and 9, step 3 the last row at 10
    rows = [Completion(5, 1, "a"), Completion(6, 3, "a"), Completion(7, 4, "b")]
    steps = decode_steps(TINY, rows, Precision())
    assert [c for c, _ in steps] == [decode_step(TINY, [7, 8]), decode_step(TINY, [8, 9]), decode_step(TINY, [10])]
    assert steps[0][1] == decode_bytes(TINY, [7, 8], [4, 4], Precision())  # adapters a and b both read
    assert steps[2][1] == decode_bytes(TINY, [10], [4], Precision())
    assert decode_steps(TINY, [Completion(5, 1)], Precision()) == []


def test_useful_flops_split_by_the_precision_they_run_in():
    got = prompt_pass(TINY, 10)
    assert got.by_precision(Precision()) == {"float32": got.useful}
    assert got.by_precision(Precision(base="bfloat16")) == {"bfloat16": got.projections,
                                                            "float32": got.useful - got.projections}
    with pytest.raises(ValueError, match="unknown precision"):
        Precision(base="int3")


def test_unknown_targets_and_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="not projections"):
        Shapes(64, 128, 2, 4, 2, 16, 100, rank=4, targets=("c_attn",))
    with pytest.raises(ValueError, match="positive"):
        Shapes(64, 128, 0, 4, 2, 16, 100)
