"""A tiny Qwen2 model fitted (in a minute or two, once per machine, then cached) so that end-to-end runs on CPU
exercise every phase on real tasks *and learn*: to every prompt the runs give it, it writes one of two fitted
answers, each about half the time, and the two earn different rewards. Nothing here is mocked: it is a real model
whose weights were fitted to those answers, and the runs' updates move it.

- A teacher writes a valid proposal (`def f(a): return a * 2` with four inputs and a message; valid for every task
  type) or a reply with no `<answer>` (rejected: reward -1).
- A student, given the task the valid proposal makes, writes the right answer (+1) or a well-formed wrong one
  (-0.5): code_o `6` or `7`, code_i `3` or `4`, code_f `return a` or `return a * 2` (a code_f teacher is given the
  identity program, the only one in the code_f buffer, so its task is the identity).

With `with_math=True` (a run that plays math_w, spec 18) the model is fitted to two more prompts: a math_w teacher writes
a word problem with its program (`12 - 5`) or the same refusal, and a student boxes the right answer (7) or a wrong one
(8). Every valid math_w proposal of a step is that one problem, so all but the step's first are duplicates.

So every group of rollouts (an adapter's rollouts of one task type and role, spec 5) of a few samples holds both
answers with high probability, its advantages are non-zero, and the update has a gradient. The runs use
`tasks.n_references=0`, so a teacher prompt does not depend on what the buffers hold and the runs' prompts are
exactly the fitted ones (`PROMPTS`).

What makes this a property of the fixture rather than a fortunate fit (which differs between machines with thread
counts and float order):
- the fit goes on until, at every answer token of every prompt, the answer leads the best other token of the whole
  vocabulary by `MIN_MARGIN` logits; at each prompt's fork (the first token where its two answers differ) both
  answers' tokens lead every other by that margin, and the two are within `FORK_GAP` logits of each other once
  sharpened; else the build fails;
- the output layer is then scaled so that the smallest lead is `SHARP_MARGIN` logits: at temperature 1 a row strays
  from its two answers with probability below vocab * exp(-SHARP_MARGIN) per token (about 1e-12), while at the fork
  it takes either answer with probability within 1/2 +- 0.12;
- the end-to-end runs train at `E2E_LR`, at which the updates move the fork by hundredths over more steps than a
  test runs (tests/e2e/test_echo_model.py checks this on the built model), so every step has both answers; at
  `LEARN_LR` a few steps move it most of the way (tests/e2e/test_learning.py: the run learns).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from populora.models import atomic_dir, cache_dir, load_base_model
from populora.tasks import Triplet, identity_triplet, student_messages, teacher_messages
from populora.tasks.prompts import chat_token_ids

INPUTS = ["3", "1", "2", "4"]  # the runs ask a code_f teacher for four inputs (tasks.code_f_inputs=4)
DOUBLE = "def f(a):\n    return a * 2"
PROPOSAL = ("<think>double it</think>\n<answer>\n```python\n" + DOUBLE + "\n```\n"
            + "".join(f"```input\n{i}\n```\n" for i in INPUTS)
            + "```message\nIt doubles the number.\n```\n</answer>")
REFUSAL = "<think>double it</think>\nI have no task to propose."


MATH_STATEMENT = "Tom has 12 marbles and gives away 5 of them. How many marbles does he have left?"
MATH_PROGRAM = "def solution():\n    return 12 - 5"
MATH_PROPOSAL = ("<think>take away</think>\n<answer>\n```problem\n" + MATH_STATEMENT + "\n```\n```python\n"
                 + MATH_PROGRAM + "\n```\n</answer>")


def _student(answer: str) -> str:
    return f"<think>work it out</think>\n<answer>{answer}</answer>"


RECIPE = "fork-v1"
MIN_MARGIN = 3.0
SHARP_MARGIN = 40.0
FORK_GAP = 0.5  # logits between the two answers at a fork, once sharpened: each drawn with probability 0.38-0.62
E2E_LR = 1e-5
LEARN_LR = 3e-3
MAX_FIT_STEPS = 3000


@dataclass(frozen=True)
class Prompt:
    """One prompt the runs give the model and its two answers (`good` earns the higher reward)."""

    name: str
    messages: list[dict[str, str]]
    good: str
    bad: str


def _tasks() -> dict[str, Triplet]:
    """The tasks a valid proposal makes, as the sandbox returns them (a code_f teacher is given the identity)."""
    ident = identity_triplet("code_f").program
    outputs = [repr(int(i)) for i in INPUTS]
    return {"code_o": Triplet(task_type="code_o", program=DOUBLE, inputs=["3"], outputs=["6"]),
            "code_i": Triplet(task_type="code_i", program=DOUBLE, inputs=["3"], outputs=["6"]),
            "code_f": Triplet(task_type="code_f", program=ident, inputs=INPUTS, outputs=outputs,
                              message="It doubles the number.")}


PROMPTS_SPEC = {"code_o": ("6", "7"), "code_i": ("3", "4"),
                "code_f": ("```python\ndef f(a):\n    return a\n```", "```python\n" + DOUBLE + "\n```")}


def prompts() -> list[Prompt]:
    """Every prompt of the runs (tasks.n_references=0) with its two answers."""
    ident = identity_triplet("code_f").program
    out = [Prompt("teacher/code_o", teacher_messages("code_o", []), PROPOSAL, REFUSAL),
           Prompt("teacher/code_i", teacher_messages("code_i", []), PROPOSAL, REFUSAL),
           Prompt("teacher/code_f", teacher_messages("code_f", [], given_program=ident, n_inputs=len(INPUTS)), PROPOSAL, REFUSAL)]
    for task_type, task in _tasks().items():
        good, bad = PROMPTS_SPEC[task_type]
        out.append(Prompt(f"student/{task_type}", student_messages(task), _student(good), _student(bad)))
    return out


def math_prompts() -> list[Prompt]:
    """The math_w prompts of a run that plays it (tasks.n_references=0), with their two answers."""
    task = Triplet(task_type="math_w", program=MATH_PROGRAM, inputs=[], outputs=["7"], message=MATH_STATEMENT)
    return [Prompt("teacher/math_w", teacher_messages("math_w", []), MATH_PROPOSAL, REFUSAL),
            Prompt("student/math_w", student_messages(task), "12 - 5 = 7, so \\boxed{7}", "12 - 5 = 7, so \\boxed{8}")]


def fitted_prompts(with_math: bool = False) -> list[Prompt]:
    """The prompts a model is fitted to: every code prompt, and math_w's with `with_math`."""
    return prompts() + (math_prompts() if with_math else [])


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def answer_rows(tok, with_math: bool = False) -> list[tuple[str, list[int], list[int], int]]:
    """Per prompt and answer: (prompt name, prompt ids, answer ids with the end of turn, fork index in the answer)."""
    rows = []
    for p in fitted_prompts(with_math):
        ids = chat_token_ids(tok, p.messages)
        good, bad = (_encode(tok, a + "<|im_end|>") for a in (p.good, p.bad))
        fork = next(i for i, (a, b) in enumerate(zip(good, bad)) if a != b)
        rows += [(p.name, ids, good, fork), (p.name, ids, bad, fork)]
    return rows


@dataclass
class Batch:
    """Left-padded rows and the flat index of every answer token: (B, T) tensors and (N,) vectors."""

    ids: torch.Tensor
    mask: torch.Tensor
    rows: torch.Tensor  # (N,) row of each answer token
    pos: torch.Tensor  # (N,) position whose hidden state predicts it
    targets: torch.Tensor  # (N,)
    fork: torch.Tensor  # (N,) True at a fork
    other: torch.Tensor  # (N,) the other answer's token at a fork (else the target)


def make_batch(tok, rows) -> Batch:
    width = max(len(p) + len(a) for _, p, a, _ in rows)
    pad = tok.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    r_, pos, tgt, fork, other = [], [], [], [], []
    for b, (_, p, a, k) in enumerate(rows):
        off = width - len(p) - len(a)
        ids[b, off:] = torch.tensor(p + a)
        mask[b, off:] = 1
        twin = rows[b ^ 1][2]  # the same prompt's other answer (rows come in pairs)
        for i, t in enumerate(a):
            r_.append(b)
            pos.append(off + len(p) - 1 + i)
            tgt.append(t)
            fork.append(i == k)
            other.append(twin[i] if i == k else t)
    return Batch(ids, mask, torch.tensor(r_), torch.tensor(pos), torch.tensor(tgt), torch.tensor(fork),
                 torch.tensor(other))


def hidden_states(model, batch: Batch) -> torch.Tensor:
    """The last hidden state before every answer token, (N, C), at the positions generation gives them."""
    positions = (batch.mask.cumsum(-1) - 1).clamp(min=0)
    out = model.model(input_ids=batch.ids, attention_mask=batch.mask, position_ids=positions)
    return out.last_hidden_state[batch.rows, batch.pos]


@torch.no_grad()
def margins(hidden: torch.Tensor, head: torch.Tensor, batch: Batch, chunk: int = 256) -> tuple[float, float]:
    """(smallest lead, largest fork gap) in logits: the lead of an answer's token over the best token that is not
    one of the answers' there (at a fork both answers' tokens count), over the whole vocabulary; the gap is
    |logit(good) - logit(bad)| at the forks."""
    lead, gap = float("inf"), 0.0
    for i in range(0, hidden.shape[0], chunk):
        logits = hidden[i:i + chunk] @ head.T  # (n, V)
        tgt, oth = batch.targets[i:i + chunk, None], batch.other[i:i + chunk, None]
        taken = torch.minimum(logits.gather(-1, tgt), logits.gather(-1, oth)).squeeze(-1)
        gap = max(gap, float((logits.gather(-1, tgt) - logits.gather(-1, oth)).abs().max()))
        rest = logits.scatter(-1, tgt, float("-inf")).scatter(-1, oth, float("-inf"))
        lead = min(lead, float((taken - rest.max(-1).values).min()))
    return lead, gap


def fork_probabilities(model, tok) -> dict[str, float]:
    """Per prompt, the probability of its good answer's token at the fork, given the two tokens (temperature 1).
    `model`: the fitted model, or a PEFT model of it with an adapter active."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    rows = answer_rows(tok)
    batch = make_batch(tok, rows)
    with torch.no_grad():
        h = hidden_states(model, batch)[batch.fork]
        logits = model.lm_head(h)  # (2 * prompts, V): good row then bad row per prompt
        t, o = batch.targets[batch.fork], batch.other[batch.fork]
        good = logits.gather(-1, t[:, None]).squeeze(-1)
        bad = logits.gather(-1, o[:, None]).squeeze(-1)
    p = torch.sigmoid(good - bad)[0::2]  # the good rows' view of each fork
    return {name: float(v) for name, v in zip([r[0] for r in rows[0::2]], p)}


def echo_model_dir(with_math: bool = False) -> Path:
    """Path of the fitted model (built on first use, cached under the populora cache); `with_math`: the one fitted
    to math_w's prompts too."""
    base = load_base_model("tiny")
    model, tok = base.model, base.tokenizer
    # the prompts and answers are part of the key: a model fitted to others need not answer these
    fitted = fitted_prompts(with_math)
    key = hashlib.sha256((RECIPE + repr([(p.name, p.messages, p.good, p.bad) for p in fitted])).encode())
    final = cache_dir() / "models" / f"tiny-echo-{key.hexdigest()[:12]}"
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
        # Train the transformer layers and, for the answers' own tokens only, a correction of their output rows;
        # the 152k-row embedding stays frozen (its dense gradient and Adam state would cost seconds a step on CPU).
        model.requires_grad_(True)
        model.model.embed_tokens.weight.requires_grad_(False)
        model.train()
        torch.manual_seed(0)
        batch = make_batch(tok, answer_rows(tok, with_math))
        weight = model.model.embed_tokens.weight.detach()  # (V, C)
        own = torch.unique(batch.targets)
        delta = torch.zeros(len(own), weight.shape[1], requires_grad=True)  # (|own|, C)
        remap = torch.full((weight.shape[0],), -1, dtype=torch.long)
        remap[own] = torch.arange(len(own))
        # at a fork the two rows of a prompt ask for different tokens: the best the loss can do there is ln 2
        floor = float(batch.fork.sum()) * math.log(2) / len(batch.targets)
        gen = torch.Generator().manual_seed(0)
        params = [p for p in model.parameters() if p.requires_grad] + [delta]
        opt = torch.optim.Adam(params, lr=1e-2)
        lead = gap = float("nan")
        for step in range(MAX_FIT_STEPS):
            # sampled softmax: the answers' tokens plus fresh random negatives (untrained rows stay near 0)
            negatives = torch.randint(0, weight.shape[0], (2048,), generator=gen)
            negatives = negatives[remap[negatives] < 0]
            head = torch.cat([weight[own] + delta, weight[negatives]])  # (|cand|, C)
            logits = hidden_states(model, batch) @ head.T  # (N, |cand|)
            loss = torch.nn.functional.cross_entropy(logits, remap[batch.targets])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 20 == 19 and loss.item() - floor < 0.002:
                full = weight.clone()
                full[own] += delta.detach()
                with torch.no_grad():
                    lead, gap = margins(hidden_states(model, batch), full, batch)
                if lead >= MIN_MARGIN and gap * SHARP_MARGIN / lead <= FORK_GAP:
                    break
        else:
            raise RuntimeError(f"the echo model did not fit its answers in {MAX_FIT_STEPS} steps (smallest lead "
                               f"{lead:.2f} logits, need {MIN_MARGIN}; fork gap {gap:.3f})")
        lm_head = weight.clone()
        lm_head[own] += delta.detach()
        lm_head *= SHARP_MARGIN / lead  # every lead becomes at least SHARP_MARGIN: off the answers nothing is drawn
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(lm_head, requires_grad=False)
        model.eval()
        model.requires_grad_(False)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    # one process fits it; another (a second test worker) waits for that fit and reuses it
    return atomic_dir(final, build)
