"""Progress of an evaluation's long stages (the canonical solutions' outputs, generation, scoring): sparse events a
caller prints or logs, and the one line each reads as."""

from __future__ import annotations

import time
from collections.abc import Callable

Progress = Callable[[str, dict], None]
"""progress(event, info). Stages, sparse (STAGE_LINES a stage, and one at least every EVERY_S while it moves):
"expected" (the canonical solutions' sandbox jobs), "generating" (answers), "scoring" (sandbox jobs), each with
{done, total, seconds}. Then "generated" {rows, tokens, seconds}, "scored" {jobs, answers, seconds}, "done"
{seconds}."""

STAGES = {"expected": ("canonical solutions' outputs", "sandbox jobs"), "generating": ("generating", "answers"),
          "scoring": ("scoring", "sandbox jobs")}  # event: (what the line calls the stage, what it counts)
STAGE_LINES = 16  # about as many lines as the warm start prints for its fit
EVERY_S = 30.0
MIN_GAP_S = 2.0  # answers that finish together (a batch whose rows all stop at the token limit) make one line


class Pace:
    """Calls of (done, total) as a stage moves, passed on as `event` when worth a line: its start (done 0, once),
    then every 1/STAGE_LINES of the total but not within MIN_GAP_S of the last line, or EVERY_S since the last line;
    never for the last item (the stage's own summary says it)."""

    def __init__(self, report: Progress, event: str):
        self.report, self.event = report, event
        self.start = self.last_t = time.perf_counter()
        self.last_done, self.begun = 0, False

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0 and not self.begun and total > 0:
            self.begun = True
            self.report(self.event, {"done": 0, "total": total, "seconds": now - self.start})
        if done >= total or done <= self.last_done:
            return
        since = now - self.last_t
        if (done - self.last_done >= total / STAGE_LINES and since >= MIN_GAP_S) or since >= EVERY_S:
            self.last_done, self.last_t = done, now
            self.report(self.event, {"done": done, "total": total, "seconds": now - self.start})


def progress_text(event: str, info: dict) -> str:
    """One line for a stage event ("" for other events): `generating: 120/400 answers, 3.1/s, 39 s so far, about
    90 s left`; before a twentieth is done, no rate or time left (answers of one batch may all finish at the end)."""
    if event not in STAGES:
        return ""
    done, total, seconds = info["done"], info["total"], max(info["seconds"], 1e-9)
    stage, unit = STAGES[event]
    if done < total / 20:
        return f"{stage}: {done}/{total} {unit}, {seconds:.0f} s so far"
    rate = done / seconds
    left = (total - done) / rate
    return f"{stage}: {done}/{total} {unit}, {rate:.1f}/s, {seconds:.0f} s so far, about {left:.0f} s left"
