"""Row plans: which rows of a batch go to which adapter, and which batched path a layer can run them on.

A plan is made once per batch (`MultiLoraModel.use_rows`) and read by every LoRA layer of the pass: contiguous
slices or index groups per adapter, and, without gradients, the batched shapes over the slot banks (`uniform`: equal
runs on consecutive slots; `SpanPlan`: uneven runs in slot order, for a decode step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

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
    uniform: tuple[int, int, int, int] | None = None  # (first row, end row, first slot, adapters): see `uniform_rows`
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


def uniform_rows(plan: RowPlan, slots_of: Mapping[str, int]) -> tuple[int, int, int, int] | None:
    """(first row, end row, first slot, N) when the adapter rows are N equal runs on consecutive slots."""
    if not plan.slices:
        return None
    sizes = {e - s for _, s, e in plan.slices}
    slots = [slots_of.get(n) for n, _, _ in plan.slices]
    if len(sizes) != 1 or None in slots or slots != list(range(slots[0], slots[0] + len(slots))):
        return None
    if plan.slices[-1][2] - plan.slices[0][1] != sizes.pop() * len(slots):  # base rows in between
        return None
    return plan.slices[0][1], plan.slices[-1][2], slots[0], len(slots)


def span_rows(plan: RowPlan, slots_of: Mapping[str, int], slot_scaling: torch.Tensor, device: torch.device,
              dtype: torch.dtype) -> SpanPlan | None:
    """A SpanPlan when the adapter rows are contiguous, of inference adapters, in ascending slot order."""
    if not plan.slices:
        return None
    slots = [slots_of.get(n) for n, _, _ in plan.slices]
    if None in slots or any(b <= a for a, b in zip(slots, slots[1:])):
        return None
    if any(nxt[1] != prev[2] for prev, nxt in zip(plan.slices, plan.slices[1:])):  # base rows in between
        return None
    first, n_slots = slots[0], slots[-1] - slots[0] + 1
    counts = [0] * n_slots
    for (_, s, e), slot in zip(plan.slices, slots):
        counts[slot - first] = e - s
    start, end = plan.slices[0][1], plan.slices[-1][2]
    scaling = slot_scaling[first:first + n_slots]
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
