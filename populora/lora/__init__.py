"""Batched multi-adapter LoRA: many adapters on one frozen base, each batch row served by its own adapter.

Every target `nn.Linear` W of the base is wrapped so that row b of a batch computes

    y_b = W x_b + s_a * B_a (A_a x_b),        a = adapter of row b, s_a = alpha_a / r_a  (rsLoRA: alpha_a / sqrt r_a)

with A_a (r x d_in) and B_a (d_out x r) in PEFT's layout (spec 1: rank-32 LoRA on all attention and MLP
projections; spec 9 writes the same update as delta_w = s B A). Rows of the base (adapter
None) get y_b = W x_b. The base matmul is shared by all rows; only the rank-r path is per adapter.

Two ways to run the per-adapter path (both exact, both differentiable):
- `segments` (default): rows grouped by adapter. When the batch is sorted by adapter (the inference engine sorts
  it) each group is a contiguous slice and costs two small matmuls on views, no copies; otherwise rows are
  gathered with index_select and scattered back with index_add.
  Without gradients, rows of inference adapters in bank-slot order run as batched matmuls over views of the
  slot banks instead of a pair of matmuls per adapter: always when every adapter has the same number of rows on
  consecutive slots (`paths.uniform`, no copies), and in a decode step (one token per row) when the counts are uneven
  (`SpanPlan`: padded to the largest count when that adds few rows, else torch's grouped matmul over the jagged
  counts). On CPU a small matmul costs about as much for 1 row as for 8, so per-adapter pairs dominate decode.
- `gather`: each row's A and B gathered from stacked banks, one batched matmul (bmm) for all rows.
`bench/inference.py` measures both against PEFT's `adapter_names` loop; segments is faster on CPU.

Gradients of a mixed batch reach adapter a's A_a/B_a only through its own rows, since the other rows never touch
them; `tests/test_lora.py` checks they equal per-adapter passes.

Modules: `weights` (PEFT keys, scaling, factors), `rows` (row plans), `paths` (the forward paths), `layer` (one
LoRA layer and its slot banks), `model` (`MultiLoraModel`, the wrapper); every public name is importable from here.
"""

from populora.lora.layer import MultiLoraLinear
from populora.lora.model import MODES, MultiLoraModel, cache_kwarg, random_lora_weights
from populora.lora.rows import PAD_ROWS_PER_SLOT, RowPlan, SpanPlan, grouped_mm_works, plan_rows
from populora.lora.weights import PEFT_PREFIX, LoraConfigured, LoraError, LoraFactors, lora_keys, lora_scaling

__all__ = [
    "MODES", "PAD_ROWS_PER_SLOT", "PEFT_PREFIX", "LoraConfigured", "LoraError", "LoraFactors", "MultiLoraLinear", "MultiLoraModel",
    "RowPlan", "SpanPlan", "cache_kwarg", "grouped_mm_works", "lora_keys", "lora_scaling", "plan_rows",
    "random_lora_weights",
]
