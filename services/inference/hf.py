"""The `hf` backend: transformers on CPU (or a small GPU) with every adapter in one batch per decoding step.

The adapters sit on the base through the adapter host the trainer uses too (populora/adapters.py, `lora.host`):
`batched` (rows sorted by adapter, per-adapter rank-r matmuls on slices of the batch) or `peft` (PEFT's
`adapter_names` mixed-batch forward, kept for comparison). The decoding loop is our own
(`services.inference.decoder`): left padding, positions from the attention mask, a slab KV cache, finished rows
dropped from the batch and cache, per-row seeded sampling (temperature, top-p), eos and stop strings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch

from populora.adapters import host_kind, make_host
from populora.models import BaseModel, load_from_config, torch_threads
from populora.store import AdapterRef, ArtifactStore
from services.inference.backend import (
    BadRequest,
    Completion,
    InferenceBackend,
    Request,
    ResidentAdapters,
    Result,
    ScoreResult,
    ScoreRow,
    encode_prompt,
    validate_requests,
    validate_score_rows,
)
from services.inference.decoder import Decoder
from services.inference.sampling import Row

BASE = None  # the adapter name of base rows
# A Score request runs in passes of rows of similar length: at most SCORE_TOKENS tokens a pass (rows x the longest),
# and at most SCORE_LOGITS positions whose vocabulary logits are kept (rows x the longest continuation + 1), which
# bounds the logits' memory (SmolLM2: 49,152 floats a position, 200 MB at 1,024).
SCORE_TOKENS = 2048
SCORE_LOGITS = 1024


def score_groups(lengths: list[int], kept: list[int], tokens: int = SCORE_TOKENS,
                 logits: int = SCORE_LOGITS) -> list[list[int]]:
    """Rows (indices) in groups of similar length whose padded size (rows x longest) is within `tokens` and whose
    kept logits (rows x the most any row keeps) are within `logits`; a row over either runs alone."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    widest = 0  # the most logits a row of the current group keeps
    for i in order:  # ascending length: the group's longest is the row being added
        n = len(current) + 1
        if current and (n * lengths[i] > tokens or n * max(widest, kept[i]) > logits):
            groups.append(current)
            current, widest = [], 0
        current.append(i)
        widest = max(widest, kept[i])
    if current:
        groups.append(current)
    return groups


class HfBackend(InferenceBackend):
    """transformers + batched multi-LoRA; adapters from the artifact store, resident up to a limit (LRU)."""

    name = "hf"

    def __init__(self, base: BaseModel, store: ArtifactStore | None, target_modules: list[str], max_rank: int,
                 max_batch: int = 256, max_resident: int = 32, host: str = "batched",
                 chat_template: bool = True, threads: int = 0, prepack: bool = True, base_matmul: str = "native",
                 batch_invariant: bool = False):
        self.base = base
        self.batch_invariant = batch_invariant  # generation.batch_invariant: each request's rows a batch of their own
        self.threads = threads
        self.base_model = base.name
        self.store = store
        self.max_batch, self.max_resident = max_batch, max_resident
        self.chat_template = chat_template
        self.host = make_host(host, base.model, target_modules, max_rank)
        # before any adapter or request: the base's weights laid out for the CPU's matmul, in the products' dtype
        low = torch.bfloat16 if base_matmul == "bfloat16" else None
        self.packing = self.host.prepack(low or torch.float32) if prepack else None
        if low is not None and (self.packing is None or not self.packing.packed):
            self.packing = self.host.lower_products(low)  # not packed: products in bfloat16 all the same
        self._model_lock = threading.Lock()
        self.resident = ResidentAdapters(max_resident, store, self._load, self._unload)
        device = next(base.model.parameters()).device
        self.decoder = Decoder(self.host, base.tokenizer, base.eos_token_ids, device, self._model_lock)
        self.device = device
        self.context = int(getattr(base.model.config, "max_position_embeddings", 0) or 0)

    @classmethod
    def from_config(cls, cfg, store: ArtifactStore | None = None, base: BaseModel | None = None) -> HfBackend:
        base = base or load_from_config(cfg)
        store = store if store is not None else ArtifactStore(cfg.store_root)
        g = cfg.generation
        return cls(base, store, list(cfg.lora.target_modules), cfg.serving_rank,
                   max_batch=g.max_batch, max_resident=g.max_resident_adapters, host=host_kind(cfg.lora.host, "inference"),
                   chat_template=cfg.model.chat_template, threads=g.threads, prepack=g.prepack_weights,
                   base_matmul=cfg.model.base_matmul, batch_invariant=g.batch_invariant)

    # ---- adapters
    def _load(self, ref: AdapterRef) -> None:
        version = self.store.read(ref)  # disk I/O outside the model lock
        with self._model_lock:
            self.host.add(ref.key, version.weights, version.config)

    def _unload(self, ref: AdapterRef) -> None:
        with self._model_lock:
            self.host.remove(ref.key)

    # ---- generation
    def generate(self, requests: list[Request]) -> Iterator[Result]:
        """Checks everything it can before it returns (bad requests, limits, unknown adapters); the returned
        iterator pins the versions it resolved now for the whole batch and yields results as they finish."""
        validate_requests(requests, self.max_batch)
        prompts = [encode_prompt(self.base.tokenizer, r, self.chat_template) for r in requests]
        served = self.resident.resolve_batch([r.adapter for r in requests])
        return self._serve(requests, prompts, served)

    def _serve(self, requests: list[Request], prompts: list[list[int]],
               served: list[AdapterRef | None]) -> Iterator[Result]:
        pinned = self.resident.acquire(r for r in served if r is not None)
        try:
            rows = self._rows(requests, prompts, served)
            pending = {i: requests[i].sampling.n for i in range(len(requests))}
            done: dict[int, list[Row]] = {i: [] for i in pending}
            parts = [[r for r in rows if r.request == i] for i in pending] if self.batch_invariant else [rows]
            with torch_threads(self.threads):
                for part in parts:
                    for row in self.decoder.run(part):
                        done[row.request].append(row)
                        pending[row.request] -= 1
                        if pending[row.request] == 0:
                            yield self._result(requests[row.request], prompts[row.request], served[row.request],
                                               done.pop(row.request))
        finally:
            self.resident.release(pinned)

    def _rows(self, requests: list[Request], prompts: list[list[int]],
              served: list[AdapterRef | None]) -> list[Row]:
        rows = []
        for i, (req, ids, ref) in enumerate(zip(requests, prompts, served)):
            for k in range(req.sampling.n):
                gen = None
                if req.sampling.temperature > 0:
                    gen = torch.Generator().manual_seed(int(req.sampling.seed) + k)
                rows.append(Row(i, k, ref.key if ref is not None else BASE, ids, req.sampling, gen))
        if self.host.sort_rows:
            rows.sort(key=lambda r: self.host.row_key(r.adapter))  # stable: base rows first
        return rows

    # ---- scoring
    def score(self, rows: list[ScoreRow]) -> list[ScoreResult]:
        """Each row's continuation scored after its prompt and prefix (module docstring of populora.evals.likelihood
        for what it is used for): the prompt encoded as `generate` encodes it, the prefix and the continuation each
        tokenized on their own (no special tokens) and appended, so a continuation's tokens are the same whatever
        precedes it. One forward pass over prompt + prefix + continuation per row, rows of every adapter in the same
        passes (score_groups); log_softmax only at the positions that predict the continuation's tokens."""
        validate_score_rows(rows, self.max_batch)
        contexts, continuations = [], []
        for i, row in enumerate(rows):
            where = f"score row {i} ({row.row_id!r})"
            context = self._score_prompt(row, where)
            if row.prefix:
                context += self.base.tokenizer.encode(row.prefix, add_special_tokens=False)
            continuation = self.base.tokenizer.encode(row.continuation, add_special_tokens=False)
            if not continuation:
                raise BadRequest(f"{where}: the continuation {row.continuation[:40]!r} has no tokens")
            if not context:
                raise BadRequest(f"{where}: no prompt and no prefix: the continuation's first token has nothing to "
                                 "be predicted from")
            total = len(context) + len(continuation)
            if self.context and total > self.context:
                raise BadRequest(f"{where}: prompt, prefix and continuation are {total} tokens, over the model's "
                                 f"context of {self.context}; shorten the row (it is never truncated)")
            contexts.append(context)
            continuations.append(continuation)
        served = self.resident.resolve_batch([r.adapter for r in rows])
        pinned = self.resident.acquire(r for r in served if r is not None)
        try:
            names = [ref.key if ref is not None else BASE for ref in served]
            with torch_threads(self.threads):
                if self.batch_invariant:  # each row a pass of its own (generation.batch_invariant)
                    sums = [self._score_passes([c], [k], [n])[0] for c, k, n in zip(contexts, continuations, names)]
                else:
                    sums = self._score_passes(contexts, continuations, names)
        finally:
            self.resident.release(pinned)
        return [ScoreResult(row.row_id, total, len(cont), len(ctx), ref)
                for row, total, cont, ctx, ref in zip(rows, sums, continuations, contexts, served, strict=True)]

    def _score_prompt(self, row: ScoreRow, where: str) -> list[int]:
        if row.prompt_token_ids:
            vocab = self.host.vocab_size
            bad = next((t for t in row.prompt_token_ids if not 0 <= t < vocab), None)
            if bad is not None:
                raise BadRequest(f"{where}: prompt token id {bad} is outside the vocabulary (0..{vocab - 1})")
            return list(row.prompt_token_ids)
        req = Request(row.row_id, row.adapter, row.prompt, row.messages)
        return encode_prompt(self.base.tokenizer, req, self.chat_template)

    def _score_passes(self, contexts: list[list[int]], continuations: list[list[int]],
                      names: list[str | None]) -> list[float]:
        """The sum of each row's continuation log-probabilities, over passes of left-padded rows: every row ends at
        the last position, so the logits of the last (longest continuation + 1) positions hold every row's."""
        lengths = [len(c) + len(x) for c, x in zip(contexts, continuations, strict=True)]
        sums = [0.0] * len(lengths)
        pad = self.decoder.pad_id
        for group in score_groups(lengths, [len(x) + 1 for x in continuations]):
            if self.host.sort_rows:
                group = sorted(group, key=lambda i: self.host.row_key(names[i]))
            width = max(lengths[i] for i in group)
            keep = max(len(continuations[i]) for i in group) + 1
            ids = torch.full((len(group), width), pad, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for b, i in enumerate(group):
                row = contexts[i] + continuations[i]
                ids[b, width - len(row):] = torch.tensor(row)
                mask[b, width - len(row):] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            with self._model_lock, torch.inference_mode():
                out = self.host.forward([names[i] for i in group], input_ids=ids, attention_mask=mask,
                                        position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=False,
                                        logits_to_keep=keep)
                logits = out.logits  # (rows, keep, V): positions width - keep .. width - 1
                for b, i in enumerate(group):
                    c = len(continuations[i])
                    # position width-1-c predicts the continuation's first token, width-2 its last
                    at = torch.log_softmax(logits[b, keep - 1 - c:keep - 1].float(), dim=-1)
                    target = torch.tensor(continuations[i], device=at.device)
                    sums[i] = float(at.gather(1, target[:, None]).double().sum())
        return sums

    @staticmethod
    def _result(req: Request, prompt: list[int], ref: AdapterRef | None, rows: list[Row]) -> Result:
        rows.sort(key=lambda r: r.index)
        completions = [Completion(r.index, r.text, r.token_ids, r.finish_reason,
                                  r.logprobs if r.sampling.logprobs else [], r.truncated / max(len(r.token_ids), 1))
                       for r in rows]
        return Result(req.request_id, list(prompt), completions, ref)
