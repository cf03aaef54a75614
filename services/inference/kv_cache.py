"""The decoder's KV cache: each layer's keys and values in a slab filled in place, merged from the prompt groups."""

from __future__ import annotations

import torch

# The cache grows in place by this many tokens at a time (each step writes one), not by one concatenation per step.
CACHE_GROWTH = 32


try:  # transformers with per-layer caches (>= 4.56)
    from transformers.cache_utils import DynamicLayer as _CacheLayer
except ImportError:  # older: no slab, transformers' own cache (see mergeable)
    _CacheLayer = object


class SlabLayer(_CacheLayer):
    """One layer's keys and values in a preallocated slab (rows, heads, capacity, head_dim) that decoding fills in
    place; `keys` / `values` are views of the filled part. Transformers' DynamicLayer, which it replaces, concatenates
    the whole cache at every step (for 128 rows of SmolLM2, 1.5 GB copied per token)."""

    is_sliding = False
    is_croppable = False

    def __init__(self, k_slab: torch.Tensor, v_slab: torch.Tensor, filled: int, limit: int):
        super().__init__()
        self.k_slab, self.v_slab, self.filled, self.limit = k_slab, v_slab, filled, limit
        self.is_initialized = True
        self.device = k_slab.device
        self._views()

    def _views(self) -> None:
        self.keys = self.k_slab[:, :, :self.filled]
        self.values = self.v_slab[:, :, :self.filled]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self.filled + n > self.k_slab.shape[2]:
            grow = max(n, min(CACHE_GROWTH, max(self.limit - self.filled, n)))
            self.k_slab = torch.cat([self.k_slab, self.k_slab.new_zeros(*self.k_slab.shape[:2], grow,
                                                                         self.k_slab.shape[3])], dim=2)
            self.v_slab = torch.cat([self.v_slab, self.v_slab.new_zeros(*self.v_slab.shape[:2], grow,
                                                                         self.v_slab.shape[3])], dim=2)
        self.k_slab[:, :, self.filled:self.filled + n] = key_states
        self.v_slab[:, :, self.filled:self.filled + n] = value_states
        self.filled += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.filled + query_length, 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.k_slab = self.k_slab[indices]
        self.v_slab = self.v_slab[indices]
        self._views()


def mergeable(cache) -> bool:
    """Whether a prompt group's cache is made of transformers' plain DynamicLayers (full attention), which a slab
    can replace."""
    if _CacheLayer is object:  # transformers before per-layer caches
        return False
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is _CacheLayer and layer.keys is not None and layer.keys.dim() == 4
                                for layer in layers)


def slab_cache(groups: list[tuple[list[int], object]], rows: int, width: int, extra: int):
    """One DynamicCache of SlabLayers for `rows` rows, left-padded to `width`, from the caches of the prompt groups
    (row indices, the group's DynamicCache); None when a group's cache is not made of plain DynamicLayers (sliding
    windows and other layer kinds keep transformers' own cache)."""
    from transformers import DynamicCache

    if not all(mergeable(c) for _, c in groups):
        return None
    first = groups[0][1].layers
    slabs = []
    for li, layer in enumerate(first):
        k0 = layer.keys
        cap = width + min(extra, CACHE_GROWTH)
        k_slab = k0.new_zeros(rows, k0.shape[1], cap, k0.shape[3])
        v_slab = layer.values.new_zeros(rows, layer.values.shape[1], cap, layer.values.shape[3])
        for idx, c in groups:
            k, v = c.layers[li].keys, c.layers[li].values
            at = torch.tensor(idx, device=k.device)
            k_slab[at, :, width - k.shape[2]:width] = k
            v_slab[at, :, width - v.shape[2]:width] = v
        slabs.append(SlabLayer(k_slab, v_slab, width, width + extra))
    cache = DynamicCache()
    cache.layers = slabs
    return cache
