"""The artifact store: PEFT-format adapter versions on a (shared) directory, written atomically, safetensors only.

Layout: <root>/adapters/<adapter_id>/v<version>/{adapter_config.json, adapter_model.safetensors, meta.json,
[optimizer.safetensors]}. A version directory appears only by a rename of a fully written and fsynced temp
directory, so readers never see half a version. Everything in a version loads unchanged in PEFT and vLLM.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from populora import names
from populora.errors import StoreError
from populora.lora import PEFT_PREFIX, LoraConfigured, lora_keys

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTIMIZER_STATE = "optimizer.safetensors"
META = "meta.json"
# PEFT stores the default adapter's weights without the adapter name in the key.


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of named tensors (names, dtypes, shapes and values, in name order), "" for none. Exact: two versions
    share a digest only if every value is bit for bit the same, whatever file layout wrote them."""
    if not tensors:
        return ""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@dataclass(frozen=True)
class AdapterRef:
    """One version of one adapter; what messages carry instead of weights."""

    adapter_id: str
    version: int
    uri: str = ""

    @property
    def key(self) -> str:
        """A unique name per version (vLLM caches prefixes by LoRA name, so names must differ across versions)."""
        return f"{self.adapter_id}@v{self.version}"


@dataclass
class AdapterVersion(LoraConfigured):
    """An adapter version read from the store (its rank and scaling from `config`)."""

    ref: AdapterRef
    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)


def validate_adapter_id(adapter_id: str) -> str:
    """The id if it names a directory of this store (the one rule of populora.names); else StoreError."""
    why = names.problem(adapter_id, names.MAX_ADAPTER_ID)
    if why:
        raise StoreError(f"invalid adapter id {adapter_id!r}: {why}; use 1-{names.MAX_ADAPTER_ID} {names.RULE}")
    return adapter_id


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_adapter_dir(final: Path, weights: dict[str, torch.Tensor], config: dict[str, Any], meta: dict[str, Any],
                      optimizer_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a PEFT adapter directory atomically: every file into a temp directory beside `final`, each fsynced,
    then one rename, and the parent fsynced; a reader sees all of it or nothing. `final` must not exist (an empty
    directory is replaced); FileExistsError otherwise."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise FileExistsError(f"{final} exists and is not an empty directory")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in weights.items()}
        save_file(tensors, str(tmp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
        if optimizer_state is not None:
            opt = {k: v.detach().to("cpu").contiguous() for k, v in optimizer_state.items()}
            save_file(opt, str(tmp / OPTIMIZER_STATE), metadata={"format": "pt"})
        for f in tmp.iterdir():
            _fsync_file(f)
        _fsync_dir(tmp)
        if final.is_dir():
            final.rmdir()
        try:
            os.rename(tmp, final)
        except OSError as e:
            raise FileExistsError(f"{final} appeared while it was written: {e}") from e
        _fsync_dir(final.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def lora_config_dict(rank: int, alpha: float, target_modules: list[str], base_model: str = "",
                     dropout: float = 0.0) -> dict[str, Any]:
    """A PEFT LoraConfig as JSON, made by PEFT itself so every PEFT/vLLM version reads it."""
    from peft import LoraConfig

    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=sorted(target_modules), lora_dropout=dropout,
                     bias="none", task_type="CAUSAL_LM", base_model_name_or_path=base_model or None)
    out = cfg.to_dict()
    for key, value in list(out.items()):
        if isinstance(value, set):
            out[key] = sorted(value)
        elif hasattr(value, "value"):  # enums
            out[key] = value.value
    return out


class ArtifactStore:
    """Adapters by (id, version) under one root directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        (self.root / "adapters").mkdir(parents=True, exist_ok=True)

    # ---- paths and refs
    def adapter_dir(self, adapter_id: str) -> Path:
        return self.root / "adapters" / validate_adapter_id(adapter_id)

    def version_dir(self, adapter_id: str, version: int) -> Path:
        return self.adapter_dir(adapter_id) / f"v{int(version)}"

    def ref(self, adapter_id: str, version: int) -> AdapterRef:
        return AdapterRef(adapter_id, int(version), self.version_dir(adapter_id, version).as_uri())

    def path_of(self, ref: AdapterRef) -> Path:
        """The directory of a ref; a ref whose uri points elsewhere than this store is refused."""
        if ref.uri:
            parsed = urlparse(ref.uri)
            path = Path(parsed.path if parsed.scheme == "file" else ref.uri).resolve()
            expected = self.version_dir(ref.adapter_id, ref.version)
            if path != expected:
                raise StoreError(f"adapter ref {ref.key} points to {path}, which is not this store's {expected}")
        return self.version_dir(ref.adapter_id, ref.version)

    # ---- listing
    def adapter_ids(self) -> list[str]:
        return sorted(p.name for p in (self.root / "adapters").iterdir()
                      if p.is_dir() and not names.problem(p.name, names.MAX_ADAPTER_ID))

    def versions(self, adapter_id: str) -> list[int]:
        d = self.adapter_dir(adapter_id)
        if not d.is_dir():
            return []
        return sorted(int(p.name[1:]) for p in d.iterdir() if p.is_dir() and re.fullmatch(r"v\d+", p.name))

    def latest(self, adapter_id: str) -> AdapterRef:
        versions = self.versions(adapter_id)
        if not versions:
            raise StoreError(f"adapter '{adapter_id}' has no version in the store at {self.root}")
        return self.ref(adapter_id, versions[-1])

    def exists(self, ref: AdapterRef) -> bool:
        return (self.version_dir(ref.adapter_id, ref.version) / ADAPTER_WEIGHTS).exists()

    def resolve(self, ref: AdapterRef) -> AdapterRef:
        """The stored version a ref names: version 0 is the latest; any other must exist here (and a ref's uri
        must point into this store). StoreError names the adapter and the versions that do exist."""
        resolved = self.latest(ref.adapter_id) if ref.version == 0 else self.ref(ref.adapter_id, ref.version)
        if ref.version != 0:
            self.path_of(ref)
        if not self.exists(resolved):
            known = self.versions(ref.adapter_id)
            raise StoreError(f"adapter {resolved.key} is not in the store at {self.root} "
                             f"(versions present: {known or 'none'})")
        return resolved

    # ---- writing
    def save(self, adapter_id: str, weights: dict[str, torch.Tensor], config: dict[str, Any],
             version: int | None = None, meta: dict[str, Any] | None = None,
             optimizer_state: dict[str, torch.Tensor] | None = None) -> AdapterRef:
        """Write one version atomically (temp dir, fsync, rename). `version=None` takes the next number.

        Weights are PEFT keys (`...lora_A.weight`, `...lora_B.weight`); an existing version is never overwritten.
        """
        validate_adapter_id(adapter_id)
        if not weights:
            raise StoreError(f"refusing to save adapter '{adapter_id}' with no weights")
        for key, tensor in weights.items():
            if not isinstance(tensor, torch.Tensor):
                raise StoreError(f"adapter '{adapter_id}': weight {key!r} is not a tensor")
        if "r" not in config or "target_modules" not in config:
            raise StoreError(f"adapter '{adapter_id}': adapter_config needs 'r' and 'target_modules'")
        adir = self.adapter_dir(adapter_id)
        adir.mkdir(parents=True, exist_ok=True)
        if version is None:
            existing = self.versions(adapter_id)
            version = (existing[-1] + 1) if existing else 1
        final = self.version_dir(adapter_id, version)
        if final.exists():
            raise StoreError(f"adapter '{adapter_id}' version {version} already exists at {final}; versions are "
                             "immutable")
        full_meta = {"adapter_id": adapter_id, "version": version, **(meta or {})}
        try:
            write_adapter_dir(final, weights, config, full_meta, optimizer_state)
        except FileExistsError as e:
            raise StoreError(f"adapter '{adapter_id}' version {version} was written concurrently: {e}") from e
        return self.ref(adapter_id, version)

    # ---- reading
    def load(self, ref: AdapterRef, with_optimizer: bool = False) -> tuple[AdapterVersion, dict[str, torch.Tensor]]:
        """Read a version; the second value is the optimizer state ({} when absent or not asked for)."""
        d = self.path_of(ref)
        if not d.is_dir():
            known = self.versions(ref.adapter_id)
            raise StoreError(f"adapter {ref.key} not found in {self.root} (versions present: {known or 'none'})")
        config = self._read_json(d / ADAPTER_CONFIG)
        meta = self._read_json(d / META) if (d / META).exists() else {}
        weights = self._read_tensors(d / ADAPTER_WEIGHTS)
        opt: dict[str, torch.Tensor] = {}
        if with_optimizer and (d / OPTIMIZER_STATE).exists():
            opt = self._read_tensors(d / OPTIMIZER_STATE)
        return AdapterVersion(self.ref(ref.adapter_id, ref.version), config, weights, meta), opt

    def read(self, ref: AdapterRef) -> AdapterVersion:
        return self.load(ref)[0]

    def rank(self, adapter_id: str) -> int:
        """An adapter's LoRA rank, from its first version's adapter_config.json alone (no weights read): every
        version of an adapter has the rank it was created with (a rank change makes a new adapter, spec 9)."""
        ref = self.ref(adapter_id, (self.versions(adapter_id) or [1])[0])
        return int(self._read_json(self.path_of(ref) / ADAPTER_CONFIG)["r"])

    def digests(self, ref: AdapterRef) -> tuple[str, str]:
        """(weights digest, optimizer-state digest) of a stored version: what two runs that must agree compare
        (tensors_digest; the optimizer's is "" where the version has none, as an evolver child)."""
        version, opt = self.load(ref, with_optimizer=True)
        return tensors_digest(version.weights), tensors_digest(opt)

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any]:
        if not path.exists():
            raise StoreError(f"{path} is missing: the adapter version is incomplete or not an adapter")
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise StoreError(f"{path} is corrupt (not valid JSON: {e}); remove that version and rewrite it") from e
        if not isinstance(data, dict):
            raise StoreError(f"{path} is corrupt: expected a JSON object")
        return data

    @staticmethod
    def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
        if not path.exists():
            raise StoreError(f"{path} is missing: the adapter version is incomplete")
        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise StoreError(f"{path} is corrupt (cannot be read as safetensors: {e}); remove that version and "
                             "rewrite it") from e

    # ---- PEFT
    def load_into_peft(self, model, ref: AdapterRef, adapter_name: str | None = None):
        """Load a version into a transformers model as a PEFT adapter named `adapter_name` (default: ref.key with its
        dots as underscores: torch refuses module names with a dot, and every member's id has one).

        `model` is either a plain transformers model (a PeftModel is made) or a PeftModel (an adapter is added).
        """
        from peft import PeftModel

        path = self.path_of(ref)
        self.read(ref)  # clear errors for missing or corrupt files before PEFT sees them
        name = adapter_name or ref.key.replace(".", "_")
        if isinstance(model, PeftModel):
            model.load_adapter(str(path), adapter_name=name, is_trainable=False)
            return model
        return PeftModel.from_pretrained(model, str(path), adapter_name=name, is_trainable=False)

    def remove_adapter(self, adapter_id: str) -> None:
        """Delete every version of an adapter (operators' use; retired adapters are normally kept)."""
        d = self.adapter_dir(adapter_id)
        if d.exists():
            shutil.rmtree(d)


def peft_module_names(weights: dict[str, torch.Tensor]) -> list[str]:
    """Module paths that carry LoRA, e.g. 'model.layers.0.self_attn.q_proj', from PEFT weight keys."""
    names = set()
    for key in weights:
        m = re.match(r"^(?:base_model\.model\.)?(.+)\.lora_[AB](?:\.[^.]+)?\.weight$", key)
        if m:
            names.add(m.group(1))
    return sorted(names)


def lora_factors(weights: dict[str, torch.Tensor], module: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of one module in PEFT's layout: lora_A (r x d_in), lora_B (d_out x r); the keys with or without PEFT's
    prefix."""
    for a, b in (lora_keys(module), tuple(k.removeprefix(PEFT_PREFIX) for k in lora_keys(module))):
        if a in weights and b in weights:
            return weights[a], weights[b]
    raise StoreError(f"module {module!r} has no lora_A/lora_B pair in the adapter weights")
