"""The inference backend interface (one per engine: `hf`, `vllm`), its request/result types, and the resident set.

A backend serves a batch of generation requests, each on one adapter version (or the base), as ONE multi-adapter
batch: every adapter shares the base's forward pass. Adapter versions are keyed by `AdapterRef.key` ("id@vN"),
so a new version never replaces an old one under a running request.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from populora.store import AdapterRef, ArtifactStore, StoreError


class InferenceError(Exception):
    """Base of the errors a backend raises for the caller to act on (mapped to gRPC codes by the service)."""


class UnknownAdapter(InferenceError):
    """An adapter (or version) that is neither resident nor in the artifact store."""


class BatchTooLarge(InferenceError):
    """A batch over a configured limit (rows, or distinct adapters); the message names the limit."""


class BadRequest(InferenceError):
    """A malformed request: no prompt, both prompt and messages, negative budgets, ..."""


class Unsupported(InferenceError):
    """A method this backend does not implement (the message names the backend that does)."""


@dataclass(frozen=True)
class Sampling:
    """How one request is decoded. temperature 0 = greedy; completion k of a request uses seed + k."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int = 0
    n: int = 1
    logprobs: bool = False
    ignore_eos: bool = False  # decode to max_new_tokens whatever comes (benchmarks: same work in every run)


@dataclass
class Request:
    """One generation request: an adapter version (None = the base), a prompt or chat messages, sampling."""

    request_id: str
    adapter: AdapterRef | None = None
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    sampling: Sampling = field(default_factory=Sampling)


@dataclass
class Completion:
    """One completion: text (special tokens removed), the generated token ids (eos included when it ended the
    completion), `stop` or `length`, when asked the log-probability of each token under the distribution it was
    sampled from (log_softmax(logits / T); T = 1 for greedy requests; top-p is not part of it, spec 16), and the
    share of its tokens drawn from a top-p nucleus that left out some probability mass."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str
    logprobs: list[float] = field(default_factory=list)
    truncated_fraction: float = 0.0


@dataclass
class Result:
    """All completions of one request, the exact prompt tokens it was conditioned on, and the version served."""

    request_id: str
    prompt_token_ids: list[int]
    completions: list[Completion]
    adapter: AdapterRef | None


@dataclass
class ScoreRow:
    """One continuation to score: an adapter version (None = the base), a prompt (chat messages, raw text or token
    ids: exactly one), an unscored prefix after it, and the continuation text whose tokens are scored."""

    row_id: str
    adapter: AdapterRef | None = None
    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    prefix: str = ""
    continuation: str = ""


@dataclass
class ScoreResult:
    """A row's score: the sum of its continuation tokens' log-probabilities (log_softmax(logits), T = 1), how many
    tokens the continuation has, how many came before it (prompt and prefix), and the version that scored it."""

    row_id: str
    logprob: float
    tokens: int
    prompt_tokens: int
    adapter: AdapterRef | None


@dataclass
class LoadOutcome:
    ref: AdapterRef
    already_resident: bool
    evicted: list[AdapterRef]


def validate_requests(requests: list[Request], max_batch: int) -> None:
    """Refuse malformed requests and batches over `max_batch` rows (rows = sum of n) before any work starts."""
    if not requests:
        raise BadRequest("empty batch: send at least one request")
    seen: set[str] = set()
    for i, req in enumerate(requests):
        where = f"request {i} ({req.request_id!r})"
        if req.request_id in seen:
            raise BadRequest(f"{where}: request_id is repeated in the batch; ids must be unique within a batch")
        seen.add(req.request_id)
        if bool(req.prompt) == bool(req.messages):
            raise BadRequest(f"{where}: give exactly one of `prompt` and `messages`")
        for m in req.messages or []:
            if m.get("role") not in ("system", "user", "assistant"):
                raise BadRequest(f"{where}: message role {m.get('role')!r} is not system, user or assistant")
        s = req.sampling
        if s.temperature < 0 or not (0 < s.top_p <= 1) or s.max_new_tokens < 1 or s.n < 1:
            raise BadRequest(f"{where}: sampling needs temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1, n >= 1 "
                             f"(got temperature={s.temperature}, top_p={s.top_p}, "
                             f"max_new_tokens={s.max_new_tokens}, n={s.n})")
        if any(not stop for stop in s.stop):
            raise BadRequest(f"{where}: empty stop string")
    rows = sum(r.sampling.n for r in requests)
    if rows > max_batch:
        raise BatchTooLarge(f"batch of {rows} rows (requests x n) is over generation.max_batch={max_batch}; "
                            "split it or raise the limit")


def validate_score_rows(rows: list[ScoreRow], max_batch: int) -> None:
    """Refuse malformed score rows and batches over `max_batch` rows before any work starts."""
    if not rows:
        raise BadRequest("empty score request: send at least one row")
    seen: set[str] = set()
    for i, row in enumerate(rows):
        where = f"score row {i} ({row.row_id!r})"
        if row.row_id in seen:
            raise BadRequest(f"{where}: row_id is repeated in the request; ids must be unique within a request")
        seen.add(row.row_id)
        if sum(bool(x) for x in (row.messages, row.prompt, row.prompt_token_ids)) != 1:
            raise BadRequest(f"{where}: give exactly one of `messages`, `prompt` and `prompt_token_ids`")
        for m in row.messages or []:
            if m.get("role") not in ("system", "user", "assistant"):
                raise BadRequest(f"{where}: message role {m.get('role')!r} is not system, user or assistant")
        if not row.continuation:
            raise BadRequest(f"{where}: the continuation is empty; there is nothing to score")
    if len(rows) > max_batch:
        raise BatchTooLarge(f"score request of {len(rows)} rows is over generation.max_batch={max_batch}; split it or "
                            "raise the limit")


def encode_prompt(tokenizer, request: Request, chat_template: bool = True) -> list[int]:
    """Token ids of a request's prompt: messages through the chat template (with the generation prompt), or the
    raw prompt text as is."""
    if request.messages:
        from populora.tasks.prompts import chat_token_ids

        return chat_token_ids(tokenizer, request.messages, chat_template)
    return tokenizer.encode(request.prompt, add_special_tokens=False)


class ResidentAdapters:
    """Which adapter versions are resident, least recently used first, with pins for running requests.

    Loading past `limit` evicts the least recently used unpinned version; pinned versions are never evicted, so a
    request is served entirely by the version it resolved at its start. Thread-safe.
    """

    def __init__(self, limit: int, store: ArtifactStore | None,
                 load: Callable[[AdapterRef], None], unload: Callable[[AdapterRef], None]):
        self.limit = limit
        self.store = store
        self._load, self._unload = load, unload
        self._lru: OrderedDict[str, AdapterRef] = OrderedDict()
        self._pins: dict[str, int] = {}
        self._lock = threading.RLock()

    def resolve(self, ref: AdapterRef) -> AdapterRef:
        """Version 0 = the latest version in the store; otherwise the version asked for, if it exists."""
        if not ref.adapter_id:
            raise BadRequest("adapter ref has an empty adapter_id; leave the adapter unset to use the base")
        if ref.version < 0:
            raise BadRequest(f"adapter {ref.adapter_id}: version {ref.version} is negative")
        with self._lock:
            if ref.version > 0 and ref.key in self._lru:
                return self._lru[ref.key]
            if self.store is None:
                raise UnknownAdapter(f"adapter {ref.key} is not resident and there is no artifact store")
            try:
                return self.store.resolve(ref)
            except StoreError as e:
                raise UnknownAdapter(str(e)) from None

    def ensure(self, ref: AdapterRef) -> LoadOutcome:
        """Make a (resolved) version resident; returns what was evicted to make room."""
        with self._lock:
            if ref.key in self._lru:
                self._lru.move_to_end(ref.key)
                return LoadOutcome(self._lru[ref.key], True, [])
            try:
                self._load(ref)
            except StoreError as e:
                raise UnknownAdapter(str(e)) from None
            self._lru[ref.key] = ref
            return LoadOutcome(ref, False, self._evict_over_limit())

    def _evict_over_limit(self) -> list[AdapterRef]:
        evicted = []
        for key in list(self._lru):
            if len(self._lru) <= self.limit:
                break
            if self._pins.get(key):
                continue
            evicted.append(self._lru.pop(key))
            self._unload(evicted[-1])
        return evicted

    def remove(self, ref: AdapterRef) -> int:
        """Unload one version (or every version of the id when version is 0); pinned versions go when unpinned."""
        with self._lock:
            keys = [k for k, r in self._lru.items() if r.adapter_id == ref.adapter_id and
                    (ref.version == 0 or r.version == ref.version)]
            for key in keys:
                if self._pins.get(key):
                    raise BadRequest(f"adapter {key} is serving a running batch; unload it after the batch ends")
                self._unload(self._lru.pop(key))
            return len(keys)

    def resolve_batch(self, refs: list[AdapterRef | None]) -> list[AdapterRef | None]:
        """Each request's version (None stays the base); refuses a batch with more versions than can be resident."""
        resolved = [None if r is None else self.resolve(r) for r in refs]
        distinct = {r.key for r in resolved if r is not None}
        if len(distinct) > self.limit:
            raise BatchTooLarge(f"batch needs {len(distinct)} adapter versions at once, over "
                                f"generation.max_resident_adapters={self.limit}; split the batch")
        return resolved

    def acquire(self, refs: Iterable[AdapterRef]) -> list[AdapterRef]:
        """Resolve, load and pin the distinct versions a batch needs (all at once, under the lock)."""
        with self._lock:
            resolved = {}
            for ref in refs:
                r = self.resolve(ref)
                resolved[r.key] = r
            if len(resolved) > self.limit:
                raise BatchTooLarge(f"batch needs {len(resolved)} adapter versions at once, over "
                                    f"generation.max_resident_adapters={self.limit}; split the batch")
            for key in resolved:
                self._pins[key] = self._pins.get(key, 0) + 1
            try:
                for ref in resolved.values():
                    self.ensure(ref)
            except BaseException:
                self.release(resolved.values())
                raise
            return list(resolved.values())

    def release(self, refs: Iterable[AdapterRef]) -> None:
        with self._lock:
            for ref in refs:
                left = self._pins.get(ref.key, 0) - 1
                if left > 0:
                    self._pins[ref.key] = left
                else:
                    self._pins.pop(ref.key, None)
            self._evict_over_limit()

    def refs(self) -> list[AdapterRef]:
        with self._lock:
            return list(self._lru.values())


class InferenceBackend(ABC):
    """One inference engine on one base model. `generate` yields one Result per request as each finishes."""

    name: str = ""
    base_model: str = ""
    max_batch: int = 0
    max_resident: int = 0

    @abstractmethod
    def generate(self, requests: list[Request]) -> Iterator[Result]:
        """Serve the batch as one multi-adapter batch. Raises BadRequest / BatchTooLarge / UnknownAdapter before
        it yields anything."""

    def score(self, rows: list[ScoreRow]) -> list[ScoreResult]:
        """Score every row's continuation after its prompt and prefix, all rows in one multi-adapter prompt pass; one
        result per row, in order. Raises BadRequest / BatchTooLarge / UnknownAdapter before any work starts. A
        backend that cannot score says so (Unsupported)."""
        raise Unsupported(f"the {self.name or type(self).__name__} backend does not score continuations (Score); "
                          "serve with generation.backend=hf")

    # Every backend keeps its adapters in a ResidentAdapters set (LRU, pinning); these delegate to it.
    resident: ResidentAdapters

    def load_adapter(self, ref: AdapterRef) -> LoadOutcome:
        return self.resident.ensure(self.resident.resolve(ref))

    def unload_adapter(self, ref: AdapterRef) -> int:
        return self.resident.remove(ref)

    def adapters(self) -> list[AdapterRef]:
        return self.resident.refs()

    def close(self) -> None:
        """Release the engine's resources (nothing to release by default)."""
        return None
