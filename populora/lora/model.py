"""The model wrapper: every target nn.Linear of a frozen HF causal LM made a LoRA layer, and adapters by name.

`MultiLoraModel` injects `MultiLoraLinear` layers in place, adds and removes adapters (inference ones in bank slots,
trainable ones as Parameters), and sets the row plan of a pass: row b of a batch uses adapter names[b].
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from populora.lora.layer import MultiLoraLinear
from populora.lora.rows import RowPlan, plan_rows, span_rows, uniform_rows
from populora.lora.weights import PEFT_PREFIX, LoraError, LoraFactors, lora_keys, lora_scaling

MODES = ("segments", "gather")


def cache_kwarg(model: nn.Module) -> str:
    """The name of the KV-cache argument of a HF causal LM's forward (`cache` in transformers >= 5.20)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class MultiLoraModel(nn.Module):
    """Injects a per-row batched LoRA path into every target nn.Linear of a (frozen) HF causal LM, in place."""

    def __init__(self, base_model: nn.Module, target_modules: list[str], max_rank: int, mode: str = "segments"):
        super().__init__()
        if mode not in MODES:
            raise LoraError(f"unknown LoRA mode {mode!r}; choose one of {list(MODES)}")
        self.model = base_model
        self.max_rank = int(max_rank)
        self.mode = mode
        self.target_modules = list(target_modules)
        self._state = threading.local()
        self._configs: dict[str, dict] = {}
        self._trainable: dict[str, nn.ParameterList] = {}
        self._slots: dict[str, int] = {}  # inference adapter -> bank slot
        self._capacity = 0
        self.slot_scaling = torch.zeros(0)  # (C,) scaling of each slot
        self.layers: dict[str, MultiLoraLinear] = {}
        self._inject()

    def _inject(self) -> None:
        suffixes = set(self.target_modules)
        for name, module in list(self.model.named_modules()):
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in suffixes:
                parent_name, _, child = name.rpartition(".")
                parent = self.model.get_submodule(parent_name) if parent_name else self.model
                wrapped = MultiLoraLinear(module, self, name)
                setattr(parent, child, wrapped)
                self.layers[name] = wrapped
        if not self.layers:
            raise LoraError(f"no nn.Linear named {sorted(suffixes)} in the model; check target_modules")

    def restore(self) -> nn.Module:
        """Put the original nn.Linear modules back and return the plain base model (adapters are dropped)."""
        for name, wrapped in self.layers.items():
            parent_name, _, child = name.rpartition(".")
            parent = self.model.get_submodule(parent_name) if parent_name else self.model
            setattr(parent, child, wrapped.base)
        self.layers = {}
        self._configs.clear()
        self._trainable.clear()
        self._slots.clear()
        return self.model

    # ---- adapters
    def add_adapter(self, name: str, weights: dict[str, torch.Tensor], config: dict, trainable: bool = False) -> None:
        """Add adapter `name` from PEFT-layout weights and its adapter_config.json dict (r, lora_alpha, ...).

        Modules the adapter does not cover stay at the base for its rows. Replaces nothing: names are unique.
        """
        if name in self._configs:
            raise LoraError(f"adapter {name!r} is already loaded; remove it first or use a new name")
        rank, scaling = int(config["r"]), lora_scaling(config)
        if rank > self.max_rank:
            raise LoraError(f"adapter {name!r} has rank {rank} > max_rank {self.max_rank}")
        factors = self._factors_from_weights(name, weights, rank)
        slot = None if trainable else self._free_slot()
        params = nn.ParameterList()
        for module_name, (a, b) in factors.items():
            layer = self.layers[module_name]
            w = layer.base.weight
            a = a.detach().to(device=w.device, dtype=w.dtype)
            b = b.detach().to(device=w.device, dtype=w.dtype)
            if slot is not None:
                layer.put_slot(slot, self._capacity, name, a, b, scaling)
                continue
            a, b = nn.Parameter(a.clone().contiguous()), nn.Parameter(b.clone().contiguous())
            params.extend([a, b])
            layer.factors[name] = LoraFactors(a, b, scaling)
        self._configs[name] = dict(config)
        if slot is not None:
            self._slots[name] = slot
            self.slot_scaling[slot] = scaling
            for layer in self.layers.values():  # every bank spans every slot: batched paths slice slot ranges
                if layer.bank_at is not None and layer.bank_at.shape[0] < self._capacity:
                    layer.grow(self._capacity)  # modules this adapter does not cover: its slot stays zeros
        else:
            self._trainable[name] = params
        self._invalidate_banks()

    def _free_slot(self) -> int:
        used = set(self._slots.values())
        slot = next(i for i in range(len(used) + 1) if i not in used)
        if slot >= self._capacity:
            self._capacity = max(1, 2 * self._capacity)
            while self._capacity <= slot:
                self._capacity *= 2
            grown = torch.zeros(self._capacity)
            grown[: self.slot_scaling.shape[0]] = self.slot_scaling
            self.slot_scaling = grown
        return slot

    def slot_of(self, name: str | None) -> int:
        """Bank slot of an inference adapter (-1 for the base and trainable adapters): the row order that lets a
        batch of k rows per adapter run as one bmm over consecutive slots."""
        return self._slots.get(name, -1) if name is not None else -1

    def _factors_from_weights(self, name: str, weights: dict[str, torch.Tensor],
                              rank: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        pairs: dict[str, dict[str, torch.Tensor]] = {}
        for key, tensor in weights.items():
            m = re.match(r"^(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[^.]+)?\.weight$", key)
            if not m:
                continue
            pairs.setdefault(m.group(1), {})[m.group(2)] = tensor
        if not pairs:
            raise LoraError(f"adapter {name!r} has no lora_A/lora_B weights (expected PEFT keys "
                            f"'{PEFT_PREFIX}<module>.lora_A.weight')")
        out = {}
        for module_name, ab in sorted(pairs.items()):
            if module_name not in self.layers:
                raise LoraError(f"adapter {name!r} targets {module_name!r}, which is not a LoRA target of this "
                                f"model (targets: {self.target_modules})")
            if set(ab) != {"A", "B"}:
                missing = sorted({"A", "B"} - set(ab))
                raise LoraError(f"adapter {name!r}: module {module_name!r} lacks lora_{missing[0]}")
            layer = self.layers[module_name]
            a, b = ab["A"], ab["B"]
            if tuple(a.shape) != (rank, layer.in_features) or tuple(b.shape) != (layer.out_features, rank):
                raise LoraError(f"adapter {name!r}: {module_name} has A {tuple(a.shape)} and B {tuple(b.shape)}, "
                                f"expected ({rank}, {layer.in_features}) and ({layer.out_features}, {rank})")
            out[module_name] = (a, b)
        return out

    def remove_adapter(self, name: str) -> None:
        if name not in self._configs:
            raise LoraError(f"adapter {name!r} is not loaded (loaded: {self.adapter_names()})")
        slot = self._slots.pop(name, None)
        for layer in self.layers.values():
            layer.factors.pop(name, None)
            if slot is not None:
                layer.clear_slot(slot)
        del self._configs[name]
        self._trainable.pop(name, None)
        self._invalidate_banks()

    def adapter_names(self) -> list[str]:
        return sorted(self._configs)

    def slot_names(self) -> list[str]:
        """Adapters in bank-slot order (slot i+1 = slot_names()[i]); the gather mode indexes banks by it."""
        return list(self._configs)

    def _invalidate_banks(self) -> None:
        for layer in self.layers.values():
            layer.invalidate_bank()

    def config_of(self, name: str) -> dict:
        return dict(self._configs[name])

    def parameters_of(self, name: str) -> list[nn.Parameter]:
        """That adapter's A/B in module order (A, B, A, B, ...); Parameters with requires_grad if trainable."""
        if name not in self._configs:
            raise LoraError(f"adapter {name!r} is not loaded (loaded: {self.adapter_names()})")
        if name in self._trainable:
            return list(self._trainable[name])
        out = []
        for layer in self.layers.values():
            f = layer.factors.get(name)
            if f is not None:
                out.extend([f.a, f.b])
        return out

    def state_dict_of(self, name: str) -> dict[str, torch.Tensor]:
        """PEFT keys (base_model.model.<module>.lora_A.weight / lora_B.weight) on CPU, ready for ArtifactStore.save."""
        if name not in self._configs:
            raise LoraError(f"adapter {name!r} is not loaded (loaded: {self.adapter_names()})")
        out = {}
        for module_name, layer in self.layers.items():
            f = layer.factors.get(name)
            if f is not None:
                key_a, key_b = lora_keys(module_name)
                out[key_a] = f.a.detach().to("cpu").clone().contiguous()
                out[key_b] = f.b.detach().to("cpu").clone().contiguous()
        return out

    # ---- rows
    def current_plan(self) -> RowPlan | None:
        return getattr(self._state, "plan", None)

    @contextmanager
    def restore_plan(self, plan: RowPlan | None) -> Iterator[None]:
        """Inside, this thread's forwards use `plan` (a `current_plan()` taken earlier): a layer run again in the
        backward pass (activation checkpointing) uses the rows its first run used."""
        previous = self.current_plan()
        self._state.plan = plan
        try:
            yield
        finally:
            self._state.plan = previous

    @contextmanager
    def use_rows(self, names: Sequence[str | None]) -> Iterator[RowPlan]:
        """Row b of the forwards inside uses adapter names[b] (None = the base). Per thread; nests."""
        unknown = sorted({n for n in names if n is not None and n not in self._configs})
        if unknown:
            raise LoraError(f"adapter(s) {unknown} are not loaded (loaded: {self.adapter_names()})")
        weight = next(iter(self.layers.values())).base.weight
        device = weight.device
        plan = plan_rows(names, device)
        plan.uniform = uniform_rows(plan, self._slots)
        if plan.uniform is None and not torch.is_grad_enabled():
            plan.span = span_rows(plan, self._slots, self.slot_scaling, device, weight.dtype)
        if self.mode == "gather":
            slots = {n: i for i, n in enumerate(self.slot_names(), start=1)}
            plan.gather_index = torch.tensor([slots[n] if n is not None else 0 for n in names], device=device)
        previous = self.current_plan()
        self._state.plan = plan
        try:
            yield plan
        finally:
            self._state.plan = previous

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, past_key_values=None,
                adapter_names: Sequence[str | None] | None = None, **kw):
        """The base model's forward; with `adapter_names` (one per row) the rows use those adapters.

        `past_key_values` is the KV cache (a transformers Cache, updated in place); passed on under the name the
        installed transformers uses (`cache` from 5.20, `past_key_values` before).
        """
        if past_key_values is not None:
            kw[cache_kwarg(self.model)] = past_key_values
        if adapter_names is None:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kw)
        if len(adapter_names) != input_ids.shape[0]:
            raise LoraError(f"adapter_names has {len(adapter_names)} entries for a batch of {input_ids.shape[0]}")
        with self.use_rows(adapter_names):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kw)


def random_lora_weights(base_model: nn.Module, target_modules: list[str], rank: int, seed: int,
                        std: float = 0.02) -> dict[str, torch.Tensor]:
    """Random A and B (both nonzero, unlike a fresh PEFT adapter) in PEFT keys: for tests and benchmarks."""
    gen = torch.Generator().manual_seed(seed)
    suffixes = set(target_modules)
    out = {}
    for name, module in base_model.named_modules():
        if isinstance(module, (nn.Linear, MultiLoraLinear)) and name.rsplit(".", 1)[-1] in suffixes:
            d_in, d_out = module.in_features, module.out_features
            key_a, key_b = lora_keys(name)
            out[key_a] = torch.randn(rank, d_in, generator=gen) * std
            out[key_b] = torch.randn(d_out, rank, generator=gen) * std
    return out
