"""The base's linear weights laid out once for oneDNN's matmul, for passes without gradients on a CPU in float32.

A decode step multiplies a few rows by every weight of the model. PyTorch's default CPU matmul for an fp32
`nn.Linear` (MKL's sgemm) re-reads the weight in its own layout on every call and picks its kernel by the row count,
and between a few and about 20 rows it runs far below the core's speed: on SmolLM2-135M (one AVX-512 core) the
211 matmuls of a step (its real weights) took 124 ms for 12 rows and 113 ms for 24, and the LM head alone 35 ms for 12 rows against
22 ms for 24. The same products on weights re-laid out once for oneDNN (`torch.ops.mkldnn._reorder_linear_weight`,
then `_linear_pointwise`, the ops torch's own CPU compiler emits for a frozen linear) took 62 and 83 ms, the head
11 and 15 ms, and the prompt pass's large row counts were no slower (`bench.inference`, `bench.scale` measure the
whole step). The packed weight is an opaque oneDNN tensor of the same size.

With model.base_matmul=bfloat16 the projections are packed in bfloat16 instead (half the bytes a decode step reads,
and about twice the float32 peak where the cores multiply bfloat16 natively), the LM head stays float32, and passes
with gradients multiply a bfloat16 copy of each weight (`lower`); docs/performance.md measures what it moves.

The ops are torch's private CPU ops: `pack` checks that they exist and that a packed product equals `F.linear` on
a probe before any weight is packed, and packs nothing otherwise (the model then runs as before). A pass with
gradients (the trainer) takes the module's own weight, or its bfloat16 copy. A packed or bfloat16 copy does not
follow later edits of the module's weight: code that edits a base's weights in place builds its backend with
`prepack=False` and the native products.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

log = logging.getLogger(__name__)

# The row count oneDNN chooses the packed layout for: decode steps of a few to a few dozen rows. Measured on
# SmolLM2's shapes, a hint of 16 or 32 gave the same times from 6 to 48 rows; a hint of 1 was as slow as MKL at 24.
ROWS_HINT = 16


class PackedLinear:
    """y = x W^T + b with W in oneDNN's packed layout; x (..., d_in) -> (..., d_out). No gradients.

    With `dtype` bfloat16 (model.base_matmul): W is packed in bfloat16, x is rounded to bfloat16 for the product
    (oneDNN accumulates in float32), and y comes back in x's dtype, the bias added there."""

    def __init__(self, linear: nn.Linear, dtype: torch.dtype = torch.float32):
        weight = linear.weight.detach()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.dtype = dtype
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.to(dtype), ROWS_HINT)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.dtype:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        y = torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), self.weight, None, "none", [], "").to(x.dtype)
        return y if self.bias is None else y + self.bias


def supported(weight: torch.Tensor, dtype: torch.dtype = torch.float32) -> str | None:
    """Why `weight` cannot be packed here for products in `dtype` (None: it can): only a float32 base on a CPU with
    oneDNN, whose packed product agrees with F.linear (in bfloat16: where the cores multiply it natively, within
    bfloat16's rounding)."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return f"the base is {weight.dtype} on {weight.device.type} (packing is for float32 on a CPU)"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return "this torch build lacks oneDNN's packed linear ops"
    if dtype == torch.bfloat16 and not bfloat16_native():
        return "these cores have no native bfloat16 product (AVX-512 BF16 or AMX)"
    try:
        probe = nn.Linear(96, 80)
        x = torch.randn(3, 5, 96, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            want = probe(x)
            got = PackedLinear(probe, dtype)(x)
    except RuntimeError as e:
        return f"oneDNN's packed linear failed on a probe: {e}"
    tol = (1e-4, 1e-5) if dtype == torch.float32 else (3e-2, 3e-2)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=tol[0], atol=tol[1]):
        return "oneDNN's packed linear disagreed with F.linear on a probe"
    return None


def bfloat16_native() -> bool:
    """Whether these cores multiply bfloat16 natively (oneDNN says so: AVX-512 BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def lower(layers: Iterable, dtype: torch.dtype) -> PackStats:
    """Give every `MultiLoraLinear` in `layers` a `dtype` copy of its base weight (`layer.low`), which its products
    use in passes with gradients too (model.base_matmul); nothing where the cores lack a native product in it."""
    layers = list(layers)
    stats = PackStats()
    if dtype == torch.bfloat16 and not bfloat16_native():
        stats.skipped = "these cores have no native bfloat16 product (AVX-512 BF16 or AMX)"
        log.warning("model.base_matmul=bfloat16 ignored: %s", stats.skipped)
        return stats
    for layer in layers:
        if layer.base.weight.dtype != dtype:
            layer.low = layer.base.weight.detach().to(dtype)
            stats.packed += 1
    return stats


@dataclass
class PackStats:
    """What `pack` did: modules packed (none: `skipped` says why)."""

    packed: int = 0
    skipped: str | None = None


def pack(layers: Iterable, head: nn.Linear | None = None, dtype: torch.dtype = torch.float32) -> PackStats:
    """Pack the base weight of every `MultiLoraLinear` in `layers` (`layer.packed`), in `dtype` (bfloat16: the
    products of model.base_matmul), and the LM head `head` (its forward, when no gradients are on), in float32
    whatever `dtype`: the logits that sampling reads keep their precision. Packs nothing when `supported` says no.

    The module's own weights stay: a pass with gradients needs them, and they are the loaded model's, which keeps
    its weight files mapped (freeing the tensors gave no memory back). The packed copy is the cost: for
    SmolLM2-135M in float32 about 540 MB more per inference process (the projections 425 MB, the LM head 113 MB);
    `generation.prepack_weights: false` keeps the plain path."""
    layers = list(layers)
    first = layers[0].base.weight if layers else (head.weight if head is not None else None)
    stats = PackStats()
    if first is None:
        return stats
    stats.skipped = supported(first, dtype)
    if stats.skipped is not None:
        log.info("base weights not packed: %s", stats.skipped)
        return stats
    for layer in layers:
        layer.packed = PackedLinear(layer.base, dtype)
        stats.packed += 1
    if isinstance(head, nn.Linear) and not getattr(head, "packed", None):
        head.packed = PackedLinear(head)
        own = head.forward  # the class's, or one a library set on the instance

        def forward(x: torch.Tensor) -> torch.Tensor:
            return own(x) if torch.is_grad_enabled() else head.packed(x)

        head.forward = forward  # on the instance: the HF model calls self.lm_head(...) with no way in otherwise
        stats.packed += 1
    return stats

