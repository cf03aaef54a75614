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
    Completion,
    InferenceBackend,
    Request,
    ResidentAdapters,
    Result,
    encode_prompt,
    validate_requests,
)
from services.inference.decoder import Decoder
from services.inference.sampling import Row

BASE = None  # the adapter name of base rows


class HfBackend(InferenceBackend):
    """transformers + batched multi-LoRA; adapters from the artifact store, resident up to a limit (LRU)."""

    name = "hf"

    def __init__(self, base: BaseModel, store: ArtifactStore | None, target_modules: list[str], max_rank: int,
                 max_batch: int = 256, max_resident: int = 32, host: str = "batched",
                 chat_template: bool = True, threads: int = 0, prepack: bool = True, base_matmul: str = "native"):
        self.base = base
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

    @classmethod
    def from_config(cls, cfg, store: ArtifactStore | None = None, base: BaseModel | None = None) -> HfBackend:
        base = base or load_from_config(cfg)
        store = store if store is not None else ArtifactStore(cfg.store_root)
        g = cfg.generation
        return cls(base, store, list(cfg.lora.target_modules), cfg.serving_rank,
                   max_batch=g.max_batch, max_resident=g.max_resident_adapters, host=host_kind(cfg.lora.host, "inference"),
                   chat_template=cfg.model.chat_template, threads=g.threads, prepack=g.prepack_weights,
                   base_matmul=cfg.model.base_matmul)

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
            with torch_threads(self.threads):
                for row in self.decoder.run(rows):
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

    @staticmethod
    def _result(req: Request, prompt: list[int], ref: AdapterRef | None, rows: list[Row]) -> Result:
        rows.sort(key=lambda r: r.index)
        completions = [Completion(r.index, r.text, r.token_ids, r.finish_reason,
                                  r.logprobs if r.sampling.logprobs else [], r.truncated / max(len(r.token_ids), 1))
                       for r in rows]
        return Result(req.request_id, list(prompt), completions, ref)
