"""A tiny Qwen2 model trained (in a minute, once, then cached) to answer every prompt with one well-formed AZR
proposal, so end-to-end runs on CPU exercise every phase with valid tasks: the random `tiny` model never writes
a valid proposal. Nothing here is mocked: it is a real model whose weights were fitted to that one answer."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import torch

from populora.models import cache_dir, load_base_model
from populora.tasks import Triplet, identity_triplet, student_messages, teacher_messages

INPUTS = ["3", "1", "2", "4", "5", "6", "7", "8", "9", "10"]
RESPONSE = ("<think>double it</think>\n<answer>\n```python\ndef f(a):\n    return a * 2\n```\n"
            + "".join(f"```input\n{i}\n```\n" for i in INPUTS)
            + "```message\nIt doubles the number.\n```\n</answer>")
RECIPE = "echo-v3"


def _prompts(tok) -> list[str]:
    ident = identity_triplet("code_o")
    task = Triplet(task_type="code_f", program="def f(a):\n    return a * 2", inputs=INPUTS,
                   outputs=[repr(int(i) * 2) for i in INPUTS], message="doubles")
    chats = [teacher_messages("code_o", [ident]), teacher_messages("code_i", [ident]),
             teacher_messages("code_f", [], given_program=ident.program), student_messages(task)]
    return [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]


def echo_model_dir() -> Path:
    """Path of the trained model (built on first use, cached under the populora cache)."""
    base = load_base_model("tiny")
    model, tok = base.model, base.tokenizer
    # the prompts are part of the key: a model fitted to other prompts need not answer these
    key = hashlib.sha256((RECIPE + RESPONSE + "".join(_prompts(tok))).encode()).hexdigest()[:12]
    final = cache_dir() / "models" / f"tiny-echo-{key}"
    if final.exists():
        return final
    # Train the transformer layers and, for the response's own tokens only, a correction of their output rows;
    # the 152k-row embedding stays frozen (its dense gradient and Adam state would cost seconds a step on CPU).
    model.requires_grad_(True)
    model.model.embed_tokens.weight.requires_grad_(False)
    model.train()
    torch.manual_seed(0)
    response = tok(RESPONSE + "<|im_end|>", add_special_tokens=False)["input_ids"]
    rows = [tok(p, add_special_tokens=False)["input_ids"] + response for p in _prompts(tok)]
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    n = len(response)
    targets = ids[:, -n:]  # (B, n)
    weight = model.model.embed_tokens.weight.detach()  # (V, C)
    own = torch.unique(targets)
    delta = torch.zeros(len(own), weight.shape[1], requires_grad=True)  # (|own|, C)
    remap = torch.full((weight.shape[0],), -1, dtype=torch.long)
    remap[own] = torch.arange(len(own))
    gen = torch.Generator().manual_seed(0)
    params = [p for p in model.parameters() if p.requires_grad] + [delta]
    opt = torch.optim.Adam(params, lr=1e-2)
    for step in range(400):
        # sampled softmax: the response's tokens plus fresh random negatives (untrained rows stay near 0)
        negatives = torch.randint(0, weight.shape[0], (2048,), generator=gen)
        negatives = negatives[remap[negatives] < 0]
        head = torch.cat([weight[own] + delta, weight[negatives]])  # (|cand|, C)
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, C)
        logits = hidden[:, -n - 1:-1] @ head.T  # (B, n, |cand|)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, head.shape[0]), remap[targets].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 19 and loss.item() < 0.002:
            break
    lm_head = weight.clone()
    lm_head[own] += delta.detach()
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(lm_head, requires_grad=False)
    model.eval()
    model.requires_grad_(False)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-echo-", dir=final.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
