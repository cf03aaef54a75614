"""The trainer service: the RPCs of proto/trainer.proto over the adapter pool and the TRR++ update (spec §5)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from populora.adapters import AdapterHost, host_kind, make_host
from populora.config import ALL_TARGET_MODULES, MAX_RANK, ROLES, TASK_TYPES, Config
from populora.metrics import BATCH_SIZE, TOKENS, TOKENS_PER_S
from populora.models import build_lock, cache_dir, torch_threads
from populora.pb import trainer_pb2
from populora.records import UpdateStats
from populora.rpc import CONTRACTS, ServiceError, invalid, precondition, ref_from_pb, ref_to_pb
from populora.store import ArtifactStore, StoreError, validate_adapter_id
from populora.tasks.prompts import chat_token_ids
from services.trainer.memory import MB, base_bytes
from services.trainer.pool import AdapterPool, OptimizerSettings, PoolError, UpdateItem
from services.trainer.trr import Rollout, TrrSettings
from services.trainer.warmstart import FitSettings, SftRow, WarmStartCache, base_identity

log = logging.getLogger(__name__)

ROLLOUT_ROLES = {"teacher": ("teacher",), "student": ("student",), "both": ("teacher", "student")}
# Room the batched layer keeps for the largest rank (only the `gather` layout pads to it; we use `segments`).
M_MMAP_THRESHOLD = -3  # glibc malloc.h


def resolve_batch_mode(mode: str, device: torch.device) -> str:
    """`auto` -> `batched` on a GPU (a population of small batches fills it like one big one), else `sequential`
    (on a CPU one big pass is not faster than several small ones)."""
    if mode == "auto":
        return "batched" if device.type == "cuda" else "sequential"
    return mode


def trainer_host(mode: str, causal_lm: torch.nn.Module, cfg: Config) -> AdapterHost:
    """The adapter host of `lora.host` (populora/adapters.py) for updates run `mode` (batched or sequential)."""
    kind = host_kind(cfg.lora.host, "trainer", mode)
    if kind == "peft" and mode == "batched":
        raise ValueError("trainer.batch_mode=batched needs lora.host=batched (PEFT trains one adapter per pass)")
    if kind == "batched" and cfg.lora.dropout > 0:
        raise ValueError("lora.host=batched does not apply LoRA dropout; set lora.dropout=0 or lora.host=peft "
                         "(with trainer.batch_mode=sequential)")
    # room for any projection, so adapters with other target sets (an imported PEFT adapter) can be adopted
    targets = sorted(set(cfg.lora.target_modules) | set(ALL_TARGET_MODULES))
    return make_host(kind, causal_lm, targets, MAX_RANK)


def set_mmap_threshold(kb: int) -> bool:
    """glibc's mallopt(M_MMAP_THRESHOLD): allocations of >= kb KB are mmapped and go back to the system when freed
    (`trainer.mmap_threshold_kb`); a fixed threshold also stops glibc raising it. False where there is no glibc."""
    if kb <= 0:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, kb * 1024))


def trr_settings(cfg: Config) -> TrrSettings:
    """The update's settings from `cfg.trainer`: the one place they are read, for the trainer and the benchmarks."""
    t = cfg.trainer
    return TrrSettings(grad_clip=t.grad_clip, entropy_coef=t.entropy_coef, ppo_clip=t.ppo_clip, epochs=t.epochs,
                       micro_batch_tokens=t.micro_batch_tokens, adv_eps=t.adv_eps,
                       logprob_chunk_tokens=t.logprob_chunk_tokens, activation_checkpointing=t.activation_checkpointing,
                       memory_limit_mb=t.memory_limit_mb)


@contextmanager
def _as_service_errors():
    """Domain errors -> the service's error codes (the input: INVALID_ARGUMENT; the trainer's state: FAILED_...)."""
    try:
        yield
    except PoolError as e:
        raise (invalid(str(e)) if e.kind == "invalid" else precondition(str(e))) from None
    except StoreError as e:
        raise precondition(str(e)) from None


class TrainerService:
    """TRR++ updates of many adapters on one frozen base, one AdamW state per adapter (spec §5)."""

    CONTRACT = CONTRACTS["trainer"]
    GRPC_WORKERS = 4  # one update at a time holds the model anyway (the service serialises them)

    def __init__(self, cfg: Config, pool: AdapterPool, mode: str, base=None):
        self.cfg = cfg
        self.pool = pool
        self.mode = mode
        self.base = base  # populora.models.BaseModel: its tokenizer encodes the warm start's examples
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Config, base=None, store: ArtifactStore | None = None) -> TrainerService:
        """Load the base once (or take `base`, which the trainer then owns: its layers get LoRA injected)."""
        from populora.models import load_from_config

        set_mmap_threshold(cfg.trainer.mmap_threshold_kb)
        base = base or load_from_config(cfg)
        if cfg.trainer.attention != "auto":  # the trainer owns this copy of the base (see docs/trainer.md, Memory)
            base.model.set_attn_implementation(cfg.trainer.attention)
        device = next(base.model.parameters()).device
        mode = resolve_batch_mode(cfg.trainer.batch_mode, device)
        host = trainer_host(mode, base.model, cfg)
        if cfg.model.base_matmul == "bfloat16":
            if host.kind != "batched":
                raise ValueError("model.base_matmul=bfloat16 needs the batched adapter host (lora.host=batched, or "
                                 "trainer.batch_mode=batched)")
            host.lower_products(torch.bfloat16)
        t = cfg.trainer
        pool = AdapterPool(host, store or ArtifactStore(cfg.store_root),
                           OptimizerSettings(lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay),
                           trr_settings(cfg), base_name=cfg.model.name)
        log.info("trainer ready: base %s on %s (%.0f MiB of weights), %s updates on the %s adapter host, update memory "
                 "limit %s", cfg.model.name, device, base_bytes(base.model) / MB, mode, host.kind,
                 f"{t.memory_limit_mb} MiB" if t.memory_limit_mb else "none")
        return cls(cfg, pool, mode, base=base)

    # ---- RPCs
    def InitAdapter(self, req: trainer_pb2.InitAdapterRequest) -> trainer_pb2.InitAdapterResponse:
        self._check_id(req.adapter_id)
        role = self._check_role(req.role)
        rank, alpha = self._shape(req.rank, req.lora_alpha)
        targets = list(req.target_modules) or list(self.cfg.lora.target_modules)
        start_ref = ref_from_pb(req.init_from) if req.HasField("init_from") and req.init_from.adapter_id else None
        if start_ref is not None and start_ref.version < 1:
            raise invalid(f"init_from needs an explicit version >= 1 of '{start_ref.adapter_id}'")
        with self._lock, _as_service_errors():
            start = self.pool.store.read(start_ref) if start_ref is not None else None
            ref = self.pool.init(req.adapter_id, role, rank, alpha, targets, req.seed, start=start)
        return trainer_pb2.InitAdapterResponse(adapter=ref_to_pb(ref))

    def WarmStart(self, req: trainer_pb2.WarmStartRequest) -> trainer_pb2.WarmStartResponse:
        """Fit one adapter on the answer formats (spec 13); cached by digest under the model cache."""
        start = time.perf_counter()
        self._check_id(req.adapter_id)
        if self.base is None:
            raise precondition("this trainer was built without its base model's tokenizer; it cannot encode "
                               "warm-start examples")
        if not req.examples:
            raise invalid("WarmStart needs at least one example")
        if req.steps < 1 or req.batch_size < 1:
            raise invalid(f"WarmStart needs steps >= 1 and batch_size >= 1 (got steps={req.steps}, "
                          f"batch_size={req.batch_size})")
        if not math.isfinite(req.lr) or req.lr <= 0:
            raise invalid(f"WarmStart lr {req.lr} must be a positive number")
        rank, alpha = self._shape(req.rank, req.lora_alpha)
        rows = [self._sft_row(i, e) for i, e in enumerate(req.examples)]
        t = self.cfg.trainer
        settings = FitSettings(rank=rank, alpha=float(alpha),
                               target_modules=sorted(req.target_modules or self.cfg.lora.target_modules),
                               seed=int(req.seed), steps=int(req.steps), batch_size=int(req.batch_size),
                               lr=float(req.lr), grad_clip=t.grad_clip, micro_batch_tokens=t.micro_batch_tokens,
                               prompt_grad=bool(req.prompt_grad))
        cache = WarmStartCache(self._cache_root()) if req.use_cache else None
        identity = base_identity(self.base.name, Path(self.base.path))
        # Across processes too (the seeds of `populora experiment --jobs`): a second trainer waits for the first
        # one's fit and then finds it in the cache, instead of fitting the same adapter at the same time.
        fit_lock = build_lock(self._cache_root() / "fit") if cache is not None else contextlib.nullcontext()
        # in the weights' dtype whatever model.base_matmul: the cache key does not hold it, and runs share the fit
        with self._lock, fit_lock, _as_service_errors(), torch_threads(self.cfg.trainer.threads), \
                self.pool.host.native_products():
            ref, cached, record = self.pool.warm_start(req.adapter_id, rows, settings, identity, cache)
        seconds = time.perf_counter() - start
        losses = record.get("losses", [])
        log.info("warm start %s: %s, %d steps, loss %.3f -> %.3f, %.1fs", ref.key, "cached" if cached else "fitted",
                 len(losses), losses[0] if losses else float("nan"), losses[-1] if losses else float("nan"), seconds)
        return trainer_pb2.WarmStartResponse(adapter=ref_to_pb(ref), cached=cached, losses=losses,
                                             tokens=int(record.get("tokens", 0)),
                                             fit_seconds=float(record.get("fit_seconds", 0.0)), seconds=seconds,
                                             digest=record.get("digest", ""))

    def _cache_root(self) -> Path:
        configured = self.cfg.warmstart.cache_dir
        return Path(configured) if configured else cache_dir(self.cfg.model.cache_dir) / "warmstart"

    def _sft_row(self, i: int, e: trainer_pb2.SftExample) -> SftRow:
        where = f"warm-start example {i}"
        if e.task_type not in TASK_TYPES:
            raise invalid(f"{where}: task_type {e.task_type!r} is not one of {list(TASK_TYPES)}")
        if e.role not in ("teacher", "student"):
            raise invalid(f"{where}: role {e.role!r} is not 'teacher' or 'student'")
        if not e.prompt or not e.response.strip():
            raise invalid(f"{where}: it needs prompt turns and a non-empty response")
        bad = [t.role for t in e.prompt if t.role not in ("system", "user", "assistant")]
        if bad:
            raise invalid(f"{where}: turn role {bad[0]!r} is not system, user or assistant")
        tok = self.base.tokenizer
        prompt = chat_token_ids(tok, [{"role": t.role, "content": t.content} for t in e.prompt],
                                self.cfg.model.chat_template)
        response = tok.encode(e.response, add_special_tokens=False) + [self._end_of_turn()]
        self._check_length(where, len(prompt) + len(response), "example")
        return SftRow(prompt, response, e.task_type, e.role)

    def _check_length(self, where: str, n_tokens: int, what: str) -> None:
        """A sequence longer than trainer.micro_batch_tokens runs alone in its micro-batch (trr.pack); one longer
        than the base model's context cannot run at all."""
        context = getattr(self.pool.host.causal_lm.config, "max_position_embeddings", None)
        if context and n_tokens > context:
            raise invalid(f"{where}: {n_tokens} tokens exceed the base model's context of {context}; shorten the "
                          f"{what}")

    def _end_of_turn(self) -> int:
        """The token that ends an assistant turn (what generation stops on): <|im_end|> for ChatML models."""
        tok = self.base.tokenizer
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != tok.unk_token_id and im_end in self.base.eos_token_ids:
            return im_end
        return int(self.base.eos_token_ids[0])

    def AdoptAdapter(self, req: trainer_pb2.AdoptAdapterRequest) -> trainer_pb2.AdoptAdapterResponse:
        self._check_id(req.adapter.adapter_id)
        role = self._check_role(req.role)
        if req.adapter.version < 1:
            raise invalid(f"AdoptAdapter needs an explicit version >= 1 of '{req.adapter.adapter_id}'")
        with self._lock, _as_service_errors():
            ref = self.pool.adopt(ref_from_pb(req.adapter), role)
        return trainer_pb2.AdoptAdapterResponse(adapter=ref_to_pb(ref))

    def UpdateBatch(self, req: trainer_pb2.UpdateBatchRequest) -> trainer_pb2.UpdateBatchResponse:
        results = self._update(list(req.updates)) if req.updates else []
        return trainer_pb2.UpdateBatchResponse(results=results, mode=self.mode)

    def DropAdapter(self, req: trainer_pb2.DropAdapterRequest) -> trainer_pb2.DropAdapterResponse:
        self._check_id(req.adapter_id)
        with self._lock:
            return trainer_pb2.DropAdapterResponse(dropped=self.pool.drop(req.adapter_id, retire=not req.moved))

    # ---- the update
    def _update(self, reqs: list[trainer_pb2.UpdateRequest]) -> list[trainer_pb2.UpdateResponse]:
        """Validate everything first (a rejected request changes nothing), replay retried requests, then update."""
        ids = [r.adapter.adapter_id for r in reqs]
        dup = sorted({a for a in ids if ids.count(a) > 1})
        if dup:
            raise invalid(f"adapters {dup} appear more than once in one UpdateBatch; send one update per adapter")
        items = [self._item(r) for r in reqs]
        with self._lock, _as_service_errors():
            done = {it.adapter_id: self.pool.replay(it) for it in items}
            todo = [it for it in items if done[it.adapter_id] is None]
            for it in todo:
                held = self.pool.holding(it.adapter_id, it.version)
                self._check_roles(it, held.role)
            if todo:
                try:
                    with torch_threads(self.cfg.trainer.threads):
                        made = self.pool.update(todo, batched=self.mode == "batched")
                except PoolError:
                    raise
                except ValueError as e:  # a rollout the model cannot take; nothing was changed
                    raise invalid(str(e)) from None
                done.update({it.adapter_id: res for it, res in zip(todo, made, strict=True)})
        self._record(todo, [done[it.adapter_id][1] for it in todo])
        return [trainer_pb2.UpdateResponse(adapter=ref_to_pb(done[it.adapter_id][0]),
                                           stats=_stats_pb(done[it.adapter_id][1])) for it in items]

    def _item(self, req: trainer_pb2.UpdateRequest) -> UpdateItem:
        adapter_id = req.adapter.adapter_id
        self._check_id(adapter_id)
        if req.adapter.version < 1:
            raise invalid(f"update of '{adapter_id}' needs the version its rollouts were made with (got "
                          f"{req.adapter.version})")
        if not req.rollouts:
            raise invalid(f"update of '{adapter_id}' has no rollouts")
        rollouts = [self._rollout(adapter_id, i, r) for i, r in enumerate(req.rollouts)]
        return UpdateItem(adapter_id, int(req.adapter.version), rollouts, int(req.seed), int(req.step))

    def _rollout(self, adapter_id: str, i: int, r: trainer_pb2.Rollout) -> Rollout:
        where = f"update of '{adapter_id}', rollout {i}"
        vocab = self.pool.host.vocab_size
        prompt, response = list(r.prompt_token_ids), list(r.response_token_ids)
        if not prompt or not response:
            raise invalid(f"{where}: empty {'prompt' if not prompt else 'response'}; drop such rollouts before "
                          "the update")
        bad = [t for t in prompt + response if t < 0 or t >= vocab]
        if bad:
            raise invalid(f"{where}: token id {bad[0]} is outside the base model's vocabulary 0..{vocab - 1}")
        self._check_length(where, len(prompt) + len(response), "rollout")
        if r.task_type not in TASK_TYPES:
            raise invalid(f"{where}: task_type {r.task_type!r} is not one of {list(TASK_TYPES)}")
        if r.role not in ("teacher", "student"):
            raise invalid(f"{where}: role {r.role!r} is not 'teacher' (propose) or 'student' (solve)")
        if not math.isfinite(r.reward):
            raise invalid(f"{where}: reward {r.reward} is not a finite number")
        old = list(r.old_logprobs) or None
        if old is not None and (len(old) != len(response) or not all(math.isfinite(x) and x <= 0 for x in old)):
            raise invalid(f"{where}: old_logprobs must be one log-probability (<= 0) per response token "
                          f"({len(old)} given for {len(response)} tokens)")
        temperature = float(r.temperature) or 1.0  # 0 (unset, or greedy sampling): the model's own distribution
        if not (math.isfinite(temperature) and temperature > 0):
            raise invalid(f"{where}: temperature {r.temperature} must be the response's sampling temperature, > 0 "
                          "(0 or unset means 1)")
        if not 0 <= r.truncated_fraction <= 1:
            raise invalid(f"{where}: truncated_fraction {r.truncated_fraction} is not a share in [0, 1]")
        return Rollout(prompt, response, float(r.reward), r.task_type, r.role, old, temperature,
                       float(r.truncated_fraction))

    @staticmethod
    def _check_roles(item: UpdateItem, adapter_role: str) -> None:
        allowed = ROLLOUT_ROLES.get(adapter_role, ("teacher", "student"))
        wrong = sorted({r.role for r in item.rollouts} - set(allowed))
        if wrong:
            raise invalid(f"update of '{item.adapter_id}' ({adapter_role}) has {wrong} rollouts; a {adapter_role} "
                          f"trains on {list(allowed)} rollouts only (spec §1)")

    def _shape(self, rank: int, alpha: float) -> tuple[int, float]:
        """A request's rank and lora_alpha (0 = the config's), checked."""
        rank = rank or self.cfg.lora.rank
        if rank < 1 or rank > MAX_RANK:
            raise invalid(f"rank {rank} is out of range 1..{MAX_RANK} (0 = lora.rank)")
        alpha = alpha or self.cfg.lora.alpha
        if not math.isfinite(alpha) or alpha <= 0:
            raise invalid(f"lora_alpha {alpha} must be a positive number (0 = lora.alpha)")
        return rank, float(alpha)

    @staticmethod
    def _check_id(adapter_id: str) -> None:
        try:
            validate_adapter_id(adapter_id)
        except StoreError as e:
            raise invalid(str(e)) from None

    @staticmethod
    def _check_role(role: str) -> str:
        if role not in ROLES:
            raise invalid(f"role {role!r} is not one of {list(ROLES)}")
        return role

    def _record(self, items: list[UpdateItem], stats: list[UpdateStats]) -> None:
        if not stats:
            return
        tokens = sum(s.tokens for s in stats)
        seconds = max(s.seconds for s in stats) if self.mode == "batched" else sum(s.seconds for s in stats)
        TOKENS.labels("trainer", "train").inc(tokens)
        TOKENS_PER_S.labels("trainer", "train").set(tokens / seconds if seconds > 0 else 0.0)
        BATCH_SIZE.labels("trainer", "UpdateBatch").observe(len(items))
        for it, s in zip(items, stats, strict=True):
            log.info("updated %s v%d -> v%d: loss %.4f |g| %.3f tokens %d in %.2fs", it.adapter_id, it.version,
                     it.version + 1, s.loss, s.grad_norm, s.tokens, s.seconds, extra={"adapter_id": it.adapter_id})


def _stats_pb(s: UpdateStats) -> trainer_pb2.UpdateStats:
    return trainer_pb2.UpdateStats(loss=s.loss, grad_norm=s.grad_norm, mean_abs_advantage=s.mean_abs_advantage,
                                   tokens=s.tokens, seconds=s.seconds, rollouts=s.rollouts, ratio_dev=s.ratio_dev,
                                   clipped_fraction=s.clipped_fraction, truncated_fraction=s.truncated_fraction)


__all__ = ["TrainerService", "ServiceError", "resolve_batch_mode"]
