"""The behaviour policy of spec 16 in the `vllm` backend: log_softmax(logits / T) of each drawn token, top-p aside,
and which draws came from a nucleus that left out probability mass.

vLLM returns log-probabilities of one of four tensors (`logprobs_mode`): the raw logits or their log_softmax at
temperature 1, or the processed ones, taken after temperature *and* top-p, renormalised over the nucleus. None is the
policy of spec 16 when top_p < 1. So the engine returns the drawn token's raw logit (`raw_logits`), and
`BehaviourRecorder`, a logits processor that changes nothing, records for every step of a tagged request the
log-normaliser logsumexp(logits / T) of the same float32 logits and whether the nucleus left out a token of non-zero
probability. Then log mu(y) = logit_y / T - logsumexp(logits / T): the value the hf backend records and the trainer
computes, up to float32 rounding.

The records live in the worker process (class state) and are fetched with `collective_rpc` once requests finish,
which works whether the worker runs in this process or in its own. Recording costs, per step with tagged rows, a
log-sum-exp and a softmax over their logits and one copy of two numbers per row to the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

# The SamplingParams.extra_args key that tags a request for recording; its value is the request's own id.
TAG = "populora_behaviour"
# vLLM samples greedily below this temperature (its sampler's epsilon)
GREEDY_BELOW = 1e-5


@dataclass
class _Tagged:
    key: str
    temperature: float  # T of the distribution; 1 for greedy requests
    top_p: float
    output: list[int]  # vLLM's running list of the request's generated tokens (its length: the next position)


class BehaviourRecorder(LogitsProcessor):
    """Records (logsumexp(logits / T), truncated) per generated position of every tagged request; changes no logit.

    The position is the length of the request's output so far, so a step whose token vLLM discards (a prompt run in
    chunks samples after each chunk) is overwritten by the one that counts."""

    records: dict[str, dict[int, tuple[float, bool]]] = {}  # key -> position -> (log-normaliser, truncated)

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.device = device
        self.rows: dict[int, _Tagged] = {}  # batch index -> tagged request

    def is_argmax_invariant(self) -> bool:
        # False puts it before the temperature and runs it for greedy rows too: it must see the raw logits of all
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.rows, batch_update, _tagged)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        index = list(self.rows)
        tagged = [self.rows[i] for i in index]
        temperature = torch.tensor([t.temperature for t in tagged], device=logits.device)
        top_p = torch.tensor([t.top_p for t in tagged], device=logits.device)
        scaled = logits[torch.tensor(index, device=logits.device)].float() / temperature[:, None]  # (R, V)
        lse = torch.logsumexp(scaled, dim=-1)
        # vLLM's nucleus drops the least likely tokens while their mass is <= 1 - top_p: it left out mass exactly
        # when some token of non-zero probability is within that
        probs = torch.softmax(scaled, dim=-1)
        truncated = ((probs > 0) & (probs <= (1 - top_p)[:, None])).any(dim=-1) & (top_p < 1)
        for t, value, cut in zip(tagged, lse.tolist(), truncated.tolist(), strict=True):
            self.records.setdefault(t.key, {})[len(t.output)] = (value, bool(cut))
        return logits


def recorded(sampling) -> bool:
    """Whether a request's draws are recorded (a `Sampling`): its log-probabilities are asked for, or a nucleus can
    truncate them. Other requests cost the recorder nothing."""
    return sampling.logprobs or (sampling.temperature > 0 and sampling.top_p < 1)


def _tagged(params, _prompt, output: list[int]) -> _Tagged | None:
    key = (params.extra_args or {}).get(TAG)
    if key is None:
        return None
    if params.temperature < GREEDY_BELOW:  # vLLM takes the argmax: no nucleus, and mu at T = 1 (as the hf backend)
        return _Tagged(key, 1.0, 1.0, output)
    return _Tagged(key, params.temperature, params.top_p, output)


def pop_records(_worker, keys: list[str]) -> dict[str, dict[int, tuple[float, bool]]]:
    """The records of `keys`, removed from the worker (run there through `collective_rpc`)."""
    return {k: BehaviourRecorder.records.pop(k, {}) for k in keys}


def covered(records: dict[int, tuple[float, bool]], n: int) -> bool:
    """Whether every one of n generated positions has its record."""
    return all(i in records for i in range(n))


def behaviour_logprobs(raw_logits: list[float], records: dict[int, tuple[float, bool]], temperature: float
                       ) -> list[float]:
    """log mu of each token, logit_y / T - logsumexp(logits / T), in float32 as the hf backend computes it; T = 1
    for a greedy request."""
    lse = torch.tensor([records[i][0] for i in range(len(raw_logits))], dtype=torch.float32)
    scale = torch.tensor(temperature if temperature >= GREEDY_BELOW else 1.0, dtype=torch.float32)
    return (torch.tensor(raw_logits, dtype=torch.float32) / scale - lse).tolist()


def truncated_share(records: dict[int, tuple[float, bool]], n: int) -> float:
    """The share of n generated tokens drawn from a nucleus that left out probability mass."""
    return sum(records[i][1] for i in range(n)) / max(n, 1)
