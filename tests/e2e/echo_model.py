"""A tiny Qwen2 model trained (in a minute, once, then cached) to answer every prompt with one well-formed AZR
proposal, so end-to-end runs on CPU exercise every phase with valid tasks: the random `tiny` model never writes
a valid proposal. Nothing here is mocked: it is a real model whose weights were fitted to that one answer.

That every step of an end-to-end run gets valid proposals is a property of this fixture, not a fortunate outcome of
the fit (which differs from machine to machine with thread counts and float order):
- the fit goes on until every token of the answer leads the next best token by `MIN_MARGIN` logits over the whole
  vocabulary, for every prompt, or the build fails;
- the output layer is then scaled so that the smallest lead is `SHARP_MARGIN` logits: at temperature 1 a row
  strays from the answer with probability below vocab * exp(-SHARP_MARGIN) per token (about 1e-12), so sampling
  writes the greedy answer;
- end-to-end runs train at `E2E_LR` (spec 5's RL rate), at which even updates aimed straight at lowering the
  answer's likelihood move the leads by hundredths of a logit over more steps than any test runs
  (tests/e2e/test_echo_model.py checks this on the built model)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from populora.models import atomic_dir, cache_dir, load_base_model
from populora.tasks import Triplet, identity_triplet, student_messages, teacher_messages

INPUTS = ["3", "1", "2", "4", "5", "6", "7", "8", "9", "10"]
RESPONSE = ("<think>double it</think>\n<answer>\n```python\ndef f(a):\n    return a * 2\n```\n"
            + "".join(f"```input\n{i}\n```\n" for i in INPUTS)
            + "```message\nIt doubles the number.\n```\n</answer>")
RECIPE = "echo-v5"  # v5: fitted on one torch thread
MIN_MARGIN = 3.0
SHARP_MARGIN = 40.0
E2E_LR = 1e-5
MAX_FIT_STEPS = 1200


def _prompts(tok) -> list[str]:
    ident = identity_triplet("code_o")
    task = Triplet(task_type="code_f", program="def f(a):\n    return a * 2", inputs=INPUTS,
                   outputs=[repr(int(i) * 2) for i in INPUTS], message="doubles")
    chats = [teacher_messages("code_o", [ident]), teacher_messages("code_i", [ident]),
             teacher_messages("code_f", [], given_program=ident.program), student_messages(task)]
    return [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]


@torch.no_grad()
def _smallest_lead(model, weight, own, delta, ids, mask, targets) -> float:
    """Smallest margin, over every prompt and answer token, of the answer's token over the best other token of the
    whole vocabulary (the output layer being the embedding with the fitted rows corrected)."""
    head = weight.clone()
    head[own] += delta
    n = targets.shape[1]
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -n - 1:-1]  # (B, n, C)
    logits = hidden @ head.T  # (B, n, V)
    taken = logits.gather(-1, targets[..., None]).squeeze(-1)  # (B, n)
    logits.scatter_(-1, targets[..., None], float("-inf"))
    return float((taken - logits.max(-1).values).min())


def answer_rows(tok) -> tuple[list[list[int]], int]:
    """Each prompt followed by the answer, as token ids, and the answer's length (end of turn included)."""
    response = tok(RESPONSE + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return [tok(p, add_special_tokens=False)["input_ids"] + response for p in _prompts(tok)], len(response)


def echo_model_dir() -> Path:
    """Path of the trained model (built on first use, cached under the populora cache)."""
    base = load_base_model("tiny")
    model, tok = base.model, base.tokenizer
    # the prompts are part of the key: a model fitted to other prompts need not answer these
    key = hashlib.sha256((RECIPE + RESPONSE + "".join(_prompts(tok))).encode()).hexdigest()[:12]
    final = cache_dir() / "models" / f"tiny-echo-{key}"
    if final.exists():
        return final

    def build(tmp: Path) -> None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the same fit whatever the caller's thread count (a test worker, a shell)
        try:
            fit(tmp)
        finally:
            torch.set_num_threads(threads)

    def fit(tmp: Path) -> None:
        # Train the transformer layers and, for the response's own tokens only, a correction of their output rows;
        # the 152k-row embedding stays frozen (its dense gradient and Adam state would cost seconds a step on CPU).
        model.requires_grad_(True)
        model.model.embed_tokens.weight.requires_grad_(False)
        model.train()
        torch.manual_seed(0)
        rows, n = answer_rows(tok)
        width = max(len(r) for r in rows)
        pad = tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        targets = ids[:, -n:]  # (B, n)
        weight = model.model.embed_tokens.weight.detach()  # (V, C)
        own = torch.unique(targets)
        delta = torch.zeros(len(own), weight.shape[1], requires_grad=True)  # (|own|, C)
        remap = torch.full((weight.shape[0],), -1, dtype=torch.long)
        remap[own] = torch.arange(len(own))
        gen = torch.Generator().manual_seed(0)
        params = [p for p in model.parameters() if p.requires_grad] + [delta]
        opt = torch.optim.Adam(params, lr=1e-2)
        lead = float("-inf")
        for step in range(MAX_FIT_STEPS):
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
                lead = _smallest_lead(model, weight, own, delta.detach(), ids, mask, targets)
                if lead >= MIN_MARGIN:
                    break
        else:
            raise RuntimeError(f"the echo model did not fit its answer in {MAX_FIT_STEPS} steps "
                               f"(smallest lead {lead:.2f} logits, need {MIN_MARGIN})")
        lm_head = weight.clone()
        lm_head[own] += delta.detach()
        lm_head *= SHARP_MARGIN / lead  # every lead becomes at least SHARP_MARGIN: sampling writes the greedy answer
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(lm_head, requires_grad=False)
        model.eval()
        model.requires_grad_(False)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    # one process fits it; another (a second test worker) waits for that fit and reuses it
    return atomic_dir(final, build)
