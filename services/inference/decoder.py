"""The `hf` decoding loop: prompts in length-sorted groups, then one batched forward per step until rows finish.

Left padding, positions from the attention mask, the slab KV cache (`services.inference.kv_cache`), finished rows
dropped from the batch and cache, per-row seeded sampling (`services.inference.sampling`), eos and stop strings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch

import services.inference.kv_cache as kv_cache
from populora.adapters import AdapterHost
from populora.lora import cache_kwarg
from services.inference.sampling import Row, choose_tokens

# The prompt pass runs in groups of rows of similar length, each at most PREFILL_TOKENS tokens (rows x the group's
# longest prompt): one pass over a whole mixed batch pads every prompt to the longest and works on activations far
# larger than the caches (on a 2-core CPU, 128 HumanEval prompts in one pass cost 3.5 ms a token against 2.4 ms in
# groups), and the left padding of a sorted group is a fraction of the batch's.
PREFILL_TOKENS = 2048
# Finished rows leave the batch when they are at least this share of it: dropping them copies every layer's cache,
# so doing it for each row that finishes costs more than decoding a few dead rows for some steps.
COMPACT_SHARE = 1 / 8


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
            if len(groups) > 1 and not kv_cache.mergeable(cache):
                break  # not mergeable: one pass over every row below
        merged = kv_cache.slab_cache(done, len(rows), width, extra) if len(done) == len(groups) else None
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
        """log mu(token) per row (B,): the behaviour policy of spec 16, log_softmax(logits / T) at the row's sampling
        temperature, the same division `choose_tokens` samples from, so the trainer can compute the same pi. The
        top-p nucleus is not part of it. A greedy row (T = 0) has no distribution of its own: it gets T = 1."""
        if not any(r.sampling.logprobs for r in rows):
            return None
        temperature = torch.tensor([r.sampling.temperature if r.sampling.temperature > 0 else 1.0 for r in rows],
                                   device=logits.device)
        return torch.log_softmax(logits.float() / temperature[:, None], dim=-1).gather(1, tokens[:, None])[:, 0]

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
