"""One LoRA layer: a frozen nn.Linear, the slot banks of its inference adapters, and the choice of forward path.

Inference adapters live in slot banks, one slot per adapter, pre-transposed for bmm: A^T (C, d_in, R) and
B^T (C, R, d_out), R = the model's max rank (a smaller rank is zero-padded, which leaves B A unchanged). Their
`LoraFactors` are views of the banks. Trainable adapters hold their own Parameters. The row plan of the pass comes
from the owner (`populora.lora.model.MultiLoraModel`); the paths themselves are in `populora.lora.paths`.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

import populora.lora.paths as paths
from populora.lora.rows import RowPlan
from populora.lora.weights import LoraFactors


class LayerOwner(Protocol):
    """What a layer reads from the model that wraps it: the pass's row plan and the slots' layout."""

    mode: str
    max_rank: int
    slot_scaling: torch.Tensor

    def current_plan(self) -> RowPlan | None: ...

    def slot_names(self) -> list[str]: ...


class MultiLoraLinear(nn.Module):
    """A frozen nn.Linear plus any number of LoRA adapters, chosen per batch row by the owner's RowPlan."""

    def __init__(self, base: nn.Linear, owner: LayerOwner, module_name: str):
        super().__init__()
        self.base = base
        self.module_name = module_name
        self.factors: dict[str, LoraFactors] = {}
        self._owner = [owner]  # a list, so the owner is not registered as a submodule (no cycle)
        self._banks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        # Inference adapters live in slot banks, pre-transposed for bmm: A^T (C, d_in, R), B^T (C, R, d_out).
        self.bank_at: torch.Tensor | None = None
        self.bank_bt: torch.Tensor | None = None
        self.packed = None  # the base weight packed for oneDNN (populora.lora.prepack): passes without gradients
        self.low: torch.Tensor | None = None  # the base weight in bfloat16 for every pass (model.base_matmul)

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
        if self.packed is not None and not torch.is_grad_enabled():
            y = self.packed(x)  # (B, ..., d_out): the shared base matmul
        elif self.low is not None:  # products in the low dtype, accumulated in float32, the rest in x's dtype
            y = torch.nn.functional.linear(x.to(self.low.dtype), self.low).to(x.dtype)
            if self.base.bias is not None:
                y = y + self.base.bias
        else:
            y = self.base(x)
        owner = self._owner[0]
        plan = owner.current_plan()
        if plan is None or not self.factors:
            return y
        if owner.mode == "gather" and plan.gather_index is not None:
            return paths.gather(x, y, self.bank(), plan.gather_index)
        if not torch.is_grad_enabled() and self.bank_at is not None:  # no bank: no inference adapter covers it
            if plan.uniform is not None:
                return paths.uniform(x, y, self.bank_at, self.bank_bt, owner.slot_scaling, plan.uniform)
            span = plan.span
            if span is not None and x.dim() == 3 and x.shape[1] == 1:
                path = paths.padded if span.kind == "padded" else paths.grouped
                return path(x, y, self.bank_at, self.bank_bt, span)
        if plan.slices is not None:
            return paths.slices(x, y, self.factors, plan.slices)
        return paths.groups(x, y, self.factors, plan.groups)

    # ---- slot banks
    def put_slot(self, slot: int, capacity: int, name: str, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        """Store an inference adapter's factors in bank slot `slot`; its LoraFactors are views of the bank."""
        if self.bank_at is None or self.bank_at.shape[0] < capacity:
            self.grow(capacity)
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

    def grow(self, capacity: int) -> None:
        """Banks of `capacity` slots, the filled slots copied over and their factors re-pointed at the new banks."""
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

    # ---- the gather mode's stacked banks
    def invalidate_bank(self) -> None:
        """Forget the stacked banks: the adapters changed."""
        self._banks = None

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
