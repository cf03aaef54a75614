"""Compute in FLOPs (spec 14, after Kaplan et al. 2020): 2N per forward token, 6N per trained token."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

FORWARD_FLOPS_PER_PARAM = 2  # a multiply and an add per weight per token
TRAIN_FLOPS_PER_PARAM = 6  # forward (2) + backward (4: gradients of activations and of weights)
# Phases reported on their own lines and not charged to the training budget (spec 14: both arms share the warm
# start; evaluation and evolution are not training).
OFF_BUDGET_PHASES = frozenset({"eval", "evolution", "warm_start"})


def lora_parameters(rank: int, module_shapes: Iterable[tuple[int, int]]) -> int:
    """Parameters of a rank-r LoRA adapter: r·(d_in + d_out) per target module (A is r x d_in, B d_out x r).

    `module_shapes` lists each adapted linear layer's (d_out, d_in), one entry per layer instance (a 30-layer model
    adapting q_proj and v_proj lists 60 shapes).
    """
    if rank < 1:
        raise ValueError(f"a LoRA rank is at least 1, got {rank}")
    total = 0
    for d_out, d_in in module_shapes:
        if d_out < 1 or d_in < 1:
            raise ValueError(f"a target module's shape must be positive, got (d_out, d_in) = ({d_out}, {d_in})")
        total += rank * (d_in + d_out)
    return total


def model_parameters(base_params: int, adapter_params: int = 0) -> int:
    """N of spec 14: the base model's parameters plus those of the adapter in use (0 for the bare base model)."""
    if base_params < 0 or adapter_params < 0:
        raise ValueError(f"parameter counts cannot be negative: base {base_params}, adapter {adapter_params}")
    return base_params + adapter_params


@dataclass(frozen=True)
class TokenCounts:
    """Tokens one phase processed (spec 14).

    `trained` holds only the tokens of rows the update used: the caller leaves out rows it skipped (zero advantage),
    since they cost no backward pass and spec 14 does not charge them. A trained token's forward is inside its 6N,
    so its prompt pass is not counted again under `prompt`.
    """

    prompt: int = 0  # prompt tokens passed forward before generation (2N each)
    generated: int = 0  # tokens sampled (2N each)
    trained: int = 0  # prompt + response tokens of the rows an update used (6N each)

    def __post_init__(self) -> None:
        for name in ("prompt", "generated", "trained"):
            if getattr(self, name) < 0:
                raise ValueError(f"token count {name} cannot be negative, got {getattr(self, name)}")


def token_flops(tokens: TokenCounts, n_params: int) -> int:
    """2N·(prompt + generated) + 6N·trained (spec 14)."""
    return (FORWARD_FLOPS_PER_PARAM * n_params * (tokens.prompt + tokens.generated)
            + TRAIN_FLOPS_PER_PARAM * n_params * tokens.trained)


@dataclass(frozen=True)
class FlopReport:
    """FLOPs per phase, their total, and the part charged to the training budget."""

    phases: dict[str, int]
    total: int  # every phase
    budget: int  # phases not in the off-budget set: what the equal-compute comparison spends
    off_budget: dict[str, int]  # the phases reported on their own lines


def phase_flops(phases: Mapping[str, TokenCounts], n_params: int | Mapping[str, int],
                off_budget: Collection[str] = OFF_BUDGET_PHASES) -> FlopReport:
    """FLOPs of each phase from its token counts, the total, and the training budget's share (spec 14).

    `n_params` is N (see `model_parameters`) for every phase, or one N per phase name where phases run different
    models (seeding on the bare base model, N = base only). Phases named in `off_budget` (evaluation, evolution,
    the warm start by default) are counted in `total` and listed apart, and not charged to `budget`. Integers
    throughout: a 7B model's run is ~1e19 FLOPs, past float64's exact integers, and a count should add exactly.
    """
    out = {}
    for name, tokens in phases.items():
        if isinstance(n_params, Mapping):
            if name not in n_params:
                raise ValueError(f"phase {name!r} has no parameter count; give N for every phase "
                                 f"(have {sorted(n_params)})")
            n = n_params[name]
        else:
            n = n_params
        if n < 0:
            raise ValueError(f"phase {name!r}: N cannot be negative, got {n}")
        out[name] = token_flops(tokens, int(n))
    off = {name: f for name, f in out.items() if name in off_budget}
    return FlopReport(phases=out, total=sum(out.values()), budget=sum(out.values()) - sum(off.values()),
                      off_budget=off)
