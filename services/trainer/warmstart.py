"""The warm start's supervised fit (spec 13): one adapter trained on examples in the exact answer formats, and the
cache that lets a second run reuse it.

The loss is the mean negative log-likelihood of the response tokens, which is the TRR++ objective of spec 5 with
A = 1 on every token: the same rows, micro-batches and log-probabilities as `trr.py`, so the warm-up trains exactly
the tokens the policy gradient later sees (prompts encoded by the chat template, the end-of-turn token included).

Cache entries live in an artifact store under the model cache, one adapter per digest of (base model, examples,
hyperparameters). An entry is trusted only when its recorded digest and the hash of its weights match what is
read back; anything else (a partial write, a flipped byte, a foreign file) is removed and the fit is made again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from populora.adapters import AdapterHost
from populora.store import AdapterVersion, ArtifactStore, StoreError
from services.trainer.logprobs import token_logprobs
from services.trainer.optim import AdapterAdamW
from services.trainer.trr import Row, collate, pack, response_logprobs

log = logging.getLogger(__name__)

# Bump when the fit's math or the entry's layout changes: older entries then miss instead of being reused.
WARMSTART_FORMAT = 1
# Prompt tokens that keep their gradient when the rest of the prompt runs without (see sft_fit): the chat template's
# assistant header and a little before it.
GRAD_TAIL = 16


@dataclass
class SftRow:
    """One tokenized example: the prompt as the model sees it, then the response it is taught."""

    prompt: list[int]
    response: list[int]
    task_type: str
    role: str


@dataclass
class FitSettings:
    """The hyperparameters of one warm-up (all part of the cache key)."""

    rank: int
    alpha: float
    target_modules: list[str]
    seed: int
    steps: int
    batch_size: int
    lr: float
    grad_clip: float
    micro_batch_tokens: int
    prompt_grad: bool = False


@dataclass
class FitResult:
    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


def base_identity(name: str, path: Path) -> dict:
    """What identifies a base model's weights without reading them all: its name, its config.json, and the names
    and sizes of its weight files."""
    config = (path / "config.json").read_bytes() if (path / "config.json").exists() else b""
    files = sorted((p.name, p.stat().st_size) for p in path.glob("*") if p.suffix in (".safetensors", ".bin", ".gguf"))
    return {"name": name, "config_sha256": hashlib.sha256(config).hexdigest(), "weight_files": files}


def fit_digest(base: dict, settings: FitSettings, rows: list[SftRow]) -> str:
    """The cache key: a sha256 over the base model's identity, the hyperparameters and every example's tokens."""
    h = hashlib.sha256(json.dumps({"format": WARMSTART_FORMAT, "base": base, "settings": asdict(settings)},
                                  sort_keys=True).encode())
    for r in rows:
        h.update(json.dumps([r.prompt, r.response, r.task_type, r.role]).encode())
    return h.hexdigest()


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(weights):
        t = weights[key].detach().to("cpu", torch.float32).contiguous()
        h.update(key.encode() + b"|" + str(tuple(t.shape)).encode() + b"|" + t.numpy().tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------- the fit

def batches_of(rows: list[SftRow], settings: FitSettings) -> list[list[SftRow]]:
    """`steps` batches of `batch_size` examples: the examples in a seeded order, epoch after epoch."""
    rng = random.Random(settings.seed)
    order: list[int] = []
    out = []
    for _ in range(settings.steps):
        batch = []
        for _ in range(settings.batch_size):
            if not order:
                order = list(range(len(rows)))
                rng.shuffle(order)
            batch.append(rows[order.pop()])
        out.append(batch)
    return out


def sft_fit(policy: AdapterHost, slot: str, params: list[torch.nn.Parameter], optimizer: AdapterAdamW,
            rows: list[SftRow], settings: FitSettings, device: torch.device) -> FitResult:
    """Fit the adapter in `slot`: per step, loss = -(1/N) sum over the batch's N response tokens of log pi(y_t),
    backward over micro-batches of at most micro_batch_tokens, clip to grad_clip, one AdamW step.

    Without `prompt_grad`, each example's prompt runs once without gradient and its keys and values are constants
    of the fit: the backward pass (twice a forward) then covers the response only, which on a CPU made the fit
    about twice as fast for prompts four times longer than their answers (docs/warmstart.md)."""
    if not rows:
        raise ValueError("the warm start needs at least one example")
    start = time.perf_counter()
    result = FitResult()
    every = max(1, settings.steps // 16)  # about 16 progress lines, whatever the length of the fit
    for i, batch in enumerate(batches_of(rows, settings), 1):
        n_tokens = sum(len(r.response) for r in batch)
        loss = 0.0
        if settings.prompt_grad:
            train_rows = [Row(0, r.prompt + r.response, len(r.prompt), 1.0, 1.0 / n_tokens) for r in batch]
            for rows_mb in pack(train_rows, settings.micro_batch_tokens):
                mb = collate(rows_mb, [slot], device)
                logp, _ = response_logprobs(policy, mb, with_entropy=False)
                per_token = -mb.inv_tokens * logp
                per_token.sum().backward()
                loss += float(per_token.detach().sum())
        else:
            for r in batch:
                nll = -_response_logprobs_after_prompt(policy, slot, r, device).sum() / n_tokens
                nll.backward()
                loss += float(nll.detach())
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        result.losses.append(loss)
        result.tokens += sum(len(r.prompt) + len(r.response) for r in batch)
        if i % every == 0 or i == settings.steps:
            elapsed = time.perf_counter() - start
            log.info("warm start: fit step %d/%d, loss %.3f, %.0fs, about %.0fs left", i, settings.steps, loss,
                     elapsed, elapsed / i * (settings.steps - i))
    result.seconds = time.perf_counter() - start
    return result


def _response_logprobs_after_prompt(policy: AdapterHost, slot: str, row: SftRow, device: torch.device) -> torch.Tensor:
    """log pi(y_t | prompt, y_<t) of each response token (R,). The prompt's pass runs without gradient except for
    its last GRAD_TAIL tokens (the chat template's turn header), whose positions predict the answer's first token:
    without them nothing could teach the adapter how an answer begins."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cut = max(0, len(row.prompt) - GRAD_TAIL)
    head = torch.tensor([row.prompt[:cut]], device=device)  # (1, P - tail)
    rest = torch.tensor([row.prompt[cut:] + row.response[:-1]], device=device)  # (1, tail + R - 1)
    if cut:
        with torch.no_grad():
            policy.hidden_states([slot], head, None, cache=cache)
    hidden = policy.hidden_states([slot], rest, None, cache=cache)[0, len(row.prompt) - cut - 1:]  # (R, H)
    targets = torch.tensor(row.response, device=device)
    return token_logprobs(policy.output_layer(), hidden, targets)[0]  # never (R x vocab) logits at once


# ---------------------------------------------------------------- the cache

class WarmStartCache:
    """Fitted warm-start adapters under `<model cache>/warmstart`, one artifact-store adapter per digest."""

    def __init__(self, root: Path):
        self.store = ArtifactStore(root)

    @staticmethod
    def entry_id(digest: str) -> str:
        return f"ws-{digest[:32]}"

    def get(self, digest: str) -> AdapterVersion | None:
        """The cached fit of `digest`, or None; a damaged entry is removed (so the caller fits and puts again)."""
        entry = self.entry_id(digest)
        if not self.store.versions(entry):
            if self.store.adapter_dir(entry).exists():  # a write that never finished: nothing usable in it
                self.store.remove_adapter(entry)
            return None
        try:
            version = self.store.read(self.store.ref(entry, 1))
            if version.meta.get("digest") != digest:
                raise StoreError(f"entry {entry} records digest {version.meta.get('digest')!r}, not {digest!r}")
            if version.meta.get("weights_sha256") != weights_digest(version.weights):
                raise StoreError(f"entry {entry}: its weights do not match the hash recorded when it was written")
        except StoreError as e:
            log.warning("warm-start cache entry %s is damaged (%s): removing it and fitting again", entry, e)
            self.store.remove_adapter(entry)
            return None
        return version

    def put(self, digest: str, weights: dict[str, torch.Tensor], config: dict, meta: dict) -> None:
        entry = self.entry_id(digest)
        full = {**meta, "digest": digest, "weights_sha256": weights_digest(weights)}
        try:
            self.store.save(entry, weights, config, version=1, meta=full)
        except StoreError as e:  # another trainer wrote the same entry first: theirs is as good
            log.info("warm-start cache entry %s not written: %s", entry, e)
