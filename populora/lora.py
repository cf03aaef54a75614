"""Batched multi-adapter LoRA: many adapters on one frozen base, each batch row served by its own adapter.

Every target `nn.Linear` W of the base is wrapped so that row b of a batch computes

    y_b = W x_b + s_a * B_a (A_a x_b),        a = adapter of row b, s_a = alpha_a / r_a  (rsLoRA: alpha_a / sqrt r_a)

with A_a (r x d_in) and B_a (d_out x r) in PEFT's layout (spec/ALGORITHMS.md section 1: rank-32 LoRA on all
attention and MLP projections; section 9 writes the same update as delta_w = s B A). Rows of the base (adapter
None) get y_b = W x_b. The base matmul is shared by all rows; only the rank-r path is per adapter.

Two ways to run the per-adapter path (both exact, both differentiable):
- `segments` (default): rows grouped by adapter. When the batch is sorted by adapter (the inference engine sorts
  it) each group is a contiguous slice and costs two small matmuls on views, no copies; otherwise rows are
  gathered with index_select and scattered back with index_add.
  Without gradients, rows of inference adapters in bank-slot order run as batched matmuls over views of the
  slot banks instead of a pair of matmuls per adapter: always when every adapter has the same number of rows on
  consecutive slots (`_uniform`, no copies), and in a decode step (one token per row) when the counts are uneven
  (`SpanPlan`: padded to the largest count when that adds few rows, else torch's grouped matmul over the jagged
  counts). On CPU a small matmul costs about as much for 1 row as for 8, so per-adapter pairs dominate decode.
- `gather`: each row's A and B gathered from stacked banks, one batched matmul (bmm) for all rows.
`bench/inference.py` measures both against PEFT's `adapter_names` loop; segments is faster on CPU.

Gradients of a mixed batch reach adapter a's A_a/B_a only through its own rows, since the other rows never touch
them; `tests/test_lora.py` checks they equal per-adapter passes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

PEFT_PREFIX = "base_model.model."
MODES = ("segments", "gather")
# A decode step pads uneven rows per slot into one bmm when that adds at most this many rows per slot; more padding
# costs more than the per-adapter matmuls it saves (measured with SmolLM2's shapes on a 2-core CPU, fp32).
PAD_ROWS_PER_SLOT = 8
_GROUPED_MM: dict[tuple[str, torch.dtype], bool] = {}


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch's grouped matmul (jagged rows x one weight per group) runs and is right on this device and
    dtype: its CUDA kernels need recent GPUs and bfloat16, the CPU has a fallback. Probed once per (device, dtype)
    on a small case with an empty group."""
    key = (torch.device(device).type, dtype)
    if key not in _GROUPED_MM:
        try:
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(24, 64, generator=gen).to(device=device, dtype=dtype)
            w = torch.randn(3, 64, 32, generator=gen).to(device=device, dtype=dtype)
            offs = torch.tensor([8, 8, 24], dtype=torch.int32, device=device)
            got = torch.nn.functional.grouped_mm(x, w, offs=offs).float()
            want = torch.cat([x[:8] @ w[0], x[8:] @ w[2]]).float()
            _GROUPED_MM[key] = got.shape == want.shape and bool(torch.allclose(got, want, rtol=2e-2, atol=0.5))
        except (AttributeError, RuntimeError, NotImplementedError, TypeError, ValueError):
            _GROUPED_MM[key] = False
    return _GROUPED_MM[key]


def cache_kwarg(model: nn.Module) -> str:
    """The name of the KV-cache argument of a HF causal LM's forward (`cache` in transformers >= 5.20)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class LoraError(ValueError):
    """An adapter that does not fit the model (unknown module, wrong shape, rank too large, unknown name)."""


def lora_keys(module: str) -> tuple[str, str]:
    """PEFT's weight names (lora_A, lora_B) of one module of a saved adapter: the one place they are spelled."""
    return f"{PEFT_PREFIX}{module}.lora_A.weight", f"{PEFT_PREFIX}{module}.lora_B.weight"


def lora_scaling(config: dict) -> float:
    """s = lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA (PEFT's definition)."""
    r = int(config["r"])
    alpha = float(config.get("lora_alpha", r))
    return alpha / (r ** 0.5) if config.get("use_rslora") else alpha / r


@dataclass
class LoraFactors:
    """One adapter's factors at one layer: A (r x d_in), B (d_out x r), scaling s."""

    a: torch.Tensor
    b: torch.Tensor
    scaling: float
    slot: int | None = None  # bank slot of an inference adapter; None for a trainable one (own Parameters)


@dataclass
class SpanPlan:
    """Rows start..end belong to inference adapters in ascending bank-slot order, slots first..first+slots-1 (some
    possibly without rows): a decode step runs them as two batched matmuls over views of the banks.

    `padded`: each slot's rows padded to k rows, `index` = padded position of each row (copies of x and of the
    delta, both one token per row). `grouped`: no padding, `offs` = int32 end row of each slot's group.
    `scale`: the slots' scalings, (slots, 1, 1) for padded, one per row (rows, 1) for grouped."""

    start: int
    end: int
    first: int
    slots: int
    kind: str  # "padded" or "grouped"
    scale: torch.Tensor
    k: int = 0
    index: torch.Tensor | None = None
    offs: torch.Tensor | None = None


@dataclass
class RowPlan:
    """Which rows of the current batch go to which adapter.

    `slices`: (name, start, end) when each adapter's rows are contiguous; else `groups`: (name, row index tensor).
    `row_names` keeps the per-row list for the gather mode.
    """

    row_names: list[str | None]
    slices: list[tuple[str, int, int]] | None = None
    groups: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    gather_index: torch.Tensor | None = None  # (B,) bank slot per row, 0 = base; gather mode only
    uniform: tuple[int, int, int, int] | None = None  # (first row, end row, first slot, adapters): see `_uniform`
    span: SpanPlan | None = None  # uneven rows in slot order, for a decode step


def plan_rows(names: Sequence[str | None], device: torch.device) -> RowPlan:
    """Group rows by adapter: contiguous slices when possible, index groups otherwise. Base rows are skipped."""
    names = list(names)
    runs: list[tuple[str | None, int, int]] = []
    for i, name in enumerate(names):
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], i + 1)
        else:
            runs.append((name, i, i + 1))
    adapters = [r[0] for r in runs if r[0] is not None]
    if len(adapters) == len(set(adapters)):
        return RowPlan(names, slices=[(n, s, e) for n, s, e in runs if n is not None])
    by_name: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        if name is not None:
            by_name.setdefault(name, []).append(i)
    groups = [(n, torch.tensor(rows, dtype=torch.long, device=device)) for n, rows in by_name.items()]
    return RowPlan(names, groups=groups)


class MultiLoraLinear(nn.Module):
    """A frozen nn.Linear plus any number of LoRA adapters, chosen per batch row by the owner's RowPlan."""

    def __init__(self, base: nn.Linear, owner: MultiLoraModel, module_name: str):
        super().__init__()
        self.base = base
        self.module_name = module_name
        self.factors: dict[str, LoraFactors] = {}
        self._owner = [owner]  # a list, so the owner is not registered as a submodule (no cycle)
        self._banks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        # Inference adapters live in slot banks, pre-transposed for bmm: A^T (C, d_in, R), B^T (C, R, d_out).
        self.bank_at: torch.Tensor | None = None
        self.bank_bt: torch.Tensor | None = None

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)  # (B, ..., d_out): the shared base matmul
        plan = self._owner[0].current_plan()
        if plan is None or not self.factors:
            return y
        if self._owner[0].mode == "gather" and plan.gather_index is not None:
            return self._gather(x, y, plan)
        if not torch.is_grad_enabled() and self.bank_at is not None:  # no bank: no inference adapter covers it
            if plan.uniform is not None:
                return self._uniform(x, y, plan.uniform)
            span = plan.span
            if span is not None and x.dim() == 3 and x.shape[1] == 1:
                return self._padded(x, y, span) if span.kind == "padded" else self._grouped(x, y, span)
        if plan.slices is not None:
            return self._slices(x, y, plan.slices)
        return self._groups(x, y, plan.groups)

    def _delta(self, x: torch.Tensor, f: LoraFactors) -> torch.Tensor:
        # (n, ..., d_in) -> (n, ..., r) -> (n, ..., d_out)
        return (x @ f.a.t()) @ f.b.t() * f.scaling

    def _slices(self, x: torch.Tensor, y: torch.Tensor, slices: list[tuple[str, int, int]]) -> torch.Tensor:
        if torch.is_grad_enabled():
            parts, last = [], 0
            for name, s, e in slices:
                if s > last:
                    parts.append(torch.zeros_like(y[last:s]))
                f = self.factors.get(name)
                parts.append(self._delta(x[s:e], f) if f is not None else torch.zeros_like(y[s:e]))
                last = e
            if last < y.shape[0]:
                parts.append(torch.zeros_like(y[last:]))
            return y + torch.cat(parts, dim=0)
        d_in, d_out = x.shape[-1], y.shape[-1]
        for name, s, e in slices:
            f = self.factors.get(name)
            if f is None:  # a loaded adapter that does not cover this module: its rows keep the base
                continue
            xs = x[s:e].reshape(-1, d_in)  # (n*T, d_in), a view when x is contiguous
            h = xs @ f.a.t()  # (n*T, r)
            y[s:e].view(-1, d_out).addmm_(h, f.b.t(), alpha=f.scaling)  # y += s * h B^T, in place on the view
        return y

    def _uniform(self, x: torch.Tensor, y: torch.Tensor, uniform: tuple[int, int, int, int]) -> torch.Tensor:
        """Rows start..end are N adapters x k rows each, in the order of N consecutive bank slots: two bmm on
        views of the banks and of the batch, no copies (the common case: every adapter asked for k rows)."""
        start, end, slot, n = uniform
        owner = self._owner[0]
        xs = x[start:end].reshape(n, -1, x.shape[-1])  # (N, k*T, d_in)
        h = torch.bmm(xs, self.bank_at[slot:slot + n])  # (N, k*T, R)
        h.mul_(owner.slot_scaling[slot:slot + n].view(n, 1, 1).to(device=h.device, dtype=h.dtype))
        y[start:end].view(n, -1, y.shape[-1]).baddbmm_(h, self.bank_bt[slot:slot + n])  # y += s B A x
        return y

    def _padded(self, x: torch.Tensor, y: torch.Tensor, span: SpanPlan) -> torch.Tensor:
        """One token per row, uneven rows per slot: rows copied into (slots, k) padded blocks, two bmm on views of
        the banks, each row's delta picked back out. Padding rows are zeros and their outputs are dropped."""
        d_in, d_out = x.shape[-1], y.shape[-1]
        rows = span.end - span.start
        xp = x.new_zeros(span.slots * span.k, d_in)
        xp.index_copy_(0, span.index, x[span.start:span.end].reshape(rows, d_in))
        h = torch.bmm(xp.view(span.slots, span.k, d_in), self.bank_at[span.first:span.first + span.slots])
        h.mul_(span.scale)
        delta = torch.bmm(h, self.bank_bt[span.first:span.first + span.slots])  # (slots, k, d_out)
        y[span.start:span.end].view(rows, d_out).add_(delta.view(-1, d_out).index_select(0, span.index))
        return y

    def _grouped(self, x: torch.Tensor, y: torch.Tensor, span: SpanPlan) -> torch.Tensor:
        """One token per row, uneven rows per slot: torch's grouped matmul over the jagged row counts, no padding."""
        d_in, d_out = x.shape[-1], y.shape[-1]
        rows = span.end - span.start
        xs = x[span.start:span.end].reshape(rows, d_in)
        h = torch.nn.functional.grouped_mm(xs, self.bank_at[span.first:span.first + span.slots], offs=span.offs)
        h.mul_(span.scale)
        delta = torch.nn.functional.grouped_mm(h, self.bank_bt[span.first:span.first + span.slots], offs=span.offs)
        y[span.start:span.end].view(rows, d_out).add_(delta)
        return y

    def put_slot(self, slot: int, capacity: int, name: str, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        """Store an inference adapter's factors in bank slot `slot`; its LoraFactors are views of the bank."""
        if self.bank_at is None or self.bank_at.shape[0] < capacity:
            self._grow(capacity)
        r = a.shape[0]
        self.bank_at[slot].zero_()
        self.bank_bt[slot].zero_()
        self.bank_at[slot, :, :r].copy_(a.t())
        self.bank_bt[slot, :r, :].copy_(b.t())
        self.factors[name] = LoraFactors(self.bank_at[slot, :, :r].t(), self.bank_bt[slot, :r, :].t(), scaling, slot)

    def clear_slot(self, slot: int) -> None:
        """Zero a freed slot, so an adapter later put there that does not cover this module adds nothing here."""
        if self.bank_at is not None and slot < self.bank_at.shape[0]:
            self.bank_at[slot].zero_()
            self.bank_bt[slot].zero_()

    def _grow(self, capacity: int) -> None:
        w = self.base.weight
        r = self._owner[0].max_rank
        # torch.zeros pages are committed only when written, so unused capacity costs no resident memory.
        at = torch.zeros(capacity, self.in_features, r, dtype=w.dtype, device=w.device)
        bt = torch.zeros(capacity, r, self.out_features, dtype=w.dtype, device=w.device)
        if self.bank_at is not None:
            at[: self.bank_at.shape[0]].copy_(self.bank_at)
            bt[: self.bank_bt.shape[0]].copy_(self.bank_bt)
        self.bank_at, self.bank_bt = at, bt
        for name, f in list(self.factors.items()):
            if f.slot is not None:
                r_a = f.a.shape[0]
                self.factors[name] = LoraFactors(at[f.slot, :, :r_a].t(), bt[f.slot, :r_a, :].t(), f.scaling, f.slot)

    def _groups(self, x: torch.Tensor, y: torch.Tensor, groups: list[tuple[str, torch.Tensor]]) -> torch.Tensor:
        for name, rows in groups:
            f = self.factors.get(name)
            if f is not None:  # uncovered module: the rows keep the base
                y = y.index_add(0, rows, self._delta(x.index_select(0, rows), f))
        return y

    def bank(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Stacked A (S+1, r_max, d_in), B (S+1, d_out, r_max), scaling (S+1,); slot 0 is zeros (the base).

        Adapters of smaller rank are zero-padded to r_max, which leaves B A unchanged. Cached for inference;
        rebuilt (differentiably, uncached) when gradients are on, so trainable factors get their gradients.
        """
        if torch.is_grad_enabled():
            return self._stack()
        if self._banks is None:
            self._banks = self._stack()
        return self._banks

    def _stack(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        names = self._owner[0].slot_names()
        r = self._owner[0].max_rank
        w = self.base.weight
        zero_a = w.new_zeros(r, self.in_features)
        zero_b = w.new_zeros(self.out_features, r)
        a_rows, b_rows, scales = [zero_a], [zero_b], [0.0]
        for name in names:
            f = self.factors.get(name)
            if f is None:
                a_rows.append(zero_a), b_rows.append(zero_b), scales.append(0.0)
                continue
            pad = r - f.a.shape[0]
            a_rows.append(torch.nn.functional.pad(f.a, (0, 0, 0, pad)))
            b_rows.append(torch.nn.functional.pad(f.b, (0, pad)))
            scales.append(f.scaling)
        s = torch.tensor(scales, dtype=w.dtype, device=w.device)
        return torch.stack(a_rows), torch.stack(b_rows), s

    def _gather(self, x: torch.Tensor, y: torch.Tensor, plan: RowPlan) -> torch.Tensor:
        a_bank, b_bank, s_bank = self.bank()
        idx = plan.gather_index
        batch = x.shape[0]
        x3 = x.reshape(batch, -1, x.shape[-1])  # (B, T, d_in)
        h = torch.bmm(x3, a_bank[idx].transpose(1, 2))  # (B, T, r)
        h = h * s_bank[idx].view(-1, 1, 1)
        delta = torch.bmm(h, b_bank[idx].transpose(1, 2))  # (B, T, d_out)
        return y + delta.view_as(y)


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
                    layer._grow(self._capacity)  # modules this adapter does not cover: its slot stays zeros
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
            layer._banks = None

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
        plan.uniform = self._uniform_rows(plan)
        if plan.uniform is None and not torch.is_grad_enabled():
            plan.span = self._span_rows(plan, device, weight.dtype)
        if self.mode == "gather":
            slots = {n: i for i, n in enumerate(self.slot_names(), start=1)}
            plan.gather_index = torch.tensor([slots[n] if n is not None else 0 for n in names], device=device)
        previous = self.current_plan()
        self._state.plan = plan
        try:
            yield plan
        finally:
            self._state.plan = previous

    def _uniform_rows(self, plan: RowPlan) -> tuple[int, int, int, int] | None:
        """(first row, end row, first slot, N) when the adapter rows are N equal runs on consecutive slots."""
        if not plan.slices:
            return None
        sizes = {e - s for _, s, e in plan.slices}
        slots = [self._slots.get(n) for n, _, _ in plan.slices]
        if len(sizes) != 1 or None in slots or slots != list(range(slots[0], slots[0] + len(slots))):
            return None
        if plan.slices[-1][2] - plan.slices[0][1] != sizes.pop() * len(slots):  # base rows in between
            return None
        return plan.slices[0][1], plan.slices[-1][2], slots[0], len(slots)

    def _span_rows(self, plan: RowPlan, device: torch.device, dtype: torch.dtype) -> SpanPlan | None:
        """A SpanPlan when the adapter rows are contiguous, of inference adapters, in ascending slot order."""
        if not plan.slices:
            return None
        slots = [self._slots.get(n) for n, _, _ in plan.slices]
        if None in slots or any(b <= a for a, b in zip(slots, slots[1:])):
            return None
        if any(nxt[1] != prev[2] for prev, nxt in zip(plan.slices, plan.slices[1:])):  # base rows in between
            return None
        first, n_slots = slots[0], slots[-1] - slots[0] + 1
        counts = [0] * n_slots
        for (_, s, e), slot in zip(plan.slices, slots):
            counts[slot - first] = e - s
        start, end = plan.slices[0][1], plan.slices[-1][2]
        scaling = self.slot_scaling[first:first + n_slots]
        k = max(counts)
        if n_slots * k - (end - start) <= PAD_ROWS_PER_SLOT * n_slots:
            index = [i * k + j for i, c in enumerate(counts) for j in range(c)]
            return SpanPlan(start, end, first, n_slots, "padded", scaling.view(-1, 1, 1).to(device, dtype), k=k,
                            index=torch.tensor(index, dtype=torch.long, device=device))
        if not grouped_mm_works(device, dtype):
            return None
        offs = torch.tensor(counts, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        per_row = scaling.repeat_interleave(torch.tensor(counts)).view(-1, 1)
        return SpanPlan(start, end, first, n_slots, "grouped", per_row.to(device, dtype), offs=offs.to(device))

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
