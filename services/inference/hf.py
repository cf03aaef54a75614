"""The `hf` backend: transformers on CPU (or a small GPU) with every adapter in one batch per decoding step.

The adapters sit on the base through the adapter host the trainer uses too (populora/adapters.py, `lora.host`):
`batched` (rows sorted by adapter, per-adapter rank-r matmuls on slices of the batch) or `peft` (PEFT's
`adapter_names` mixed-batch forward, kept for comparison). The decoding
loop is our own: left padding, positions from the attention mask, a DynamicCache, finished rows dropped from
the batch and cache, per-row seeded sampling (temperature, top-p), eos and stop strings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from populora.adapters import AdapterHost, host_kind, make_host
from populora.lora import cache_kwarg
from populora.models import BaseModel, load_from_config, torch_threads
from populora.store import AdapterRef, ArtifactStore
from services.inference.backend import (
    Completion,
    InferenceBackend,
    Request,
    ResidentAdapters,
    Result,
    Sampling,
    encode_prompt,
    validate_requests,
)

BASE = None  # the adapter name of base rows


# ---- decoding
@dataclass
class Row:
    """One completion being decoded."""

    request: int
    index: int
    adapter: str | None
    prompt_ids: list[int]
    sampling: Sampling
    generator: torch.Generator | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = ""
    text: str = ""


# Candidates looked at first for top-p: the nucleus of a trained model at T <= 1 almost always lies in its top 64
# tokens, and topk of 64 is far cheaper than sorting a 50k-150k vocabulary per row per token. Rows whose nucleus
# is wider fall back to a full sort, so the draw is exact either way.
TOP_P_CANDIDATES = 64


def choose_tokens(logits: torch.Tensor, rows: list[Row]) -> torch.Tensor:
    """Next token per row: argmax for greedy rows; for sampled rows a draw from softmax(logits / T) restricted to the
    top-p nucleus (the smallest set of most likely tokens whose mass reaches top_p), by inverse CDF with one uniform
    from the row's own generator, so a row's sample does not depend on the other rows of the batch. (B, V) -> (B,)

    The softmax and the candidate search run for all sampled rows at once; only the uniform draw is per row."""
    tokens = logits.argmax(dim=-1)
    sampled = [i for i, row in enumerate(rows) if row.sampling.temperature > 0]
    if not sampled:
        return tokens
    temperature = torch.tensor([rows[i].sampling.temperature for i in sampled], device=logits.device)
    probs = torch.softmax(logits[sampled].float() / temperature[:, None], dim=-1)  # (S, V)
    k = min(TOP_P_CANDIDATES, probs.shape[-1])
    top_vals, top_ids = probs.topk(k, dim=-1)  # (S, k), most likely first
    top_mass = top_vals.sum(-1).tolist()
    for j, i in enumerate(sampled):
        row = rows[i]
        u = float(torch.rand((), generator=row.generator))
        top_p = row.sampling.top_p
        if top_p >= 1:  # no nucleus: the whole distribution, in vocabulary order
            cand_vals, cand_ids = probs[j], None
        elif top_mass[j] >= top_p:
            cand_vals, cand_ids = top_vals[j], top_ids[j]
        else:  # the nucleus is wider than the candidates: sort them all
            cand_vals, cand_ids = torch.sort(probs[j], descending=True)
        if cand_ids is not None:  # keep a token while the mass before it is below top_p
            cand_vals = cand_vals.masked_fill(cand_vals.cumsum(0) - cand_vals >= top_p, 0.0)
        cdf = cand_vals.cumsum(0)
        pick = min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), cdf.shape[0] - 1)
        while cand_vals[pick] <= 0:  # u * total landed on the end of the cdf: step back to a token with mass
            pick -= 1
        tokens[i] = pick if cand_ids is None else cand_ids[pick]
    return tokens


# The prompt pass runs in groups of rows of similar length, each at most PREFILL_TOKENS tokens (rows x the group's
# longest prompt): one pass over a whole mixed batch pads every prompt to the longest and works on activations far
# larger than the caches (on a 2-core CPU, 128 HumanEval prompts in one pass cost 3.5 ms a token against 2.4 ms in
# groups), and the left padding of a sorted group is a fraction of the batch's.
PREFILL_TOKENS = 2048
# Finished rows leave the batch when they are at least this share of it: dropping them copies every layer's cache,
# so doing it for each row that finishes costs more than decoding a few dead rows for some steps.
COMPACT_SHARE = 1 / 8
# The cache grows in place by this many tokens at a time (each step writes one), not by one concatenation per step.
CACHE_GROWTH = 32


def prefill_groups(lengths: list[int], budget: int = PREFILL_TOKENS) -> list[list[int]]:
    """Rows (indices into `lengths`) in groups of similar prompt length whose padded size (rows x longest) is within
    `budget` (a prompt longer than the budget runs alone); each group in ascending index order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:  # ascending length: the group's longest is the row being added
        if current and (len(current) + 1) * lengths[i] > budget:
            groups.append(sorted(current))
            current = []
        current.append(i)
    if current:
        groups.append(sorted(current))
    return groups


try:  # transformers with per-layer caches (>= 4.56)
    from transformers.cache_utils import DynamicLayer as _CacheLayer
except ImportError:  # older: no slab, transformers' own cache (see mergeable)
    _CacheLayer = object


class SlabLayer(_CacheLayer):
    """One layer's keys and values in a preallocated slab (rows, heads, capacity, head_dim) that decoding fills in
    place; `keys` / `values` are views of the filled part. Transformers' DynamicLayer, which it replaces, concatenates
    the whole cache at every step (for 128 rows of SmolLM2, 1.5 GB copied per token)."""

    is_sliding = False
    is_croppable = False

    def __init__(self, k_slab: torch.Tensor, v_slab: torch.Tensor, filled: int, limit: int):
        super().__init__()
        self.k_slab, self.v_slab, self.filled, self.limit = k_slab, v_slab, filled, limit
        self.is_initialized = True
        self.device = k_slab.device
        self._views()

    def _views(self) -> None:
        self.keys = self.k_slab[:, :, :self.filled]
        self.values = self.v_slab[:, :, :self.filled]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self.filled + n > self.k_slab.shape[2]:
            grow = max(n, min(CACHE_GROWTH, max(self.limit - self.filled, n)))
            self.k_slab = torch.cat([self.k_slab, self.k_slab.new_zeros(*self.k_slab.shape[:2], grow,
                                                                         self.k_slab.shape[3])], dim=2)
            self.v_slab = torch.cat([self.v_slab, self.v_slab.new_zeros(*self.v_slab.shape[:2], grow,
                                                                         self.v_slab.shape[3])], dim=2)
        self.k_slab[:, :, self.filled:self.filled + n] = key_states
        self.v_slab[:, :, self.filled:self.filled + n] = value_states
        self.filled += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.filled + query_length, 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.k_slab = self.k_slab[indices]
        self.v_slab = self.v_slab[indices]
        self._views()


def mergeable(cache) -> bool:
    """Whether a prompt group's cache is made of transformers' plain DynamicLayers (full attention), which a slab
    can replace."""
    if _CacheLayer is object:  # transformers before per-layer caches
        return False
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is _CacheLayer and layer.keys is not None and layer.keys.dim() == 4
                                for layer in layers)


def slab_cache(groups: list[tuple[list[int], object]], rows: int, width: int, extra: int):
    """One DynamicCache of SlabLayers for `rows` rows, left-padded to `width`, from the caches of the prompt groups
    (row indices, the group's DynamicCache); None when a group's cache is not made of plain DynamicLayers (sliding
    windows and other layer kinds keep transformers' own cache)."""
    from transformers import DynamicCache

    if not all(mergeable(c) for _, c in groups):
        return None
    first = groups[0][1].layers
    slabs = []
    for li, layer in enumerate(first):
        k0 = layer.keys
        cap = width + min(extra, CACHE_GROWTH)
        k_slab = k0.new_zeros(rows, k0.shape[1], cap, k0.shape[3])
        v_slab = layer.values.new_zeros(rows, layer.values.shape[1], cap, layer.values.shape[3])
        for idx, c in groups:
            k, v = c.layers[li].keys, c.layers[li].values
            at = torch.tensor(idx, device=k.device)
            k_slab[at, :, width - k.shape[2]:width] = k
            v_slab[at, :, width - v.shape[2]:width] = v
        slabs.append(SlabLayer(k_slab, v_slab, width, width + extra))
    cache = DynamicCache()
    cache.layers = slabs
    return cache


class Decoder:
    """Turns a list of rows into finished completions with one batched forward per step."""

    def __init__(self, host: AdapterHost, tokenizer, eos_ids: list[int], device: torch.device, lock: threading.Lock,
                 prefill_tokens: int = PREFILL_TOKENS):
        self.host = host
        self.tokenizer = tokenizer
        self.eos = set(eos_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        self.device = device
        self.lock = lock  # held per forward, so adapters can be added between steps of a running batch
        self.prefill_tokens = prefill_tokens
        self.steps = 0
        self.cache_arg = cache_kwarg(host.causal_lm)

    def _forward(self, names, **kw):
        with self.lock, torch.inference_mode():
            out = self.host.forward(names, use_cache=True, logits_to_keep=1, **kw)
        self.steps += 1
        return out.logits[:, -1, :]  # (B, V)

    def _padded(self, rows: list[Row], width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids and attention mask, (len(rows), width)."""
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row.prompt_ids):] = torch.tensor(row.prompt_ids)
            mask[i, width - len(row.prompt_ids):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _prompt_pass(self, rows: list[Row], width: int, extra: int):
        """The prompts' forward: (cache, last logits (U, V)) for `rows` left-padded to `width`, in groups of similar
        length (prefill_groups) merged into one slab cache; one pass over all rows when the model's cache layers
        cannot be merged."""
        from transformers import DynamicCache

        groups = prefill_groups([len(r.prompt_ids) for r in rows], self.prefill_tokens)
        done, logits = [], None
        for idx in groups:
            part = [rows[i] for i in idx]
            ids, mask = self._padded(part, max(len(r.prompt_ids) for r in part))
            cache = DynamicCache()
            out = self._forward([r.adapter for r in part], input_ids=ids, attention_mask=mask,
                                position_ids=(mask.cumsum(-1) - 1).clamp(min=0), **{self.cache_arg: cache})
            if logits is None:
                logits = out.new_empty((len(rows), out.shape[-1]))
            logits[torch.tensor(idx, device=out.device)] = out
            done.append((idx, cache))
            if len(groups) > 1 and not mergeable(cache):
                break  # not mergeable: one pass over every row below
        merged = slab_cache(done, len(rows), width, extra) if len(done) == len(groups) else None
        if merged is not None:
            return merged, logits
        if len(groups) == 1:
            return done[0][1], logits
        ids, mask = self._padded(rows, width)
        cache = DynamicCache()
        logits = self._forward([r.adapter for r in rows], input_ids=ids, attention_mask=mask,
                               position_ids=(mask.cumsum(-1) - 1).clamp(min=0), **{self.cache_arg: cache})
        return cache, logits

    def run(self, rows: list[Row]) -> Iterator[Row]:
        """Decode until every row is finished; yields each row as it finishes."""
        # The n completions of a request share its prompt and adapter: its prompt is run once and its cache rows
        # copied n times (a prompt costs far more to run than to copy).
        first_of: dict[int, int] = {}
        unique: list[Row] = []
        expand = []
        for row in rows:
            if row.request not in first_of:
                first_of[row.request] = len(unique)
                unique.append(row)
            expand.append(first_of[row.request])
        width = max(len(r.prompt_ids) for r in unique)
        extra = max(r.sampling.max_new_tokens for r in rows)
        cache, logits = self._prompt_pass(unique, width, extra)
        lengths = torch.tensor([len(r.prompt_ids) for r in unique], device=self.device)
        mask = (torch.arange(width, device=self.device)[None, :] >= (width - lengths)[:, None]).long()
        last_pos = lengths - 1  # real tokens sit at positions 0..len-1 whatever the padding
        if len(unique) < len(rows):  # (U, ...) -> (B, ...): every row gets its request's prompt state
            index = torch.tensor(expand, device=self.device)
            cache.batch_select_indices(index)
            logits, mask, last_pos = logits[index], mask[index], last_pos[index]
        batch = list(rows)  # the rows in the cache, finished ones included until the next compaction
        live = list(range(len(batch)))  # positions in `batch` of the rows still decoding
        while True:
            step_logits = logits if len(live) == len(batch) else logits[torch.tensor(live, device=self.device)]
            active = [batch[i] for i in live]
            tokens = choose_tokens(step_logits, active)
            lps = self._logprobs(step_logits, tokens, active)
            keep = []
            for j, (row, tok) in enumerate(zip(active, tokens.tolist())):
                row.token_ids.append(tok)
                if lps is not None:
                    row.logprobs.append(float(lps[j]))
                if self._finished(row):
                    yield row
                else:
                    keep.append(j)
            if not keep:
                return
            if len(keep) < len(active):
                live = [live[j] for j in keep]
            step_tokens = tokens[keep] if len(keep) < len(tokens) else tokens
            if len(live) < len(batch):
                if (len(batch) - len(live)) >= COMPACT_SHARE * len(batch):  # drop the finished rows
                    index = torch.tensor(live, device=self.device)
                    cache.batch_select_indices(index)
                    mask, last_pos = mask[index], last_pos[index]
                    batch = [batch[i] for i in live]
                    live = list(range(len(batch)))
                else:  # finished rows stay for now: they decode a pad token nobody reads
                    full = torch.full((len(batch),), self.pad_id, dtype=tokens.dtype, device=tokens.device)
                    full[torch.tensor(live, device=self.device)] = step_tokens
                    step_tokens = full
            mask = torch.cat([mask, mask.new_ones((len(batch), 1))], dim=1)
            last_pos = last_pos + 1
            logits = self._forward([r.adapter for r in batch], input_ids=step_tokens[:, None], attention_mask=mask,
                                   position_ids=last_pos[:, None], **{self.cache_arg: cache})

    @staticmethod
    def _logprobs(logits: torch.Tensor, tokens: torch.Tensor, rows: list[Row]) -> torch.Tensor | None:
        if not any(r.sampling.logprobs for r in rows):
            return None
        return torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, None])[:, 0]

    def _finished(self, row: Row) -> bool:
        tok = row.token_ids[-1]
        if tok in self.eos and not row.sampling.ignore_eos:
            row.finish_reason = "stop"
        elif row.sampling.stop and self._hit_stop(row):
            row.finish_reason = "stop"
            return True
        elif len(row.token_ids) >= row.sampling.max_new_tokens:
            row.finish_reason = "length"
        else:
            return False
        row.text = self.tokenizer.decode(row.token_ids, skip_special_tokens=True)
        return True

    def _hit_stop(self, row: Row) -> bool:
        """Stop strings: check the tail first (cheap), then cut the full text after the first stop string."""
        longest = max(len(s) for s in row.sampling.stop)
        tail = self.tokenizer.decode(row.token_ids[-(longest + 2):], skip_special_tokens=True)
        if not any(s in tail for s in row.sampling.stop):
            return False
        text = self.tokenizer.decode(row.token_ids, skip_special_tokens=True)
        cut = min(text.find(s) + len(s) for s in row.sampling.stop if s in text)
        row.text = text[:cut]
        return True


class HfBackend(InferenceBackend):
    """transformers + batched multi-LoRA; adapters from the artifact store, resident up to a limit (LRU)."""

    name = "hf"

    def __init__(self, base: BaseModel, store: ArtifactStore | None, target_modules: list[str], max_rank: int,
                 max_batch: int = 256, max_resident: int = 32, host: str = "batched",
                 chat_template: bool = True, threads: int = 0):
        self.base = base
        self.threads = threads
        self.base_model = base.name
        self.store = store
        self.max_batch, self.max_resident = max_batch, max_resident
        self.chat_template = chat_template
        self.host = make_host(host, base.model, target_modules, max_rank)
        self._model_lock = threading.Lock()
        self.resident = ResidentAdapters(max_resident, store, self._load, self._unload)
        device = next(base.model.parameters()).device
        self.decoder = Decoder(self.host, base.tokenizer, base.eos_token_ids, device, self._model_lock)

    @classmethod
    def from_config(cls, cfg, store: ArtifactStore | None = None, base: BaseModel | None = None) -> HfBackend:
        base = base or load_from_config(cfg)
        store = store if store is not None else ArtifactStore(cfg.store_root)
        g = cfg.generation
        return cls(base, store, list(cfg.lora.target_modules), max(cfg.lora.rank, g.max_lora_rank),
                   max_batch=g.max_batch, max_resident=g.max_resident_adapters, host=host_kind(cfg.lora.host, "inference"),
                   chat_template=cfg.model.chat_template, threads=g.threads)

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
                                  r.logprobs if r.sampling.logprobs else []) for r in rows]
        return Result(req.request_id, list(prompt), completions, ref)
