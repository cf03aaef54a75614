"""The echo model's guarantee, on the model as built on this machine: sampled at the runs' temperature it writes one
of each prompt's two fitted answers, each often, and the updates the end-to-end runs make at E2E_LR keep it so. The
end-to-end tests count on it (valid and invalid proposals, right and wrong answers, so a learning signal at every
step)."""

from __future__ import annotations

from collections import Counter

import torch

from populora.config import ALL_TARGET_MODULES
from populora.models import load_base_model
from services.inference.backend import Request, Sampling
from services.inference.hf import HfBackend
from tests.e2e.conftest import e2e_overrides
from tests.e2e.echo_model import (
    E2E_LR,
    SHARP_MARGIN,
    answer_rows,
    fork_probabilities,
    hidden_states,
    make_batch,
    margins,
    prompts,
)

UPDATES = 6  # more updates of one adapter than any end-to-end test makes at E2E_LR (one per step, three steps)
SAMPLES = 16


def test_sampling_writes_one_of_the_two_answers_to_every_prompt(echo_model):
    """Through the inference backend the runs use, at temperature 1: every completion is one of its prompt's two
    answers, token for token, and each answer is drawn (16 samples: both at p ~ 1/2 but with odds 2^-15)."""
    base = load_base_model(echo_model)
    backend = HfBackend(base, None, ALL_TARGET_MODULES, max_rank=8)
    specs = prompts()
    requests = [Request(p.name, None, messages=p.messages,
                        sampling=Sampling(temperature=1.0, seed=17 * i, n=SAMPLES, max_new_tokens=120))
                for i, p in enumerate(specs)]
    results = {r.request_id: r for r in backend.generate(requests)}
    for p in specs:
        drawn = Counter(c.text for c in results[p.name].completions)
        assert set(drawn) == {p.good, p.bad}, (p.name, drawn)
        assert all(c.finish_reason == "stop" for c in results[p.name].completions)


def test_the_fork_is_even_and_everything_else_sharp(echo_model):
    base = load_base_model(echo_model)
    probs = fork_probabilities(base.model, base.tokenizer)
    assert set(probs) == {p.name for p in prompts()}
    assert all(0.35 <= v <= 0.65 for v in probs.values()), probs
    batch = make_batch(base.tokenizer, answer_rows(base.tokenizer))
    with torch.no_grad():
        lead, _ = margins(hidden_states(base.model, batch), base.model.lm_head.weight, batch)
    assert lead >= SHARP_MARGIN - 1e-3


def test_the_runs_updates_keep_both_answers_likely(echo_model, tmp_path):
    """The strongest push the runs' updates can give the fork: the log-probability of every prompt's good answer
    there, ascended with the runs' optimizer settings (AdamW at the e2e learning rate, the gradient clipped at 1) on
    a LoRA adapter of the runs' shape, UPDATES times. The fork moves (the check sees the updates) but stays between
    0.2 and 0.8, and every other token keeps a wide lead."""
    from peft import LoraConfig, get_peft_model

    from populora.config import load_config

    cfg = load_config(preset="cpu-tiny", overrides=e2e_overrides(tmp_path, echo_model), env=False)
    assert cfg.trainer.lr == E2E_LR
    base = load_base_model(echo_model)
    tok = base.tokenizer
    start = fork_probabilities(base.model, tok)
    torch.manual_seed(0)
    model = get_peft_model(base.model, LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha,
                                                  target_modules=list(cfg.lora.target_modules)))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.trainer.lr, betas=cfg.trainer.betas, weight_decay=0.0)
    batch = make_batch(tok, answer_rows(tok))
    good = batch.fork & (batch.rows % 2 == 0)  # each prompt's good answer at its fork (rows come good, bad)
    for _ in range(UPDATES):
        h = hidden_states(model.get_base_model(), batch)[good]
        logp = torch.log_softmax(model.get_base_model().lm_head(h), -1)
        taken = logp.gather(-1, batch.targets[good][:, None]).squeeze(-1)
        opt.zero_grad()
        (-taken.sum()).backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.trainer.grad_clip)
        opt.step()
    end = fork_probabilities(model, tok)
    assert any(abs(end[k] - start[k]) > 1e-4 for k in start), "the updates did not move the adapter"
    assert all(0.2 <= v <= 0.8 for v in end.values()), end
    with torch.no_grad():
        lead, _ = margins(hidden_states(model.get_base_model(), batch), model.get_base_model().lm_head.weight,
                          batch)
    assert lead > 0.8 * SHARP_MARGIN, lead
