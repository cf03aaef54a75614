"""The teacher x student payoff matrix: an exponentially weighted mean of the student's solve rate."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PayoffCell:
    """One (teacher, student) cell: S = sum_i d^(n-i) rho_i and W = sum_i d^(n-i) over its n matches."""

    weighted_sum: float = 0.0
    weight: float = 0.0
    matches: int = 0

    @property
    def solve_rate(self) -> float | None:
        """S / W: the decayed mean of the student's mean rho against this teacher; None before any match."""
        return self.weighted_sum / self.weight if self.weight > 0 else None


def update_cell(cell: PayoffCell, mean_rho: float, decay: float) -> PayoffCell:
    """S <- d*S + rho, W <- d*W + 1: older matches count d^age, and the mean needs no warm-up bias correction."""
    return PayoffCell(decay * cell.weighted_sum + mean_rho, decay * cell.weight + 1.0, cell.matches + 1)
