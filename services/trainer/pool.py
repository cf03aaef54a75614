"""The trainer's adapters: which (id, version) each holds, its AdamW state, and the store round trip.

Every adapter is one slot of the shared adapter host (populora.adapters; the frozen base is loaded once) plus one optimizer over that
adapter's LoRA parameters, so memory grows per adapter by its LoRA weights, their gradients and two Adam
moments only. Each update writes the next version (weights + optimizer state + step) to the artifact store;
a trainer restarted on the same store resumes an adapter from its latest version and makes exactly the update
the uninterrupted trainer would have made.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from populora.adapters import AdapterHost, peft_init_weights
from populora.records import UpdateStats
from populora.store import AdapterRef, AdapterVersion, ArtifactStore, lora_config_dict
from services.trainer.memory import MemoryLimitError
from services.trainer.optim import AdapterAdamW
from services.trainer.trr import Rollout, TrrSettings, UpdateJob, trr_update
from services.trainer.warmstart import FitSettings, SftRow, WarmStartCache, fit_digest, sft_fit

TRAINER_KIND = "trainer"


class PoolError(ValueError):
    """A request the pool cannot apply; `kind` says which: 'invalid' (the input) or 'precondition' (the state)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class OptimizerSettings:
    """AdamW of spec §5 (lr, betas, weight decay from `cfg.trainer`)."""

    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0


@dataclass
class HeldAdapter:
    """One adapter the trainer holds: the version its weights are at, and its optimizer."""

    adapter_id: str
    version: int
    role: str
    config: dict
    slot: str
    params: dict[str, nn.Parameter]  # PEFT key -> parameter the passes compute with
    optimizer: AdapterAdamW  # holds the full-precision weights and the Adam moments
    updates: int = 0  # TRR++ steps applied since the adapter was created or adopted


@dataclass
class UpdateItem:
    """One adapter's share of an Update/UpdateBatch call."""

    adapter_id: str
    version: int
    rollouts: list[Rollout]
    seed: int = 0
    step: int = 0


def request_digest(item: UpdateItem) -> str:
    """A fingerprint of an update request, so a retried request returns the version it already made."""
    h = hashlib.sha256(f"{item.adapter_id}|{item.version}|{item.seed}|{item.step}".encode())
    for r in item.rollouts:
        h.update(struct.pack(f"<{len(r.prompt)}i", *r.prompt) + b"|")
        h.update(struct.pack(f"<{len(r.response)}i", *r.response) + b"|")
        h.update(f"{r.reward!r}|{r.task_type}|{r.role}|".encode())
        h.update(struct.pack(f"<{len(r.old_logprobs or [])}f", *(r.old_logprobs or [])) + b";")
        if r.temperature != 1.0:  # it changes the update; left out at 1, so the digests of earlier requests hold
            h.update(f"T{r.temperature!r};".encode())
    return h.hexdigest()


class AdapterPool:
    """Adapters on one host, each with its AdamW; init, adopt, resume, update, drop."""

    def __init__(self, host: AdapterHost, store: ArtifactStore, optimizer: OptimizerSettings,
                 trr: TrrSettings, base_name: str = ""):
        self.host = host
        self.store = store
        self.optimizer_settings = optimizer
        self.trr = trr
        self.base_name = base_name
        self.held: dict[str, HeldAdapter] = {}
        self.dropped: set[str] = set()
        self._slots = itertools.count()

    # ---- adapters in and out
    def init(self, adapter_id: str, role: str, rank: int, alpha: float, target_modules: list[str],
             seed: int, start: AdapterVersion | None = None) -> AdapterRef:
        """A fresh adapter (B = 0), or a copy of `start`'s weights (the warm start, spec 13), written to the store as
        version 1 with an empty optimizer state."""
        if adapter_id in self.held or self.store.versions(adapter_id):
            raise PoolError("precondition", f"adapter '{adapter_id}' already exists (held: "
                            f"{adapter_id in self.held}, store versions: {self.store.versions(adapter_id)}); "
                            "pick a new id, or AdoptAdapter the stored one")
        config = lora_config_dict(rank, alpha, target_modules, self.base_name)
        meta: dict = {"init_seed": int(seed), "step": 0}
        if start is None:
            weights = peft_init_weights(self.host.causal_lm, target_modules, rank, seed)
        else:
            if start.rank != rank or sorted(start.config.get("target_modules") or []) != sorted(target_modules):
                raise PoolError("invalid", f"init_from {start.ref.key} has rank {start.rank} on "
                                f"{sorted(start.config.get('target_modules') or [])}; adapter '{adapter_id}' asks "
                                f"for rank {rank} on {sorted(target_modules)}: they must agree")
            weights = {k: v.clone() for k, v in start.weights.items()}
            meta = {"init_from": start.ref.key, "step": 0}
        held = self._attach(adapter_id, 1, role, config, weights, {})
        try:
            self._save(held, meta=meta)
        except Exception:
            self._detach(held)
            raise
        return self.store.ref(adapter_id, 1)

    def warm_start(self, adapter_id: str, rows: list[SftRow], settings: FitSettings, base: dict,
                   cache: WarmStartCache | None) -> tuple[AdapterRef, bool, dict]:
        """Fit one adapter on `rows` (spec 13) and write it as version 1 of `adapter_id`; returns its ref, whether
        the fit came from `cache`, and the fit's record (digest, losses, tokens, seconds).

        The adapter is not held afterwards: members start from copies of it (`init` with `start`). A retried call
        finds its own version 1 (same digest) and returns it."""
        digest = fit_digest(base, settings, rows)
        if self.store.versions(adapter_id):
            stored = self._read(self.store.ref(adapter_id, 1))[0]
            if stored.meta.get("digest") != digest:
                raise PoolError("precondition", f"adapter '{adapter_id}' already exists and was fitted on other "
                                "examples or settings; pick a new id")
            return stored.ref, True, _fit_record(stored.meta)
        hit = cache.get(digest) if cache is not None else None
        if hit is not None:
            weights, config, record = hit.weights, hit.config, _fit_record(hit.meta)
        else:
            config = lora_config_dict(settings.rank, settings.alpha, settings.target_modules, self.base_name)
            weights = peft_init_weights(self.host.causal_lm, settings.target_modules, settings.rank, settings.seed)
            slot = f"w{next(self._slots)}"
            try:
                params = self.host.add(slot, weights, config, trainable=True)
            except ValueError as e:
                raise PoolError("invalid", f"warm start '{adapter_id}' does not fit the base model: {e}") from None
            try:
                opt = AdapterAdamW(params, masters=weights, lr=settings.lr,
                                   betas=tuple(self.optimizer_settings.betas), weight_decay=0.0)
                fit = sft_fit(self.host, slot, list(params.values()), opt, rows, settings, self.host.device)
                weights = {k: w.detach().clone() for k, w in opt.weights().items()}
            finally:
                self.host.remove(slot)
            record = {"digest": digest, "losses": fit.losses, "tokens": fit.tokens, "fit_seconds": fit.seconds}
            if cache is not None:
                cache.put(digest, weights, config, record)
        record["digest"] = digest
        ref = self.store.save(adapter_id, weights, config, version=1,
                              meta={"written_by": "warmstart", "base_model": self.base_name, "step": 0, **record})
        return ref, hit is not None, record

    def adopt(self, ref: AdapterRef, role: str) -> AdapterRef:
        """Take over a version someone else wrote (an evolver child): its weights, a fresh optimizer (spec §8)."""
        version, _ = self._read(ref)  # a missing version leaves a held adapter of that id alone
        self._release_if_held(ref.adapter_id)
        self._attach(ref.adapter_id, version.ref.version, role, version.config, version.weights, {})
        return version.ref

    def resume(self, adapter_id: str) -> HeldAdapter:
        """Continue an adapter from its latest stored version: its weights and, when a trainer wrote it, the
        optimizer state and update count saved there (an evolver child has none: a fresh optimizer, as adopted)."""
        ref = self.store.latest(adapter_id)
        version, opt = self.store.load(ref, with_optimizer=True)
        if adapter_id in self.held:  # an older version, from before another replica updated it
            self._detach(self.held[adapter_id])
        held = self._attach(adapter_id, ref.version, version.meta.get("role", "both"), version.config,
                            version.weights, opt if version.meta.get("written_by") == TRAINER_KIND else {})
        held.updates = int(version.meta.get("updates", 0))
        return held

    def drop(self, adapter_id: str, retire: bool = True) -> bool:
        """Free an adapter's slot and optimizer. Retired, it is refused from then on; not retired (it moved to
        another replica), it is taken from the store again if it comes back."""
        held = self.held.get(adapter_id)
        if retire:
            self.dropped.add(adapter_id)
        if held is None:
            return False
        self._detach(held)
        return True

    def _release_if_held(self, adapter_id: str) -> None:
        if adapter_id in self.held:
            self._detach(self.held[adapter_id])
        self.dropped.discard(adapter_id)

    def _read(self, ref: AdapterRef):
        from populora.store import StoreError

        try:
            return self.store.load(ref)
        except StoreError as e:
            raise PoolError("precondition", str(e)) from None

    def _attach(self, adapter_id: str, version: int, role: str, config: dict, weights: dict[str, torch.Tensor],
                optimizer_state: dict[str, torch.Tensor]) -> HeldAdapter:
        slot = f"a{next(self._slots)}"
        try:
            params = self.host.add(slot, weights, config, trainable=True)
        except ValueError as e:
            raise PoolError("invalid", f"adapter '{adapter_id}' v{version} does not fit the base model: {e}") from None
        opt = AdapterAdamW(params, masters=weights, lr=self.optimizer_settings.lr,
                           betas=tuple(self.optimizer_settings.betas),
                           weight_decay=self.optimizer_settings.weight_decay)
        opt.load_flat_state(optimizer_state)
        held = HeldAdapter(adapter_id, version, role, dict(config), slot, params, opt)
        self.held[adapter_id] = held
        self.dropped.discard(adapter_id)
        return held

    def _detach(self, held: HeldAdapter) -> None:
        self.host.remove(held.slot)
        self.held.pop(held.adapter_id, None)

    # ---- the update
    def holding(self, adapter_id: str, version: int, resume: bool = True) -> HeldAdapter:
        """The held adapter at exactly `version`. With `resume`, an adapter this process does not hold (and has not
        dropped) is resumed from the store when `version` is its latest stored version."""
        held = self.held.get(adapter_id)
        stale = held is not None and held.version < version  # another replica updated it since (it moved back)
        if (held is None or stale) and resume and adapter_id not in self.dropped and self.store.versions(adapter_id):
            if self.store.latest(adapter_id).version == version:
                held = self.resume(adapter_id)
        if held is None:
            raise PoolError("precondition", f"the trainer does not hold adapter '{adapter_id}'"
                            f"{' (dropped)' if adapter_id in self.dropped else ''}; InitAdapter or AdoptAdapter it "
                            "first")
        if held.version != version:
            raise PoolError("precondition", f"adapter '{adapter_id}' is at version {held.version}, the update asked "
                            f"for version {version}; send rollouts made with v{held.version}")
        return held

    def replay(self, item: UpdateItem) -> tuple[AdapterRef, UpdateStats] | None:
        """The result of an update already made (a retried request): the held version was made from this request,
        or, for an adapter this trainer does not hold at that version, the stored one was (another replica made it
        and went away before answering: this one takes the adapter over from that version)."""
        held = self.held.get(item.adapter_id)
        made = self.store.ref(item.adapter_id, item.version + 1)
        if held is None or held.version != made.version:
            if item.adapter_id in self.dropped or (held is not None and held.version > made.version):
                return None
            if not self.store.exists(made) or self.store.latest(item.adapter_id).version != made.version:
                return None
        meta = self._read(made)[0].meta
        if meta.get("request_digest") != request_digest(item):
            return None
        if held is None or held.version != made.version:
            self.resume(item.adapter_id)
        return made, UpdateStats(**meta.get("stats", {}))

    def update(self, items: Sequence[UpdateItem], batched: bool) -> list[tuple[AdapterRef, UpdateStats]]:
        """One TRR++ step per item's adapter, all in one pass when `batched`; writes and returns the new versions.

        All or nothing: on any failure every adapter's weights and optimizer state go back to where they were.
        """
        helds = [self.holding(it.adapter_id, it.version) for it in items]
        jobs = [UpdateJob(h.slot, it.rollouts, list(h.params.values()), h.optimizer)
                for h, it in zip(helds, items, strict=True)]
        snapshots = [snapshot(h) for h in helds]
        held_bytes = sum(t.nbytes for snap in snapshots for part in snap[2:] for t in part.values())
        try:
            if batched and self.host.trains_mixed_rows:  # the batched layer has no dropout: nothing random to seed
                stats = trr_update(self.host, jobs, self.trr, self.host.device, held_bytes)
            else:
                stats = []
                for job, it in zip(jobs, items, strict=True):
                    with _seeded(it.seed, self.host.device):  # LoRA dropout draws from this seed
                        stats.append(trr_update(self.host, [job], self.trr, self.host.device, held_bytes)[0])
            refs = []
            for h, it, s in zip(helds, items, stats, strict=True):
                h.version += 1
                h.updates += 1
                refs.append(self._save(h, meta={"request_digest": request_digest(it), "step": int(it.step),
                                                "seed": int(it.seed), "stats": dict(s.__dict__),
                                                "mode": "batched" if batched else "sequential"}))
        except Exception as e:
            for h, snap in zip(helds, snapshots, strict=True):
                restore(h, snap)
            if isinstance(e, MemoryLimitError):  # the request's rollouts, against the configured memory
                raise PoolError("invalid", str(e)) from None
            raise
        return list(zip(refs, stats, strict=True))

    def _save(self, held: HeldAdapter, meta: dict) -> AdapterRef:
        full = {"written_by": TRAINER_KIND, "role": held.role, "updates": held.updates, "base_model": self.base_name,
                "optimizer": {"name": "adamw", "lr": self.optimizer_settings.lr,
                              "betas": list(self.optimizer_settings.betas),
                              "weight_decay": self.optimizer_settings.weight_decay}, **meta}
        return self.store.save(held.adapter_id, held.optimizer.weights(), held.config, version=held.version,
                               meta=full, optimizer_state=held.optimizer.flat_state())


def _fit_record(meta: dict) -> dict:
    return {k: meta[k] for k in ("digest", "losses", "tokens", "fit_seconds") if k in meta}


# ---- all-or-nothing updates

def snapshot(held: HeldAdapter) -> tuple:
    return (held.version, held.updates, {k: w.clone() for k, w in held.optimizer.weights().items()},
            {k: v.clone() for k, v in held.optimizer.flat_state().items()})


def restore(held: HeldAdapter, snap: tuple) -> None:
    held.version, held.updates, weights, opt = snap
    held.optimizer.zero_grad(set_to_none=True)
    held.optimizer.load_weights(weights)
    held.optimizer.load_flat_state(opt)


class _seeded:
    """Seed torch's RNG (LoRA dropout) for one update without touching the process's global stream."""

    def __init__(self, seed: int, device: torch.device):
        devices = [device] if device.type == "cuda" else []
        self._fork = torch.random.fork_rng(devices=devices)
        self.seed = int(seed)

    def __enter__(self):
        self._fork.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)
