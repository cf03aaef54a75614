"""The model of bench.gpu: a randomly initialised Qwen2 with the real tokenizer, in the shapes of Qwen2.5-7B or of
the tiny model, and the device helpers every part of the check uses."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RANK = 32
N_ADAPTERS = 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Shape:
    """A Qwen2 decoder's shapes and the workload sized for it."""

    config: dict[str, Any]
    proposals: int  # generation: proposals per teacher and task type (tasks.proposals_per_teacher)
    new_tokens: int  # cap on both token budgets of the preset (generation.max_new_tokens, teacher_max_new_tokens)
    mean_new_tokens: int  # the end-of-sequence bias makes rows end after about this many tokens (bench.gpu_workload)
    seed_programs: int  # warm-start programs per task type whose tasks fill the buffers (0 = the preset's, 36)
    evolver_layers: int


SHAPES = {
    # Qwen2.5-Coder-7B's config.json (the same shapes as Qwen2.5-7B): the model the paper trains.
    "qwen2.5-7b": Shape(dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                             num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
                             rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
                        proposals=2, new_tokens=128, mean_new_tokens=64, seed_programs=0, evolver_layers=28),
    # populora.models.TINY_CONFIG's shapes: every code path of the 7B run, on a CPU in seconds.
    "tiny": Shape(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, rope_theta=10000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True),
                  proposals=1, new_tokens=8, mean_new_tokens=4, seed_programs=12, evolver_layers=2),
}


# ---------------------------------------------------------------- the model

def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_base(shape_name: str, device, dtype):
    """A randomly initialised Qwen2ForCausalLM with the shape's config, made on `device` in `dtype`, frozen; with
    the real Qwen2 tokenizer, as a populora.models.BaseModel."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from populora.models import BaseModel, qwen2_tokenizer

    start = time.perf_counter()
    tokenizer = qwen2_tokenizer()
    config = Qwen2Config(**SHAPES[shape_name].config, bos_token_id=None,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.pad_token_id)
    previous = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        # made on the device in the final dtype: no float32 copy of 7B in host memory (the rotary frequencies are
        # computed in float32 whatever the default)
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.requires_grad_(False)
    sync(device)
    return BaseModel(name=f"random-{shape_name}", model=model, tokenizer=tokenizer, path=Path("."),
                     load_seconds=time.perf_counter() - start)


def lora_layer(config: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(module suffix, d_in, d_out) of the seven LoRA targets of one decoder layer."""
    h, i = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    return [("self_attn.q_proj", h, h), ("self_attn.k_proj", h, kv), ("self_attn.v_proj", h, kv),
            ("self_attn.o_proj", h, h), ("mlp.gate_proj", h, i), ("mlp.up_proj", h, i), ("mlp.down_proj", i, h)]


def free(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
