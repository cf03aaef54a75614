"""What the fault-injecting end-to-end tests read back to show a fault hit the window they claim: a phase's span
from the journal, and which trainer replica made which update, from the replicas' own logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

UPDATED = re.compile(r"updated (\S+) v(\d+) -> v(\d+)")


def span(state, run_id: str, step: int, phase: str) -> tuple[float, float]:
    """(start, end) of a stored phase, seconds since the epoch (its last attempt, distributed)."""
    row = next(r for r in state.phase_rows(run_id, step) if r["phase"] == phase)
    return row["finished_at"] - row["seconds"], row["finished_at"]


def updates_made(log: Path) -> list[tuple[str, int]]:
    """(adapter, version made) of every update a trainer replica's JSON log says it made."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        msg = json.loads(line).get("msg", "") if line.startswith("{") else line
        if m := UPDATED.search(msg):
            out.append((m.group(1), int(m.group(3))))
    return out
