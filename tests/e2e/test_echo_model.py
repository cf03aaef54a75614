"""The echo model's guarantee, on the model as built on this machine: it writes its answer to every prompt when
sampled at the runs' temperature, and no update the end-to-end runs can make changes that answer. The end-to-end
tests count on it (valid proposals, so sandbox jobs, at every step)."""

from __future__ import annotations

import torch

from populora.config import ALL_TARGET_MODULES
from populora.models import load_base_model
from services.inference.backend import Request, Sampling
from services.inference.hf import HfBackend
from tests.e2e.conftest import e2e_overrides
from tests.e2e.echo_model import E2E_LR, MIN_MARGIN, RESPONSE, SHARP_MARGIN, _prompts, answer_rows

# more updates of one adapter than any end-to-end test makes (at most one per step, three steps)
UPDATES = 6


def _leads(model, rows: list[list[int]], n: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per prompt: the answer's log-likelihood (logits / scale) and its smallest lead over any other token."""
    logps, leads = [], []
    for ids in rows:
        logits = model(torch.tensor([ids])).logits[0, -n - 1:-1] / scale  # (n, V)
        target = torch.tensor(ids[-n:])
        logps.append(torch.log_softmax(logits, -1).gather(-1, target[:, None]).sum())
        with torch.no_grad():
            taken = logits.gather(-1, target[:, None]).squeeze(-1)
            leads.append((taken - logits.scatter(-1, target[:, None], float("-inf")).max(-1).values).min())
    return torch.stack(logps), torch.stack(leads)


def test_sampling_writes_the_answer_to_every_prompt(echo_model):
    """Through the inference backend the runs use, at temperature 1 with several seeds: the answer, token for
    token, for the teacher prompts of every task type and a student prompt."""
    base = load_base_model(echo_model)
    backend = HfBackend(base, None, ALL_TARGET_MODULES, max_rank=8)
    answer = base.tokenizer(RESPONSE, add_special_tokens=False)["input_ids"]
    requests = [Request(f"p{i}", None, prompt=prompt, sampling=Sampling(temperature=1.0, seed=17 * i, n=3,
                                                                         max_new_tokens=len(answer) + 8))
                for i, prompt in enumerate(_prompts(base.tokenizer))]
    results = list(backend.generate(requests))
    assert len(results) == len(requests)
    for res in results:
        for c in res.completions:
            assert base.tokenizer.decode(c.token_ids, skip_special_tokens=True) == RESPONSE, res.request_id
            assert c.finish_reason == "stop"


def test_no_update_the_runs_make_changes_the_answer(echo_model, tmp_path):
    """The worst update for the echo model is one aimed straight at lowering its answer's likelihood. Made with
    the runs' optimizer settings (AdamW at the e2e learning rate, the gradient clipped at 1) on a LoRA adapter of
    the runs' shape, UPDATES times, it leaves the answer leading every other token by a wide margin. The gradient is
    taken on the model before its output layer was sharpened (logits / scale), where it is largest, so the check
    is stricter than what a run can do."""
    from peft import LoraConfig, get_peft_model

    from populora.config import load_config

    cfg = load_config(preset="cpu-tiny", overrides=e2e_overrides(tmp_path, echo_model), env=False)
    assert cfg.trainer.lr == E2E_LR
    base = load_base_model(echo_model)
    rows, n = answer_rows(base.tokenizer)
    with torch.no_grad():
        _, sharp = _leads(base.model, rows, n)
    assert float(sharp.min()) >= SHARP_MARGIN - 1e-3
    scale = float(sharp.min()) / MIN_MARGIN  # logits / scale: the fitted model, its smallest lead MIN_MARGIN
    torch.manual_seed(0)
    model = get_peft_model(base.model, LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha,
                                                  target_modules=list(cfg.lora.target_modules)))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.trainer.lr, betas=cfg.trainer.betas, weight_decay=0.0)
    first = None
    for _ in range(UPDATES):
        logp, _ = _leads(model, rows, n, scale)
        first = float(logp.sum().detach()) if first is None else first
        opt.zero_grad()
        logp.sum().backward()  # descending the log-likelihood: the update that most lowers the answer
        torch.nn.utils.clip_grad_norm_(params, cfg.trainer.grad_clip)
        opt.step()
    with torch.no_grad():
        logp, leads = _leads(model, rows, n, scale)
    assert float(logp.sum()) < first, "the updates did not move the adapter: the check would see nothing"
    assert float(leads.min()) > 0.8 * MIN_MARGIN, leads.tolist()
