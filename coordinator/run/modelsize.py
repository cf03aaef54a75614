"""N of spec 14: how many parameters a forward pass of the run's model touches, the base model's and an adapter's;
and the shapes its useful executed FLOPs are counted from (populora/analysis/work.py).

Counted on PyTorch's meta device from the model's config.json, so no weights are read: the coordinator needs the
count to charge compute (coordinator/run/phases/accounting.py) without loading the model the services already hold.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from populora.analysis.flops import lora_parameters, model_parameters
from populora.analysis.work import Shapes
from populora.config import Config


@dataclass(frozen=True)
class ModelSize:
    """The base model's parameters and one adapter's (rank run.lora.rank on every target module)."""

    base: int
    adapter: int
    rank: int = 0  # the rank `adapter` counts; 0 = unknown (no per-rank counts)

    @property
    def with_adapter(self) -> int:
        """N while an adapter is in use (spec 14: the base's parameters plus the adapter's)."""
        return model_parameters(self.base, self.adapter)

    def with_rank(self, rank: int) -> int:
        """N while an adapter of `rank` is in use: a LoRA adapter's parameters are r·Σ(d_in + d_out), so they scale
        with its rank (spec 9, "Mixed ranks": each member is charged its own)."""
        if rank == self.rank or not self.rank:
            return self.with_adapter
        return model_parameters(self.base, self.adapter // self.rank * rank)


@functools.lru_cache(maxsize=8)
def _count(name: str, cache: str, rank: int, targets: tuple[str, ...]) -> ModelSize:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from populora.models import resolve_model_dir

    config = AutoConfig.from_pretrained(resolve_model_dir(name, cache))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    base = sum(p.numel() for p in model.parameters())  # parameters() yields a tied embedding once
    shapes = [(m.out_features, m.in_features) for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in targets]
    return ModelSize(base=int(base), adapter=lora_parameters(rank, shapes) if shapes else 0, rank=rank)


def model_size(cfg: Config) -> ModelSize:
    """The run's N: base parameters and those of one adapter of rank `lora.rank` on `lora.target_modules`."""
    return _count(cfg.model.name, cfg.model.cache_dir, cfg.lora.rank, tuple(cfg.lora.target_modules))


@functools.lru_cache(maxsize=8)
def _shapes(name: str, cache: str, rank: int, targets: tuple[str, ...]) -> Shapes:
    from transformers import AutoConfig

    from populora.models import resolve_model_dir

    return Shapes.of(AutoConfig.from_pretrained(resolve_model_dir(name, cache)), rank, targets)


def model_shapes(cfg: Config) -> Shapes:
    """The run's model's shapes with an adapter of rank `lora.rank` on `lora.target_modules` (the useful executed
    FLOPs' counter, populora/analysis/work.py)."""
    return _shapes(cfg.model.name, cfg.model.cache_dir, cfg.lora.rank, tuple(cfg.lora.target_modules))
