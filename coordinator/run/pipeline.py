"""The steps of a run in order, lock-step or overlapped (spec 16, `loop.max_staleness`).

Lock-step (k = 0) runs each step whole before the next. Overlapped (k >= 1), the games of step t (match, propose,
validate, solve, check, rate) run in the caller's thread while the updates of earlier steps train on a second
thread, one update at a time and in step order. Before step t's games start, every step up to `behaviour_step(t)`
(t-1-k, or the last step that evolved) has finished: the games are played by those versions, so a rollout is never
more than k versions older than the version its update trains. Which versions play which games depends only on the
step numbers, never on timing, so a seeded run and a resumed one store the same records.

The records come back in step order: ratings are reported in step order too, since the games run one step after
another on one thread.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from coordinator.run.journal import Journal
from coordinator.run.phases import Run
from coordinator.run.step import (
    Prepared,
    StepRecord,
    behaviour_step,
    finish_step,
    play_step,
    prepare,
    train_step,
)
from populora.logs import step_var


def _finish(j: Journal, run: Run, t: int, played) -> StepRecord:
    step_var.set(t)  # the update thread's log lines name their step
    return finish_step(j, run, t, played)


def step_records(j: Journal, run: Run, steps: int) -> Iterator[Prepared | StepRecord]:
    """Step 0's record, then those of steps 1..steps, in order. Closing the iterator early (a spent budget) waits
    for the updates already started, which are stored and read back by a resumed run."""
    step_var.set(0)
    yield prepare(j, run)
    if run.cfg.loop.max_staleness == 0:
        for t in range(1, steps + 1):
            step_var.set(t)
            yield train_step(j, run, t)
        return
    inflight: deque[tuple[int, Future]] = deque()
    with ThreadPoolExecutor(1, thread_name_prefix="update") as updates:
        try:
            for t in range(1, steps + 1):
                barrier = behaviour_step(run, t)  # the games of t need every step up to it finished
                while inflight and (inflight[0][0] <= barrier or inflight[0][1].done()):
                    yield inflight.popleft()[1].result()
                step_var.set(t)
                played = play_step(j, run, t)
                inflight.append((t, updates.submit(_finish, j, run, t, played)))
            while inflight:
                yield inflight.popleft()[1].result()
        finally:
            for _, future in inflight:  # stopped early or failed: no update starts that was not yet running
                future.cancel()
            for _, future in inflight:
                with contextlib.suppress(BaseException):
                    future.result()
