"""How fast a phase could be on a machine, from the machine's measured ceiling (populora/peaks.py) and the work the
phase did, and how far from that it was: the fractions bench.roofline, the benches and each step's metrics report.

A phase's work is FLOPs (spec 14's 2N per token a forward pass reads, 6N per trained token) and, for decoding, the
weights it reads: a decode step computes 2N FLOPs per row but reads every weight once whatever the row count, so
at a few rows it waits on memory, not on arithmetic. Its ceiling is the roofline: the longer of the time the compute
peak allows and the time reading every weight once at the measured bandwidth takes.

    prompt pass   t* = 2N x prompt tokens / peak
    decode step   t* = max(2N x rows / peak, weight bytes / bandwidth)
    update        t* = 6N x trained tokens / peak

A fraction is t* / the measured seconds (equally: the measured rate over the ceiling's), 1.0 at the ceiling. The
attention's own arithmetic and its reads of the KV cache are not in N (spec 14 leaves them out too), so a long
context lowers a fraction that it does not charge. Pure functions over numbers: the callers measure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from populora.analysis.flops import FORWARD_FLOPS_PER_PARAM, TRAIN_FLOPS_PER_PARAM


@dataclass(frozen=True)
class Ceiling:
    """What the cores a phase ran on reach: dense matrix products (FLOP/s, in the dtype the phase computes in) and
    the rate at which they read memory (bytes/s)."""

    flops_per_s: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        if not (self.flops_per_s > 0 and self.bytes_per_s > 0):
            raise ValueError(f"a ceiling is positive: {self.flops_per_s} FLOP/s, {self.bytes_per_s} bytes/s")


def prompt_pass_seconds(prompt_tokens: int, n_params: int, ceiling: Ceiling) -> float:
    """The least time a prompt pass over `prompt_tokens` tokens takes: 2N per token at the compute peak."""
    return FORWARD_FLOPS_PER_PARAM * n_params * prompt_tokens / ceiling.flops_per_s


def decode_step_seconds(rows: int, n_params: int, weight_bytes: int, ceiling: Ceiling) -> float:
    """The least time one decode step of `rows` rows takes: 2N per row at the compute peak, or every weight read
    once at the measured bandwidth, whichever is longer."""
    return max(FORWARD_FLOPS_PER_PARAM * n_params * rows / ceiling.flops_per_s, weight_bytes / ceiling.bytes_per_s)


def live_rows(lengths: Sequence[int]) -> list[int]:
    """The rows each decode step of a batch holds, from its completions' lengths in tokens: a row's first token
    comes from the prompt pass, so step i (i = 1 .. longest - 1) runs the rows that generate more than i tokens."""
    longest = max(lengths, default=0)
    counts = [0] * max(longest - 1, 0)
    for n in lengths:
        for i in range(1, n):
            counts[i - 1] += 1
    return counts


def decode_seconds(lengths: Sequence[int], n_params: int, weight_bytes: int, ceiling: Ceiling) -> float:
    """The least time the decode steps of one batch take, given its completions' lengths (`live_rows`)."""
    return sum(decode_step_seconds(b, n_params, weight_bytes, ceiling) for b in live_rows(lengths))


def generation_seconds(prompt_tokens: int, batches: Iterable[Sequence[int]], n_params: int, weight_bytes: int,
                       ceiling: Ceiling) -> float:
    """The least time of a generation phase: its prompt pass (the tokens actually passed: a prompt shared by a
    request's n samples once) and the decode steps of each of its batches (`batches`: completion lengths)."""
    return (prompt_pass_seconds(prompt_tokens, n_params, ceiling)
            + sum(decode_seconds(lengths, n_params, weight_bytes, ceiling) for lengths in batches))


def update_seconds(trained_tokens: int, n_params: int, ceiling: Ceiling) -> float:
    """The least time an update over `trained_tokens` tokens takes: 6N per token at the compute peak."""
    return TRAIN_FLOPS_PER_PARAM * n_params * trained_tokens / ceiling.flops_per_s


def fraction(least_seconds: float, seconds: float) -> float | None:
    """least / measured: the share of the ceiling a phase reached (None when nothing was measured)."""
    return least_seconds / seconds if seconds > 0 else None


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float | None:
    """Model FLOPs utilisation: the FLOPs a phase is charged (spec 14) per second over the compute peak (None when
    nothing was measured)."""
    return flops / seconds / peak_flops_per_s if seconds > 0 and peak_flops_per_s > 0 else None
