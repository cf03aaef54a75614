"""A real learning signal on the tiny model: rewarding one token raises its probability (spec §5)."""

from __future__ import annotations

import pytest
import torch

from populora.pb import trainer_pb2
from tests.trainer.conftest import make_service, update_one, update_request

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]  # <|im_start|>user\nHello<|im_end|>\n...assistant\n
TARGET = 785


def _target(store, base, ref) -> tuple[float, int]:
    """log pi(TARGET | PROMPT) and TARGET's rank (0 = most likely) under the stored version, loaded by PEFT on a
    clean base (not the trainer's)."""
    model = store.load_into_peft(base, store.ref(ref.adapter_id, ref.version))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -1].float()
    return float(torch.log_softmax(logits, -1)[TARGET]), int((logits > logits[TARGET]).sum())


def _batch(gen: torch.Generator) -> list[trainer_pb2.Rollout]:
    """Two responses that say TARGET (reward 1) and six that say something else (reward 0)."""
    others = torch.randint(1000, 100000, (6,), generator=gen).tolist()
    tokens = [TARGET, TARGET, *others]
    return [trainer_pb2.Rollout(prompt_token_ids=PROMPT, response_token_ids=[t], reward=float(t == TARGET),
                                task_type="code_o", role="student") for t in tokens]


@pytest.mark.slow
def test_rewarding_a_token_raises_its_probability(fresh_base, store):
    svc = make_service(fresh_base, store, lr=1e-2)
    ref = svc.InitAdapter(trainer_pb2.InitAdapterRequest(adapter_id="s0", role="student", seed=0)).adapter
    start, start_rank = _target(store, fresh_base().model, ref)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for step in range(30):
        resp = update_one(svc, update_request(ref, _batch(gen), seed=step, step=step))
        ref = resp.adapter
        losses.append(resp.stats.loss)
    end, end_rank = _target(store, fresh_base().model, ref)
    # The random tiny model is near uniform (log 1/151936 = -11.9) and its small tied head caps any logit near 1.3,
    # so the reachable gain is about 1.5 nats; what counts is that TARGET climbs from the middle of the vocabulary
    # to the top.
    assert start_rank > 1000 and end_rank == 0, (start_rank, end_rank)
    assert end > start + 1.0, (start, end)
    assert losses[-1] < losses[0]
