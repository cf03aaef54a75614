"""Each step's phases on a timeline, per service, and how much of a step the trainer and inference sat idle.

The journal stores, for every phase, when it finished and how long it ran, so its span is (finished_at - seconds,
finished_at). A step's window is the time from the end of the previous step (its update and what follows) to the end of its own: in
lock-step the whole step, overlapped (spec 16) the period between two updates, which is what a step costs once the
pipeline is full. A service is busy in that window while any phase of any step runs on it; what is left is idle.
Phases still running when the step is written (the next step's games) count only once stored, so an overlapped
step's idle fractions are an upper bound.
"""

from __future__ import annotations

SERVICE_OF = {  # which service a phase keeps busy (the coordinator only waits on it)
    "warmstart": "trainer", "init": "trainer", "seed": "inference", "match": "league", "propose": "inference",
    "validate": "sandbox", "solve": "inference", "check": "sandbox", "rate": "league", "update": "trainer",
    "evolve": "evolver", "account": "league", "eval": "inference",
}
IDLE_SERVICES = ("trainer", "inference")


def spans(phase_rows: list[dict]) -> list[dict]:
    """Every stored phase as {step, phase, service, start, end} (seconds since the epoch), in start order."""
    out = [{"step": r["step"], "phase": r["phase"], "service": SERVICE_OF.get(r["phase"], "coordinator"),
            "start": r["finished_at"] - r["seconds"], "end": r["finished_at"]}
           for r in phase_rows if not r["phase"].startswith("failed:")]
    return sorted(out, key=lambda s: (s["start"], s["step"]))


def busy_seconds(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by the union of `intervals`."""
    total, reach = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, hi)
        if b > a:
            total += b - a
            reach = b
    return total


def window(step: int, phase_rows: list[dict]) -> tuple[float, float] | None:
    """Step `step`'s window: from the end of step-1's last phase (its update, evolution and accounting come last) to
    the end of its own last phase; the first step's window starts with its first phase."""
    every = spans(phase_rows)
    own = [s for s in every if s["step"] == step]
    if not own:
        return None
    end = max(s["end"] for s in own)
    before = [s["end"] for s in every if s["step"] == step - 1]
    start = max(before) if before else min(s["start"] for s in own)
    return min(start, end), end


def timeline_metrics(step: int, phase_rows: list[dict]) -> dict:
    """The step's own phases on the timeline, its window and the idle fraction of the trainer and inference in it.
    `phase_rows`: the journal rows of the step and its neighbours (JournalDB.phase_rows)."""
    w = window(step, phase_rows)
    if w is None:
        return {}
    lo, hi = w
    all_spans = spans(phase_rows)
    idle = {}
    for service in IDLE_SERVICES:
        busy = busy_seconds([(s["start"], s["end"]) for s in all_spans if s["service"] == service], lo, hi)
        idle[service] = round(1 - busy / (hi - lo), 4) if hi > lo else None
    return {"timeline": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()}
                         for s in all_spans if s["step"] == step],
            "window_s": round(hi - lo, 3), "idle_fraction": idle}
