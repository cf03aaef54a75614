"""The per-adapter forward paths of a LoRA layer: y += s_a * B_a (A_a x) for the rows of each adapter a.

Each path takes the layer's input x (B, ..., d_in) and its base output y (B, ..., d_out) and returns y with every
adapter row's delta added; all are exact, and they differ only in how they batch the rank-r matmuls
(spec 1). The layer (`populora.lora.layer`) picks one per pass from the row plan:

- `slices` / `groups`: one pair of matmuls per adapter, on contiguous views or on gathered rows (differentiable).
- `uniform`: N adapters x k rows on consecutive bank slots, two bmm over views of the banks, no copies.
- `padded` / `grouped`: a decode step (one token per row) with uneven rows per slot: padded into one bmm, or torch's
  grouped matmul over the jagged counts.
- `gather`: every row's A and B gathered from stacked banks, one bmm for all rows.

The banks hold inference adapters pre-transposed: A^T (C, d_in, R), B^T (C, R, d_out).
"""

from __future__ import annotations

import math

import torch

from populora.lora.rows import SpanPlan
from populora.lora.weights import LoraFactors


def exact_scale(s: float) -> bool:
    """Whether multiplying by `s` is exact in binary floating point (a power of two: it moves the exponent only), so
    it commutes with every rounding of a matmul: (s h) B^T and s (h B^T) are the same bits."""
    return s > 0 and math.frexp(s)[0] == 0.5


def delta(x: torch.Tensor, f: LoraFactors) -> torch.Tensor:
    """s B A x for one adapter's rows. A power-of-two s (alpha = 2r, the presets') scales the r-wide product A x
    instead of the d_out-wide output: the same bits (`exact_scale`), in a pass over r columns instead of d_out, forward
    and backward (an update spent about 5% of its time on that multiply)."""
    h = x @ f.a.t()  # (n, ..., d_in) -> (n, ..., r)
    if exact_scale(f.scaling):
        return (h * f.scaling) @ f.b.t()  # (n, ..., d_out)
    return h @ f.b.t() * f.scaling


def slices(x: torch.Tensor, y: torch.Tensor, factors: dict[str, LoraFactors],
           runs: list[tuple[str, int, int]]) -> torch.Tensor:
    """Each adapter's rows a contiguous slice: with gradients a new y (cat of the deltas), else y added in place."""
    if torch.is_grad_enabled():
        if len(runs) == 1 and runs[0][1] == 0 and runs[0][2] == y.shape[0] and runs[0][0] in factors:
            return y + delta(x, factors[runs[0][0]])  # one adapter's rows only: no zeros to place, nothing to cat
        parts, last = [], 0
        for name, s, e in runs:
            if s > last:
                parts.append(torch.zeros_like(y[last:s]))
            f = factors.get(name)
            parts.append(delta(x[s:e], f) if f is not None else torch.zeros_like(y[s:e]))
            last = e
        if last < y.shape[0]:
            parts.append(torch.zeros_like(y[last:]))
        return y + torch.cat(parts, dim=0)
    d_in, d_out = x.shape[-1], y.shape[-1]
    for name, s, e in runs:
        f = factors.get(name)
        if f is None:  # a loaded adapter that does not cover this module: its rows keep the base
            continue
        xs = x[s:e].reshape(-1, d_in)  # (n*T, d_in), a view when x is contiguous
        h = xs @ f.a.t()  # (n*T, r)
        y[s:e].view(-1, d_out).addmm_(h, f.b.t(), alpha=f.scaling)  # y += s * h B^T, in place on the view
    return y


def groups(x: torch.Tensor, y: torch.Tensor, factors: dict[str, LoraFactors],
           row_groups: list[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """Each adapter's rows an index tensor: gathered with index_select, scattered back with index_add."""
    for name, rows in row_groups:
        f = factors.get(name)
        if f is not None:  # uncovered module: the rows keep the base
            y = y.index_add(0, rows, delta(x.index_select(0, rows), f))
    return y


def uniform(x: torch.Tensor, y: torch.Tensor, bank_at: torch.Tensor, bank_bt: torch.Tensor,
            slot_scaling: torch.Tensor, plan: tuple[int, int, int, int]) -> torch.Tensor:
    """Rows start..end are N adapters x k rows each, in the order of N consecutive bank slots: two bmm on
    views of the banks and of the batch, no copies (the common case: every adapter asked for k rows)."""
    start, end, slot, n = plan
    xs = x[start:end].reshape(n, -1, x.shape[-1])  # (N, k*T, d_in)
    h = torch.bmm(xs, bank_at[slot:slot + n])  # (N, k*T, R)
    h.mul_(slot_scaling[slot:slot + n].view(n, 1, 1).to(device=h.device, dtype=h.dtype))
    y[start:end].view(n, -1, y.shape[-1]).baddbmm_(h, bank_bt[slot:slot + n])  # y += s B A x
    return y


def padded(x: torch.Tensor, y: torch.Tensor, bank_at: torch.Tensor, bank_bt: torch.Tensor,
           span: SpanPlan) -> torch.Tensor:
    """One token per row, uneven rows per slot: rows copied into (slots, k) padded blocks, two bmm on views of
    the banks, each row's delta picked back out. Padding rows are zeros and their outputs are dropped."""
    d_in, d_out = x.shape[-1], y.shape[-1]
    rows = span.end - span.start
    xp = x.new_zeros(span.slots * span.k, d_in)
    xp.index_copy_(0, span.index, x[span.start:span.end].reshape(rows, d_in))
    h = torch.bmm(xp.view(span.slots, span.k, d_in), bank_at[span.first:span.first + span.slots])
    h.mul_(span.scale)
    out = torch.bmm(h, bank_bt[span.first:span.first + span.slots])  # (slots, k, d_out)
    y[span.start:span.end].view(rows, d_out).add_(out.view(-1, d_out).index_select(0, span.index))
    return y


def grouped(x: torch.Tensor, y: torch.Tensor, bank_at: torch.Tensor, bank_bt: torch.Tensor,
            span: SpanPlan) -> torch.Tensor:
    """One token per row, uneven rows per slot: torch's grouped matmul over the jagged row counts, no padding."""
    d_in, d_out = x.shape[-1], y.shape[-1]
    rows = span.end - span.start
    xs = x[span.start:span.end].reshape(rows, d_in)
    h = torch.nn.functional.grouped_mm(xs, bank_at[span.first:span.first + span.slots], offs=span.offs)
    h.mul_(span.scale)
    out = torch.nn.functional.grouped_mm(h, bank_bt[span.first:span.first + span.slots], offs=span.offs)
    y[span.start:span.end].view(rows, d_out).add_(out)
    return y


def gather(x: torch.Tensor, y: torch.Tensor, banks: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
           index: torch.Tensor) -> torch.Tensor:
    """Row b uses bank slot index[b] (0 = the base, zeros) of the stacked A (S+1, r, d_in), B (S+1, d_out, r) and
    scalings (S+1,): one bmm for all rows."""
    a_bank, b_bank, s_bank = banks
    batch = x.shape[0]
    x3 = x.reshape(batch, -1, x.shape[-1])  # (B, T, d_in)
    h = torch.bmm(x3, a_bank[index].transpose(1, 2))  # (B, T, r)
    h = h * s_bank[index].view(-1, 1, 1)
    out = torch.bmm(h, b_bank[index].transpose(1, 2))  # (B, T, d_out)
    return y + out.view_as(y)
