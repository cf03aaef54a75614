"""The adapter host: many LoRA adapters on one frozen causal LM, each row of a pass through its own adapter.

One host serves both services that hold adapters: inference (`forward`: logits, rows of many adapters in one
batch) and the trainer (`hidden_states`: trainable adapters, gradients into their A and B only). Two
implementations, chosen by one setting, `lora.host` (docs/inference.md, docs/training.md):

- `batched`: `populora.lora.MultiLoraModel`, our per-row LoRA layer (rows grouped by adapter, one rank-r matmul
  per adapter on its slice of the batch; the base's matmuls shared). No LoRA dropout.
- `peft`: PEFT's LoraModel. Inference runs PEFT's mixed-batch forward (`adapter_names`, its loop over adapters in
  every layer); training runs one adapter per pass (`set_adapter`), with LoRA dropout.

Both key every adapter's parameters by PEFT's weight names (`populora.lora.lora_keys`), so weights, optimizer
states, checkpoints and gradients compare across them (tests/trainer/test_batched.py, tests/inference/).
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from populora.lora import LoraError, MultiLoraModel, cache_kwarg, lora_keys

HostKind = Literal["auto", "batched", "peft"]
HOST_KINDS = ("batched", "peft")


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


class AdapterHost(ABC):
    """Adapters on one frozen causal LM: add, remove, and passes in which row b runs through adapter names[b]
    (None: the bare base)."""

    kind: str
    sort_rows: bool = False  # rows grouped by adapter make the pass cheaper (see row_key)
    trains_mixed_rows: bool = False  # hidden_states takes rows of several adapters in one pass
    dropout: bool = False  # LoRA dropout applies while training

    def __init__(self, causal_lm: nn.Module, target_modules: list[str], max_rank: int):
        self.causal_lm = causal_lm
        self.target_modules = list(target_modules)
        self.max_rank = max_rank
        self.vocab_size = int(causal_lm.get_input_embeddings().num_embeddings)
        self.device = next(causal_lm.parameters()).device
        self.cache_arg = cache_kwarg(causal_lm)

    @abstractmethod
    def add(self, name: str, weights: dict[str, torch.Tensor], config: dict,
            trainable: bool = False) -> dict[str, nn.Parameter]:
        """Host an adapter under `name` (its PEFT weights and adapter_config); returns its parameters by PEFT key.
        Weights that do not match the config raise ValueError and leave nothing behind."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Drop an adapter (no error when it is not hosted)."""

    @abstractmethod
    def names(self) -> list[str]:
        """The adapters hosted now."""

    def row_key(self, name: str | None) -> int:
        """Order of rows when `sort_rows`: rows of one adapter next to each other."""
        return 0

    @abstractmethod
    def forward(self, names: list[str | None], **kw):
        """The causal LM's output (logits) for a batch whose row b runs through adapter names[b]; no gradients."""

    @abstractmethod
    def hidden_states(self, names: list[str], input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                      cache=None) -> torch.Tensor:
        """Last hidden states (B, T, H), row b through adapter names[b], with gradients into the trainable
        adapters. With a transformers KV `cache`, the tokens continue the sequence it holds (and are appended)."""

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.output_layer()(hidden)

    def output_layer(self) -> nn.Module:
        """The LM head (hidden -> vocabulary logits), a linear layer shared by every adapter."""
        return self.causal_lm.get_output_embeddings()

    def prepack(self, dtype: torch.dtype = torch.float32):
        """Lay the base's linear weights out for the CPU's matmul library, for passes without gradients, their
        products in `dtype` (populora.lora.prepack). Returns its PackStats."""
        from populora.lora.prepack import PackStats

        return PackStats(skipped=f"the {self.kind} host runs its own layers")

    def lower_products(self, dtype: torch.dtype):
        """The base's products in `dtype` in every pass, gradients included (model.base_matmul). Returns PackStats."""
        from populora.lora.prepack import PackStats

        return PackStats(skipped=f"the {self.kind} host runs its own layers")

    @contextmanager
    def native_products(self) -> Iterator[None]:
        """Inside, the base's products run in its weights' dtype whatever `lower_products` set (the warm start's
        fit, whose cached adapter other runs reuse)."""
        yield

    def _cache_kw(self, cache) -> dict:
        # no cache asked for: none is built (a training pass needs none, and a checkpointed layer that appended to
        # one would append again when it runs a second time in the backward pass)
        return {"use_cache": False} if cache is None else {self.cache_arg: cache, "use_cache": True}

    @contextmanager
    def layer_checkpointing(self, enabled: bool = True) -> Iterator[None]:
        """Activation checkpointing per decoder layer, inside: a layer in a pass with gradients keeps only its input
        for the backward pass and runs again there, so a pass holds one layer's activations instead of every
        layer's, for about one more forward of compute. Passes with a KV cache, or without gradients, run as usual.
        The row-to-adapter assignment of the pass is restored for the second run (the backward may run later, or
        in another thread)."""
        if not enabled:
            yield
            return
        layers = decoder_layers(self.causal_lm)
        own = [vars(layer).get("forward") for layer in layers]  # a forward set on the instance, kept as it was
        for layer in layers:
            layer.forward = self._checkpointed(layer.forward)
        try:
            yield
        finally:
            for layer, forward in zip(layers, own, strict=True):
                if forward is None:
                    del layer.forward  # the class's forward again
                else:
                    layer.forward = forward

    def _checkpointed(self, forward):
        def run(*args, **kw):
            if not torch.is_grad_enabled() or kw.get("past_key_values") is not None:
                return forward(*args, **kw)
            rows = self._row_state()

            def again(*a, **k):
                with rows():
                    return forward(*a, **k)

            return checkpoint(again, *args, use_reentrant=False, **kw)

        return run

    def _row_state(self):
        """A context that puts back which adapter each row of the current pass uses."""
        return nullcontext

    @staticmethod
    def _check_weights(weights: dict[str, torch.Tensor], params: dict[str, nn.Parameter]) -> None:
        missing, unexpected = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
        if missing or unexpected:
            raise ValueError(f"adapter weights do not match its config: missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]}")
        for key, p in params.items():
            if tuple(p.shape) != tuple(weights[key].shape):
                raise ValueError(f"adapter weight {key} has shape {tuple(weights[key].shape)}, the model expects "
                                 f"{tuple(p.shape)}")


class BatchedHost(AdapterHost):
    """`populora.lora.MultiLoraModel`: every row of a pass through its own adapter, the base matmuls shared."""

    kind = "batched"
    sort_rows = True  # contiguous rows per adapter: slices, no gathers
    trains_mixed_rows = True

    def __init__(self, causal_lm: nn.Module, target_modules: list[str], max_rank: int):
        super().__init__(causal_lm, target_modules, max_rank)
        self.multi = MultiLoraModel(causal_lm, target_modules, max_rank=max_rank, mode="segments")

    def add(self, name: str, weights: dict[str, torch.Tensor], config: dict,
            trainable: bool = False) -> dict[str, nn.Parameter]:
        try:
            self.multi.add_adapter(name, weights, config, trainable=trainable)
        except LoraError as e:
            raise ValueError(str(e)) from None
        params = {}
        for module_name, layer in self.multi.layers.items():
            f = layer.factors.get(name)
            if f is not None:
                key_a, key_b = lora_keys(module_name)
                params[key_a], params[key_b] = f.a, f.b
        return params

    def remove(self, name: str) -> None:
        if name in self.multi.adapter_names():
            self.multi.remove_adapter(name)

    def names(self) -> list[str]:
        return list(self.multi.adapter_names())

    def row_key(self, name: str | None) -> int:
        return self.multi.slot_of(name)

    def _row_state(self):
        plan = self.multi.current_plan()
        return lambda: self.multi.restore_plan(plan)  # rows in slot order: k rows per adapter run as one matmul

    def forward(self, names: list[str | None], **kw):
        with self.multi.use_rows(names):
            return self.causal_lm(**kw)

    def prepack(self, dtype: torch.dtype = torch.float32):
        from populora.lora.prepack import pack

        return pack(self.multi.layers.values(), self.output_layer(), dtype)

    def lower_products(self, dtype: torch.dtype):
        from populora.lora.prepack import lower

        return lower(self.multi.layers.values(), dtype)

    @contextmanager
    def native_products(self) -> Iterator[None]:
        layers = list(self.multi.layers.values())
        low = [layer.low for layer in layers]
        for layer in layers:
            layer.low = None
        try:
            yield
        finally:
            for layer, w in zip(layers, low, strict=True):
                layer.low = w

    def hidden_states(self, names: list[str], input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                      cache=None) -> torch.Tensor:
        with self.multi.use_rows(names):
            return self.causal_lm.model(input_ids=input_ids, attention_mask=attention_mask,
                                        **self._cache_kw(cache)).last_hidden_state


class PeftHost(AdapterHost):
    """One PeftModel over the frozen base. Inference: PEFT's `adapter_names` mixed batch; training: one adapter per
    pass (`set_adapter`, spec §5), LoRA dropout included."""

    kind = "peft"
    dropout = True

    def __init__(self, causal_lm: nn.Module, target_modules: list[str], max_rank: int):
        super().__init__(causal_lm, target_modules, max_rank)
        self.peft_model = None
        self._active: str | None = None

    def add(self, name: str, weights: dict[str, torch.Tensor], config: dict,
            trainable: bool = False) -> dict[str, nn.Parameter]:
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        known = {f.name for f in dataclasses.fields(LoraConfig)}
        # the stored config names the base by its config name; PEFT only needs the layout
        settings = {k: v for k, v in config.items() if k in known and k != "base_model_name_or_path"}
        settings.setdefault("target_modules", self.target_modules)
        lora_config = LoraConfig(**settings)
        if self.peft_model is None:
            self.peft_model = get_peft_model(self.causal_lm, lora_config, adapter_name=name)
        else:
            self.peft_model.add_adapter(name, lora_config)
        params = self._params(name)
        try:
            self._check_weights(weights, params)
        except ValueError:
            self.remove(name)
            raise
        set_peft_model_state_dict(self.peft_model, weights, adapter_name=name)
        for p in params.values():
            p.requires_grad_(trainable)
        self._active = None
        if not trainable:
            self.peft_model.eval()
        return params

    def _params(self, name: str) -> dict[str, nn.Parameter]:
        tag = f".{name}."
        return {key.replace(tag, "."): p for key, p in self.peft_model.named_parameters() if tag in key}

    def remove(self, name: str) -> None:
        if self.peft_model is not None and name in self.peft_model.peft_config:
            self.peft_model.delete_adapter(name)
            self._active = None

    def names(self) -> list[str]:
        return [] if self.peft_model is None else list(self.peft_model.peft_config)

    def forward(self, names: list[str | None], **kw):
        if self.peft_model is None or all(n is None for n in names):
            if self.peft_model is None:
                return self.causal_lm(**kw)
            with self.peft_model.disable_adapter():
                return self.peft_model(**kw)
        return self.peft_model(adapter_names=["__base__" if n is None else n for n in names], **kw)

    def hidden_states(self, names: list[str], input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                      cache=None) -> torch.Tensor:
        if len(set(names)) != 1:
            raise ValueError("the peft host trains one adapter per pass; set lora.host=batched for mixed rows")
        if self._active != names[0]:
            # set_adapter also makes that adapter trainable and freezes the others
            self.peft_model.base_model.set_adapter(names[0])
            self._active = names[0]
        return self.causal_lm.model(input_ids=input_ids, attention_mask=attention_mask,
                                    **self._cache_kw(cache)).last_hidden_state


def decoder_layers(causal_lm: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM (`model.layers` of Llama, Qwen2, Mistral, ...)."""
    layers = getattr(getattr(causal_lm, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(causal_lm).__name__} has no decoder layers at .model.layers; activation "
                         "checkpointing (trainer.activation_checkpointing) needs them: turn it off for this model")
    return layers


HOSTS: dict[str, type[AdapterHost]] = {"batched": BatchedHost, "peft": PeftHost}


def host_kind(setting: str, service: Literal["inference", "trainer"], trainer_batch_mode: str = "sequential") -> str:
    """`lora.host` resolved for a service: `auto` is the batched layer for inference, and for the trainer the batched
    layer when its updates are batched, PEFT (LoRA dropout, one adapter per pass) when they run one by one."""
    if setting != "auto":
        return setting
    if service == "inference":
        return "batched"
    return "batched" if trainer_batch_mode == "batched" else "peft"


def make_host(kind: str, causal_lm: nn.Module, target_modules: list[str], max_rank: int) -> AdapterHost:
    if kind not in HOSTS:
        raise ValueError(f"unknown adapter host {kind!r}; lora.host is one of {list(HOSTS)}")
    return HOSTS[kind](causal_lm, target_modules, max_rank)
