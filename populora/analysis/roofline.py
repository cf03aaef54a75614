"""How fast a phase could be on a machine, from the machine's measured ceiling (populora/peaks.py) and the work the
phase did, and how far from that it was: the fractions bench.roofline, the benches and each step's metrics report.

A phase's work is its useful executed FLOPs (spec 14, revised; populora/analysis/work.py counts them from the
model's shapes), each precision's at the measured peak of that precision (under model.base_matmul=bfloat16 the
base's projections at the bfloat16 peak, the rest at the float32 one), and, for decoding, the bytes it reads: a
decode step multiplies a few rows by every weight, so at a few rows it waits on reading them, not on arithmetic. Its
ceiling is the roofline: the longer of the time the compute peaks allow and the time reading every weight once (in
the precision it is stored in) and the rows' KV cache at the measured bandwidth takes.

    prompt pass   t* = its useful FLOPs at the peaks
    decode step   t* = max(its useful FLOPs at the peaks, its bytes / bandwidth)
    update        t* = its useful FLOPs at the peaks

A fraction is t* / the measured seconds, 1.0 at the ceiling; mfu is a phase's useful FLOPs at the peaks over its
seconds (for a prompt pass or an update, its fraction). Recomputation and padding are executed but not useful: they
lower a fraction and are reported on their own lines. Pure functions over numbers: the callers measure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from populora.analysis.work import Completion, Count, Precision, Shapes, decode_steps, prompt_pass


@dataclass(frozen=True)
class Ceiling:
    """What the cores a phase ran on reach: dense matrix products per precision (FLOP/s) and the rate at which they
    read memory (bytes/s)."""

    flops_per_s: Mapping[str, float] = field(default_factory=dict)
    bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.flops_per_s or not all(f > 0 for f in self.flops_per_s.values()) or not self.bytes_per_s > 0:
            raise ValueError(f"a ceiling is positive: {dict(self.flops_per_s)} FLOP/s, {self.bytes_per_s} bytes/s")

    def peak(self, precision: str) -> float:
        if precision not in self.flops_per_s:
            raise ValueError(f"no measured peak for {precision} products (have {sorted(self.flops_per_s)})")
        return self.flops_per_s[precision]

    def seconds(self, flops: Mapping[str, int]) -> float:
        """The least time of products in several precisions: each precision's FLOPs at its peak."""
        return sum(f / self.peak(p) for p, f in flops.items() if f)


def compute_seconds(count: Count, precision: Precision, ceiling: Ceiling) -> float:
    """The least time of a count's useful FLOPs, each precision at its peak."""
    return ceiling.seconds(count.by_precision(precision))


def step_seconds(count: Count, nbytes: int, precision: Precision, ceiling: Ceiling) -> float:
    """The least time of one decode step: its useful FLOPs at the peaks or its bytes at the bandwidth, the longer."""
    return max(compute_seconds(count, precision, ceiling), nbytes / ceiling.bytes_per_s)


def decode_seconds(shapes: Shapes, rows: Sequence[Completion], precision: Precision, ceiling: Ceiling) -> float:
    """The least time of one batch's decode steps (work.decode_steps)."""
    return sum(step_seconds(c, b, precision, ceiling) for c, b in decode_steps(shapes, rows, precision))


def decode_count(shapes: Shapes, rows: Sequence[Completion], precision: Precision) -> Count:
    """The useful FLOPs of one batch's decode steps."""
    return sum((c for c, _ in decode_steps(shapes, rows, precision)), Count())


def prompts_count(shapes: Shapes, prompts: Iterable[tuple[int, int | None]]) -> Count:
    """The useful FLOPs of the prompt passes of (length, rank) prompts (rank None: the shapes' own; 0: the base)."""
    return sum((prompt_pass(shapes, n, r) for n, r in prompts), Count())


def generation_seconds(shapes: Shapes, prompts: Iterable[tuple[int, int | None]],
                       batches: Iterable[Sequence[Completion]], precision: Precision, ceiling: Ceiling) -> float:
    """The least time of a generation phase: its prompt passes (the prompts actually passed: a prompt shared by a
    request's n samples once) at the peaks, and the decode steps of each of its batches on the roofline."""
    return (compute_seconds(prompts_count(shapes, prompts), precision, ceiling)
            + sum(decode_seconds(shapes, rows, precision, ceiling) for rows in batches))


def fraction(least_seconds: float, seconds: float) -> float | None:
    """least / measured: the share of the ceiling a phase reached (None when nothing was measured)."""
    return least_seconds / seconds if seconds > 0 else None


def mfu(count: Count, seconds: float, precision: Precision, ceiling: Ceiling) -> float | None:
    """Model FLOPs utilisation: a phase's useful executed FLOPs per second over the peak of the precision each ran
    in (the time the peaks allow them over the time taken; None when nothing was measured)."""
    return fraction(compute_seconds(count, precision, ceiling), seconds)
