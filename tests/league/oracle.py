"""The tests' oracle for ratings: the trueskill package itself, applied to one match (aggregate rule, margin 0.05)."""

from __future__ import annotations

from collections.abc import Sequence

import trueskill


def oracle_rate(ratings: dict[str, trueskill.Rating], teacher: str, student: str, rhos: Sequence[float],
                env: trueskill.TrueSkill) -> None:
    """Update `ratings` in place as trueskill.rate_1vs1 would: the student wins above a mean rho of 0.55, the
    teacher below 0.45, a draw between."""
    mean = sum(rhos) / len(rhos)
    t, s = ratings[teacher], ratings[student]
    if mean > 0.55:
        ratings[student], ratings[teacher] = trueskill.rate_1vs1(s, t, env=env)
    elif mean < 0.45:
        ratings[teacher], ratings[student] = trueskill.rate_1vs1(t, s, env=env)
    else:
        ratings[teacher], ratings[student] = trueskill.rate_1vs1(t, s, drawn=True, env=env)
