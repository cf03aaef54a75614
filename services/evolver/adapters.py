"""Parent adapters read lazily module by module, their compatibility checks, and writing a child directory."""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from populora.lora import LoraConfigured
from populora.store import ADAPTER_CONFIG, ADAPTER_WEIGHTS, META
from populora.store import write_adapter_dir as store_write_adapter_dir

_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<side>[AB])\.weight$")
# Config fields that must agree between parents: they fix the modules, the shapes or the base model. Rank and
# lora_alpha may differ: operators read every parent in the child's scaling (services.evolver.ranks).
SAME_CONFIG = ("target_modules", "use_rslora", "fan_in_fan_out", "layers_to_transform", "layers_pattern",
               "base_model_name_or_path")


class EvolverError(ValueError):
    """A bad input to an operator (parents, parameters, paths); the message says what and how to fix it."""


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


class SafetensorsReader:
    """Reads single tensors of a .safetensors file with plain file reads, not a memory map.

    A memory-mapped parent would add every page it touched to the process's resident size; read this way a
    7B adapter's parents cost one module at a time (the page cache is not ours), which keeps peak memory near
    the child's own size. Format: 8-byte little-endian header length, JSON header, then the raw data.
    """

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        size = os.fstat(self._file.fileno()).st_size
        head = self._file.read(8)
        if len(head) != 8:
            raise ValueError("file shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 * 2**20):
            raise ValueError(f"header length {n} does not fit the file ({size} bytes)")
        header = json.loads(self._file.read(n))
        header.pop("__metadata__", None)
        self.data_start = 8 + n
        self.entries: dict[str, tuple[torch.dtype, tuple[int, ...], int, int]] = {}
        for key, info in header.items():
            dtype = _DTYPES.get(info.get("dtype"))
            if dtype is None:
                raise ValueError(f"tensor {key!r} has dtype {info.get('dtype')!r}; supported: {sorted(_DTYPES)}")
            begin, end = (int(x) for x in info["data_offsets"])
            shape = tuple(int(d) for d in info["shape"])
            numel = 1
            for d in shape:
                numel *= d
            if end - begin != numel * dtype.itemsize or self.data_start + end > size:
                raise ValueError(f"tensor {key!r}: offsets {begin}..{end} do not match its shape or the file size")
            self.entries[key] = (dtype, shape, begin, end)

    def keys(self) -> list[str]:
        return list(self.entries)

    def shape(self, key: str) -> tuple[int, ...]:
        return self.entries[key][1]

    def dtype(self, key: str) -> torch.dtype:
        return self.entries[key][0]

    def get_tensor(self, key: str) -> torch.Tensor:
        dtype, shape, begin, end = self.entries[key]
        buf = torch.empty(end - begin, dtype=torch.uint8)
        self._file.seek(self.data_start + begin)
        if self._file.readinto(buf.numpy()) != end - begin:
            raise OSError(f"short read of tensor {key!r}")
        return buf.view(dtype).reshape(shape)

    def close(self) -> None:
        self._file.close()


@dataclass
class ParentAdapter(LoraConfigured):
    """A PEFT LoRA adapter directory opened for reading one module at a time (the weights stay on disk).

    `modules` maps a module path to its (lora_A key, lora_B key). ΔW of a module = scaling · lora_B @ lora_A; the
    scaling (from `config`) is the same for parents and child, so operators ignore it.
    """

    label: str
    path: Path
    config: dict[str, Any]
    meta: dict[str, Any]
    modules: dict[str, tuple[str, str]]
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
    dtype: torch.dtype
    _handle: Any = field(repr=False, default=None)

    def factors(self, module: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(lora_b d_out x r, lora_a r x d_in) of one module, read from disk now."""
        key_a, key_b = self.modules[module]
        try:
            return self._handle.get_tensor(key_b), self._handle.get_tensor(key_a)
        except (OSError, ValueError, RuntimeError) as e:
            raise EvolverError(f"parent {self.label}: cannot read {module} from {self.path / ADAPTER_WEIGHTS}: "
                               f"{e}") from e

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _read_json(path: Path, label: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise EvolverError(f"parent {label}: {path} is missing; is this a PEFT adapter directory?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EvolverError(f"parent {label}: {what} {path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise EvolverError(f"parent {label}: {what} {path} must hold a JSON object")
    return data


def open_parent(path: str | Path, label: str | None = None) -> ParentAdapter:
    """Open a PEFT adapter directory (adapter_config.json + adapter_model.safetensors [+ meta.json]) lazily.

    Refuses what the operators do not support, naming it: DoRA, trained biases, per-module rank or alpha patterns,
    modules_to_save, and weights that are not lora_A/lora_B pairs of the configured rank.
    """
    path = Path(path)
    label = label or str(path)
    if not path.is_dir():
        raise EvolverError(f"parent {label}: {path} is not a directory")
    config = _read_json(path / ADAPTER_CONFIG, label, "adapter config")
    meta = _read_json(path / META, label, "meta") if (path / META).exists() else {}
    _check_supported(config, label)
    weights_path = path / ADAPTER_WEIGHTS
    if not weights_path.exists():
        raise EvolverError(f"parent {label}: {weights_path} is missing (only safetensors adapters are supported)")
    try:
        handle = SafetensorsReader(weights_path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EvolverError(f"parent {label}: {weights_path} cannot be read as safetensors ({e})") from None
    try:
        keys = handle.keys()
        modules, shapes = _pair_keys(keys, {k: handle.shape(k) for k in keys}, int(config["r"]), label)
        dtypes = {handle.dtype(k) for k in keys}
        if len(dtypes) > 1:
            raise EvolverError(f"parent {label}: mixed weight dtypes {sorted(map(str, dtypes))}; save the adapter "
                               "in one dtype")
    except EvolverError:
        handle.close()
        raise
    return ParentAdapter(label, path, config, meta, modules, shapes, dtypes.pop(), handle)


def _check_supported(config: dict[str, Any], label: str) -> None:
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise EvolverError(f"parent {label}: peft_type {config.get('peft_type')!r} is not LORA")
    if "r" not in config or not isinstance(config["r"], int) or config["r"] < 1:
        raise EvolverError(f"parent {label}: adapter_config has no positive integer 'r'")
    if config.get("use_dora"):
        raise EvolverError(f"parent {label}: DoRA adapters (use_dora=true) are not supported; the operators act on "
                           "B·Aᵀ only and would drop the magnitude vector")
    if config.get("bias", "none") != "none":
        raise EvolverError(f"parent {label}: bias={config['bias']!r} is not supported (use bias='none')")
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise EvolverError(f"parent {label}: {key} is set; per-module ranks or alphas are not supported")
    if config.get("modules_to_save"):
        raise EvolverError(f"parent {label}: modules_to_save={config['modules_to_save']} is not supported; the "
                           "operators only recombine LoRA factors")


def _pair_keys(keys: list[str], shapes: dict[str, tuple[int, ...]], rank: int,
               label: str) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[tuple[int, ...], tuple[int, ...]]]]:
    sides: dict[str, dict[str, str]] = {}
    for key in keys:
        m = _LORA_KEY.match(key)
        if not m:
            raise EvolverError(f"parent {label}: weight {key!r} is not a lora_A/lora_B weight (DoRA magnitudes, "
                               "biases, embeddings and saved modules are not supported)")
        sides.setdefault(m["module"], {})[m["side"]] = key
    modules, out_shapes = {}, {}
    for module, pair in sorted(sides.items()):
        if set(pair) != {"A", "B"}:
            missing = "lora_B" if "A" in pair else "lora_A"
            raise EvolverError(f"parent {label}: module {module} has no {missing}.weight")
        sa, sb = shapes[pair["A"]], shapes[pair["B"]]
        if len(sa) != 2 or len(sb) != 2 or sa[0] != rank or sb[1] != rank:
            raise EvolverError(f"parent {label}: module {module} has lora_A {list(sa)} and lora_B {list(sb)}, "
                               f"expected [r, d_in] and [d_out, r] with r={rank}")
        modules[module] = (pair["A"], pair["B"])
        out_shapes[module] = (sa, sb)
    if not modules:
        raise EvolverError(f"parent {label}: the adapter has no LoRA weights")
    return modules, out_shapes


def check_compatible(parents: list[ParentAdapter]) -> None:
    """Parents of one child must agree on targets, base model, module set and every module's (d_in, d_out); their
    ranks and alphas may differ (spec §9, "Mixed ranks")."""
    first = parents[0]
    for other in parents[1:]:
        for key in SAME_CONFIG:
            a, b = _norm(first.config.get(key)), _norm(other.config.get(key))
            if key == "base_model_name_or_path" and (not a or not b):
                continue
            if a != b:
                raise EvolverError(f"parents differ in {key}: {first.label} has {a!r}, {other.label} has {b!r}; "
                                   "crossover needs adapters of the same shape on the same base model")
        only_first = sorted(set(first.modules) - set(other.modules))
        only_other = sorted(set(other.modules) - set(first.modules))
        if only_first or only_other:
            raise EvolverError(f"parents differ in target modules: only in {first.label}: {only_first[:3]}"
                               f"{' ...' if len(only_first) > 3 else ''}; only in {other.label}: {only_other[:3]}"
                               f"{' ...' if len(only_other) > 3 else ''}")
        for module, shape in first.shapes.items():
            if _dims(other.shapes[module]) != _dims(shape):
                raise EvolverError(f"parents differ in the shape of {module}: {first.label} has lora_A/lora_B "
                                   f"{[list(s) for s in shape]}, {other.label} has "
                                   f"{[list(s) for s in other.shapes[module]]}")


def _dims(shape: tuple[tuple[int, ...], tuple[int, ...]]) -> tuple[int, int]:
    """(d_in, d_out) of a module from its (lora_A, lora_B) shapes, whatever the rank."""
    (_, d_in), (d_out, _) = shape
    return d_in, d_out


def _norm(value: Any) -> Any:
    if isinstance(value, list | tuple | set):
        return sorted(value)
    return value


def write_adapter_dir(out: str | Path, weights: dict[str, torch.Tensor], config: dict[str, Any],
                      meta: dict[str, Any]) -> Path:
    """Write a PEFT adapter directory atomically (the store's writer); refuses an existing non-empty `out`."""
    try:
        return store_write_adapter_dir(Path(out).resolve(), weights, config, meta)
    except FileExistsError:
        raise EvolverError(f"--out {out} exists and is not an empty directory; choose a new path") from None
