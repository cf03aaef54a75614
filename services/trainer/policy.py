"""Where the trained adapters live on the one frozen base: PEFT (one adapter per pass) or the batched
multi-adapter LoRA layer of `populora.lora` (each row through its own adapter).

Both hold every adapter's A and B as trainable parameters keyed by PEFT's weight names, so optimizer states,
checkpoints and gradients compare across them; the base's weights never require gradients.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod

import torch
from torch import nn

from populora.lora import lora_keys


def peft_init_weights(base_model: nn.Module, target_modules: list[str], rank: int,
                      seed: int) -> dict[str, torch.Tensor]:
    """A fresh adapter as PEFT makes it (init_lora_weights=True): A ~ kaiming_uniform(a=sqrt 5), B = 0, so
    delta_w = s B A^T = 0 and the adapter starts as the base (spec §1, §9 notation). Same seed, same A."""
    gen = torch.Generator().manual_seed(int(seed))
    suffixes = set(target_modules)
    out: dict[str, torch.Tensor] = {}
    for name, module in base_model.named_modules():
        if name.rsplit(".", 1)[-1] not in suffixes or not hasattr(module, "in_features"):
            continue
        d_in, d_out = module.in_features, module.out_features
        # kaiming_uniform_ with a = sqrt(5): bound = sqrt(6 / ((1 + a^2) fan_in)) = 1 / sqrt(fan_in)
        bound = 1.0 / math.sqrt(d_in)
        key_a, key_b = lora_keys(name)
        out[key_a] = (torch.rand(rank, d_in, generator=gen) * 2 - 1) * bound
        out[key_b] = torch.zeros(d_out, rank)
    if not out:
        raise ValueError(f"the base model has no linear layer named {sorted(suffixes)}; check lora.target_modules")
    return out


class AdapterPolicy(ABC):
    """Trainable adapters on a frozen causal LM: add, remove, their parameters, and forwards with a row's adapter."""

    batched: bool = False

    def __init__(self, causal_lm: nn.Module):
        self.causal_lm = causal_lm
        self.vocab_size = int(causal_lm.get_input_embeddings().num_embeddings)
        self.device = next(causal_lm.parameters()).device

    @abstractmethod
    def add(self, slot: str, weights: dict[str, torch.Tensor], config: dict) -> dict[str, nn.Parameter]:
        """Add an adapter under `slot`; returns its trainable parameters by PEFT key."""

    @abstractmethod
    def remove(self, slot: str) -> None: ...

    @abstractmethod
    def hidden_states(self, adapters: list[str], input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None, cache=None) -> torch.Tensor:
        """Last hidden states (B, T, H); row b through adapter adapters[b]. With a transformers KV `cache`, the
        tokens continue the sequence the cache holds (and are appended to it)."""

    def _cache_kw(self, cache) -> dict:
        if cache is None:
            return {}
        from populora.lora import cache_kwarg

        return {cache_kwarg(self.causal_lm.model): cache, "use_cache": True}

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.causal_lm.get_output_embeddings()(hidden)

    @staticmethod
    def _check_weights(slot: str, weights: dict[str, torch.Tensor], params: dict[str, nn.Parameter]) -> None:
        missing, unexpected = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
        if missing or unexpected:
            raise ValueError(f"adapter weights do not match its config: missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]}")
        for key, p in params.items():
            if tuple(p.shape) != tuple(weights[key].shape):
                raise ValueError(f"adapter weight {key} has shape {tuple(weights[key].shape)}, the model expects "
                                 f"{tuple(p.shape)}")


class PeftPolicy(AdapterPolicy):
    """One PeftModel over the frozen base; `set_adapter(slot)` picks the adapter of a whole pass (spec §5)."""

    batched = False

    def __init__(self, causal_lm: nn.Module):
        super().__init__(causal_lm)
        self.peft_model = None
        self._active: str | None = None

    def add(self, slot: str, weights: dict[str, torch.Tensor], config: dict) -> dict[str, nn.Parameter]:
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        known = {f.name for f in dataclasses.fields(LoraConfig)}
        # the stored config names the base by its config name; PEFT only needs the layout
        lora_config = LoraConfig(**{k: v for k, v in config.items() if k in known and k != "base_model_name_or_path"})
        if self.peft_model is None:
            self.peft_model = get_peft_model(self.causal_lm, lora_config, adapter_name=slot)
        else:
            self.peft_model.add_adapter(slot, lora_config)
        params = self._params(slot)
        try:
            self._check_weights(slot, weights, params)
        except ValueError:
            self.remove(slot)
            raise
        set_peft_model_state_dict(self.peft_model, weights, adapter_name=slot)
        for p in params.values():
            p.requires_grad_(True)
        self._active = None
        return params

    def _params(self, slot: str) -> dict[str, nn.Parameter]:
        tag = f".{slot}."
        return {name.replace(tag, "."): p for name, p in self.peft_model.named_parameters() if tag in name}

    def remove(self, slot: str) -> None:
        if self.peft_model is not None and slot in self.peft_model.peft_config:
            self.peft_model.delete_adapter(slot)
            self._active = None

    def hidden_states(self, adapters: list[str], input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None, cache=None) -> torch.Tensor:
        if len(set(adapters)) != 1:
            raise ValueError("the PEFT policy runs one adapter per pass; use the batched policy for mixed rows")
        if self._active != adapters[0]:
            # set_adapter also makes that adapter trainable and freezes the others
            self.peft_model.base_model.set_adapter(adapters[0])
            self._active = adapters[0]
        return self.causal_lm.model(input_ids=input_ids, attention_mask=attention_mask,
                                    **self._cache_kw(cache)).last_hidden_state


class MultiLoraPolicy(AdapterPolicy):
    """`populora.lora.MultiLoraModel`: every row of a pass through its own adapter, the base matmuls shared."""

    batched = True

    def __init__(self, causal_lm: nn.Module, target_modules: list[str], max_rank: int):
        from populora.lora import MultiLoraModel

        super().__init__(causal_lm)
        self.multi = MultiLoraModel(causal_lm, target_modules, max_rank=max_rank, mode="segments")

    def add(self, slot: str, weights: dict[str, torch.Tensor], config: dict) -> dict[str, nn.Parameter]:
        from populora.lora import LoraError

        try:
            self.multi.add_adapter(slot, weights, config, trainable=True)
        except LoraError as e:
            raise ValueError(str(e)) from None
        params = {}
        for module_name, layer in self.multi.layers.items():
            f = layer.factors.get(slot)
            if f is not None:
                key_a, key_b = lora_keys(module_name)
                params[key_a] = f.a
                params[key_b] = f.b
        return params

    def remove(self, slot: str) -> None:
        if slot in self.multi.adapter_names():
            self.multi.remove_adapter(slot)

    def hidden_states(self, adapters: list[str], input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None, cache=None) -> torch.Tensor:
        with self.multi.use_rows(adapters):
            return self.causal_lm.model(input_ids=input_ids, attention_mask=attention_mask,
                                        **self._cache_kw(cache)).last_hidden_state
