"""Bounded staleness (spec 16): which of a step's rollouts an update may train on, and how stale they are.

With `loop.max_staleness` = k >= 1 the games of a step may be played by adapter versions older than the ones its
update trains (the update of the step before was still running). A rollout written by version b may train version v
when v - b <= k; older ones are dropped and counted. The rest carry the behaviour log-probabilities inference
recorded when it sampled them, so the trainer can weigh each token by its clipped importance ratio.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from populora.records import Rollout


@dataclass
class Staleness:
    """One adapter's rollouts for its update: those kept, with how stale they were and how many were dropped."""

    kept: list[Rollout] = field(default_factory=list)
    histogram: dict[str, int] = field(default_factory=dict)  # "v - b" -> rollouts
    dropped: int = 0


def bound(rows: list[Rollout], version: int, k: int) -> Staleness:
    """The rollouts of one adapter that version `version` may train on under staleness bound `k` (spec 16).

    A rollout's version 0 means it was written by the version it trains (lock-step)."""
    out, counts = Staleness(), Counter()
    for r in rows:
        lag = version - r.version if r.version else 0
        if lag > k:
            out.dropped += 1
            continue
        counts[lag] += 1
        out.kept.append(r)
    out.histogram = {str(lag): n for lag, n in sorted(counts.items())}
    return out


def behaviour_logprobs(r: Rollout, k: int) -> list[float]:
    """The behaviour log-probabilities to send with a rollout: under overlap (k >= 1) the recorded ones when there
    is one per response token; otherwise none, and the update is the on-policy one of spec 5."""
    if k and r.logprobs and len(r.logprobs) == len(r.response_token_ids):
        return list(r.logprobs)
    return []
