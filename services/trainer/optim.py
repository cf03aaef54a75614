"""One adapter's AdamW (spec §5), with float32 master weights when the adapter computes in lower precision.

The batched LoRA layer keeps an adapter's factors in the base's dtype (bfloat16 on a GPU). A step of lr 1e-5 on a
bfloat16 weight of size 0.05 is below its rounding step (0.05 * 2^-8), so AdamW there would leave A unchanged. The
optimizer therefore steps float32 copies and writes them back rounded; the stored version holds the float32 values,
so a resumed trainer continues from exactly the same numbers. float32 parameters are stepped directly.
"""

from __future__ import annotations

import torch
from torch import nn

ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")


class AdapterAdamW(torch.optim.AdamW):
    """AdamW over one adapter's parameters, addressed by PEFT weight key."""

    def __init__(self, params: dict[str, nn.Parameter], masters: dict[str, torch.Tensor] | None = None,
                 lr: float = 1e-5, betas: tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0):
        self.compute = dict(params)
        self.master: dict[str, nn.Parameter] = {}
        for key, p in self.compute.items():
            if p.dtype == torch.float32:
                self.master[key] = p
            else:
                start = masters[key] if masters is not None and key in masters else p.detach()
                self.master[key] = nn.Parameter(start.to(device=p.device, dtype=torch.float32).clone())
        super().__init__(list(self.master.values()), lr=lr, betas=betas, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self, closure=None):
        for key, p in self.compute.items():
            m = self.master[key]
            if m is not p:
                m.grad = None if p.grad is None else p.grad.float()
        loss = super().step(closure)
        for key, p in self.compute.items():
            m = self.master[key]
            if m is not p:
                p.copy_(m)
                m.grad = None
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.compute.values():
            p.grad = None
        super().zero_grad(set_to_none)

    # ---- what a version stores
    def weights(self) -> dict[str, torch.Tensor]:
        """The adapter's weights at full precision, by PEFT key."""
        return {k: m.detach() for k, m in self.master.items()}

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for key, m in self.master.items():
                m.copy_(weights[key])
                if self.compute[key] is not m:
                    self.compute[key].copy_(m)

    def flat_state(self) -> dict[str, torch.Tensor]:
        """`<PEFT key>.<exp_avg|exp_avg_sq|step>` tensors (empty before the first step)."""
        out = {}
        for key, m in self.master.items():
            for name, value in self.state.get(m, {}).items():
                out[f"{key}.{name}"] = value.detach().reshape(value.shape if value.dim() else (1,))
        return out

    def load_flat_state(self, flat: dict[str, torch.Tensor]) -> None:
        self.state.clear()
        for key, m in self.master.items():
            if f"{key}.exp_avg" not in flat:
                continue
            self.state[m] = {name: flat[f"{key}.{name}"].reshape(()).clone() if name == "step"
                             else flat[f"{key}.{name}"].to(m.device, torch.float32).clone() for name in ADAM_STATE}
