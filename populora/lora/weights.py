"""An adapter's weights as PEFT saves them: their key names, their scaling, and one layer's factors in memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

PEFT_PREFIX = "base_model.model."


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


class LoraConfigured:
    """Base of anything that holds an adapter's adapter_config.json dict as `config`: its rank and scaling."""

    config: dict[str, Any]

    @property
    def rank(self) -> int:
        return int(self.config["r"])

    @property
    def scaling(self) -> float:
        """The factor of B A^T in the layer's update (`lora_scaling`)."""
        return lora_scaling(self.config)


@dataclass
class LoraFactors:
    """One adapter's factors at one layer: A (r x d_in), B (d_out x r), scaling s."""

    a: torch.Tensor
    b: torch.Tensor
    scaling: float
    slot: int | None = None  # bank slot of an inference adapter; None for a trainable one (own Parameters)
