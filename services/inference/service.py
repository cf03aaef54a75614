"""InferenceService: the wiring of an inference backend behind the RPCs of proto/inference.proto (no network)."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator

from populora.metrics import BATCH_SIZE, TOKENS, TOKENS_PER_S
from populora.pb import inference_pb2
from populora.rpc import CONTRACTS, ServiceError, exhausted, invalid, not_found, ref_from_pb, ref_to_pb
from populora.service_errors import unimplemented
from populora.store import AdapterRef, ArtifactStore, StoreError, validate_adapter_id
from services.inference.backend import (
    BadRequest,
    BatchTooLarge,
    InferenceBackend,
    InferenceError,
    Request,
    Result,
    Sampling,
    ScoreResult,
    ScoreRow,
    UnknownAdapter,
    Unsupported,
)

# Domain errors -> the gRPC code a caller can act on.
ERROR_CODES = {UnknownAdapter: not_found, BatchTooLarge: exhausted, BadRequest: invalid, Unsupported: unimplemented}


def as_service_error(e: InferenceError) -> ServiceError:
    for kind, make in ERROR_CODES.items():
        if isinstance(e, kind):
            return make(str(e))
    return invalid(str(e))


def request_from_pb(msg: inference_pb2.GenerationRequest, default_max_new_tokens: int) -> Request:
    """A proto request as a domain Request; proto zeros read as defaults (n 0 -> 1, top_p 0 -> 1, max 0 -> cfg)."""
    s = msg.sampling
    sampling = Sampling(temperature=float(s.temperature), top_p=float(s.top_p) or 1.0,
                        max_new_tokens=int(s.max_new_tokens) or default_max_new_tokens, stop=tuple(s.stop),
                        seed=int(s.seed), n=int(s.n) or 1, logprobs=bool(s.logprobs))
    adapter = ref_from_pb(msg.adapter) if msg.HasField("adapter") and msg.adapter.adapter_id else None
    messages = [{"role": m.role, "content": m.content} for m in msg.messages] or None
    return Request(msg.request_id, adapter, msg.prompt or None, messages, sampling)


def score_row_from_pb(msg: inference_pb2.ScoreRow) -> ScoreRow:
    """A proto score row as a domain ScoreRow (an unset or empty adapter is the base)."""
    adapter = ref_from_pb(msg.adapter) if msg.HasField("adapter") and msg.adapter.adapter_id else None
    return ScoreRow(msg.row_id, adapter, [{"role": m.role, "content": m.content} for m in msg.messages] or None,
                    msg.prompt or None, list(msg.prompt_token_ids) or None, msg.prefix, msg.continuation)


def score_to_pb(result: ScoreResult) -> inference_pb2.RowScore:
    out = inference_pb2.RowScore(row_id=result.row_id, logprob=result.logprob, tokens=result.tokens,
                                 prompt_tokens=result.prompt_tokens)
    if result.adapter is not None:
        out.adapter.CopyFrom(ref_to_pb(result.adapter))
    return out


def result_to_pb(result: Result) -> inference_pb2.GenerateResult:
    out = inference_pb2.GenerateResult(request_id=result.request_id, prompt_token_ids=result.prompt_token_ids)
    if result.adapter is not None:
        out.adapter.CopyFrom(ref_to_pb(result.adapter))
    for c in result.completions:
        out.completions.add(index=c.index, text=c.text, token_ids=c.token_ids, finish_reason=c.finish_reason,
                            logprobs=c.logprobs, truncated_fraction=c.truncated_fraction)
    return out


# generation.backend -> (module, class); imported when chosen, so a CPU box never imports vLLM
BACKENDS = {"hf": ("services.inference.hf", "HfBackend"), "vllm": ("services.inference.vllm_backend", "VllmBackend")}


def make_backend(cfg, store: ArtifactStore | None = None, **kw) -> InferenceBackend:
    """The backend `cfg.generation.backend` names, built from the config."""
    name = cfg.generation.backend
    if name not in BACKENDS:
        raise InferenceError(f"unknown generation.backend {name!r}; available: {sorted(BACKENDS)}")
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls).from_config(cfg, store=store, **kw)


class InferenceService:
    """Generate / Score / LoadAdapter / UnloadAdapter / ListAdapters over one backend."""

    CONTRACT = CONTRACTS["inference"]

    def __init__(self, backend: InferenceBackend, default_max_new_tokens: int = 512):
        self.backend = backend
        self.default_max_new_tokens = default_max_new_tokens

    @classmethod
    def from_config(cls, cfg, store: ArtifactStore | None = None, **kw) -> InferenceService:
        return cls(make_backend(cfg, store=store, **kw), cfg.generation.max_new_tokens)

    def Generate(self, request: inference_pb2.GenerateRequest) -> Iterator[inference_pb2.GenerateResult]:
        """Checks the whole batch before the first result; then streams one result per request as it finishes."""
        try:
            requests = [request_from_pb(r, self.default_max_new_tokens) for r in request.requests]
            results = self.backend.generate(requests)
        except InferenceError as e:
            raise as_service_error(e) from None
        BATCH_SIZE.labels("inference", "Generate").observe(sum(r.sampling.n for r in requests))
        return self._stream(results)

    @staticmethod
    def _stream(results: Iterator[Result]) -> Iterator[inference_pb2.GenerateResult]:
        start, tokens = time.perf_counter(), 0
        try:
            for result in results:
                tokens += sum(len(c.token_ids) for c in result.completions)
                yield result_to_pb(result)
        except InferenceError as e:
            raise as_service_error(e) from None
        TOKENS.labels("inference", "generated").inc(tokens)
        TOKENS_PER_S.labels("inference", "generated").set(tokens / max(time.perf_counter() - start, 1e-9))

    def Score(self, request: inference_pb2.ScoreRequest) -> inference_pb2.ScoreResponse:
        """Every row's continuation scored in one multi-adapter prompt pass; one score per row, in order."""
        try:
            rows = [score_row_from_pb(r) for r in request.rows]
            results = self.backend.score(rows)
        except InferenceError as e:
            raise as_service_error(e) from None
        BATCH_SIZE.labels("inference", "Score").observe(len(rows))
        TOKENS.labels("inference", "scored").inc(sum(r.tokens + r.prompt_tokens for r in results))
        return inference_pb2.ScoreResponse(scores=[score_to_pb(r) for r in results])

    def LoadAdapter(self, request: inference_pb2.LoadAdapterRequest) -> inference_pb2.LoadAdapterResponse:
        ref = self._ref(request.adapter, "LoadAdapter")
        try:
            outcome = self.backend.load_adapter(ref)
        except InferenceError as e:
            raise as_service_error(e) from None
        return inference_pb2.LoadAdapterResponse(adapter=ref_to_pb(outcome.ref),
                                                 already_resident=outcome.already_resident,
                                                 evicted=[ref_to_pb(r) for r in outcome.evicted])

    def UnloadAdapter(self, request: inference_pb2.UnloadAdapterRequest) -> inference_pb2.UnloadAdapterResponse:
        ref = self._ref(request.adapter, "UnloadAdapter")
        try:
            return inference_pb2.UnloadAdapterResponse(unloaded=self.backend.unload_adapter(ref))
        except InferenceError as e:
            raise as_service_error(e) from None

    def ListAdapters(self, request: inference_pb2.ListAdaptersRequest) -> inference_pb2.ListAdaptersResponse:
        b = self.backend
        return inference_pb2.ListAdaptersResponse(adapters=[ref_to_pb(r) for r in b.adapters()],
                                                  max_resident=b.max_resident, max_batch=b.max_batch,
                                                  base_model=b.base_model, backend=b.name)

    @staticmethod
    def _ref(msg, rpc: str) -> AdapterRef:
        if not msg.adapter_id:
            raise invalid(f"{rpc}: adapter.adapter_id is empty; name the adapter (version 0 = latest)")
        try:
            validate_adapter_id(msg.adapter_id)
        except StoreError as e:
            raise invalid(f"{rpc}: {e}") from None
        return ref_from_pb(msg)
