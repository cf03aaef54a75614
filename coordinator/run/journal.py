"""The phase journal: every phase result of a run, persisted once under (run, step, phase) in the shared database.

`Journal.once(step, phase, fn, *args)` is how the step runs a phase: the stored result when there is one (a resumed
run skips it), otherwise the result of `fn(*args)`, stored before it is returned. Embedded, `fn` runs right here;
distributed, the job goes to the step queue and a phase worker runs it (`PhaseJournal`), so a killed worker's job is
taken over by another. Results are the typed records of populora.records, stored as JSON.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from populora.datastores import check_db_url
from populora.records import PHASE_RECORDS, from_json, to_json
from populora.retry import Backoff, db_unavailable, retrying

log = logging.getLogger(__name__)
R = TypeVar("R")

metadata = sa.MetaData()

runs = sa.Table(
    "coord_runs", metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("mode", sa.String(32), nullable=False),
    sa.Column("config_yaml", sa.Text, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),  # running | finished | failed | stopped
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

phases = sa.Table(
    "coord_phases", metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("phase", sa.String(32), primary_key=True),
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=False),
)


class RunFailed(RuntimeError):
    """A phase failed on every delivery (distributed) and the run was marked failed."""


class JournalDB:
    """The two journal tables. `put` is insert-once: a second writer of the same key keeps the first result."""

    def __init__(self, url: str, backoff: Backoff | None = None):
        kwargs: dict[str, Any] = {"future": True}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        check_db_url(url)
        self.engine = sa.create_engine(url, pool_pre_ping=True, **kwargs)
        self.backoff = backoff  # how long every call waits for the database to come back (None: not at all)
        self._retry(lambda: metadata.create_all(self.engine), "create the journal tables")

    def _retry(self, fn, what: str):
        """`fn()`, retried while the database is away: each call is one transaction, rolled back whole when the
        connection drops, and a put that did commit is recognised on the retry (insert-once)."""
        return retrying(fn, f"the journal database ({what})", db_unavailable, self.backoff, log)

    # runs
    def create_run(self, run_id: str, mode: str, config_yaml: str) -> bool:
        return self._retry(lambda: self._create_run(run_id, mode, config_yaml), f"create run {run_id}")

    def _create_run(self, run_id: str, mode: str, config_yaml: str) -> bool:
        now = time.time()
        try:
            with self.engine.begin() as c:
                c.execute(runs.insert().values(run_id=run_id, mode=mode, config_yaml=config_yaml, status="running",
                                               created_at=now, updated_at=now))
            return True
        except IntegrityError:
            return False

    def get_run(self, run_id: str) -> dict | None:
        def read() -> dict | None:
            with self.engine.connect() as c:
                row = c.execute(sa.select(runs).where(runs.c.run_id == run_id)).mappings().first()
            return dict(row) if row else None

        return self._retry(read, f"read run {run_id}")

    def set_status(self, run_id: str, status: str) -> None:
        def write() -> None:
            with self.engine.begin() as c:
                c.execute(runs.update().where(runs.c.run_id == run_id).values(status=status,
                                                                              updated_at=time.time()))

        self._retry(write, f"set run {run_id} {status}")

    # phase results (JSON)
    def get(self, run_id: str, step: int, phase: str) -> dict | None:
        def read():
            with self.engine.connect() as c:
                return c.execute(sa.select(phases.c.result).where(
                    (phases.c.run_id == run_id) & (phases.c.step == step) & (phases.c.phase == phase))).first()

        row = self._retry(read, f"read {phase} of step {step}")
        return json.loads(row[0]) if row else None

    def put(self, run_id: str, step: int, phase: str, result: dict, seconds: float, attempts: int = 1) -> bool:
        """Persist a phase result; False (and nothing changes) if one is already there."""
        return self._retry(lambda: self._put(run_id, step, phase, result, seconds, attempts),
                           f"store {phase} of step {step}")

    def _put(self, run_id: str, step: int, phase: str, result: dict, seconds: float, attempts: int) -> bool:
        try:
            with self.engine.begin() as c:
                c.execute(phases.insert().values(run_id=run_id, step=step, phase=phase,
                                                 result=json.dumps(result, sort_keys=True), seconds=seconds,
                                                 attempts=attempts, finished_at=time.time()))
            return True
        except IntegrityError:
            return False

    def phase_rows(self, run_id: str, step: int | None = None) -> list[dict]:
        """Every stored row of a run (or of one step), in the order the phases finished."""
        query = sa.select(phases).where(phases.c.run_id == run_id)
        if step is not None:
            query = query.where(phases.c.step == step)
        def read() -> list[dict]:
            with self.engine.connect() as c:
                return [dict(r) for r in c.execute(query.order_by(phases.c.step, phases.c.finished_at)).mappings()]

        return self._retry(read, "read the phase rows")

    def close(self) -> None:
        self.engine.dispose()


def failed_key(phase: str) -> str:
    """The journal key of a phase that failed on every delivery (its error and trace)."""
    return f"failed:{phase}"


class Journal:
    """One run's phase results, typed. `queue` set: phases are dispatched to workers (distributed). `on_phase(step)`
    is called once a phase of `step` that this journal ran or dispatched is stored, or has failed for good (the
    coordinator tells the league where the run stands: coordinator.run.runprogress)."""

    REPUBLISH_CHECK_S = 5.0  # how often a dispatched job is looked for in the queue while its result is awaited

    def __init__(self, db: JournalDB, run_id: str, queue=None, poll_s: float = 0.2,
                 on_phase: Callable[[int], None] | None = None):
        self.db, self.run_id, self.queue, self.poll_s = db, run_id, queue, poll_s
        self.on_phase = on_phase
        self._cache: dict[tuple[int, str], Any] = {}

    def get(self, step: int, phase: str) -> Any | None:
        """The stored record of (step, phase), or None."""
        key = (step, phase)
        if key not in self._cache:
            raw = self.db.get(self.run_id, step, phase)
            if raw is None:
                return None
            self._cache[key] = from_json(PHASE_RECORDS[phase], raw, f"{self.run_id}/{step}/{phase}")
        return self._cache[key]

    def put(self, step: int, phase: str, record: Any, seconds: float, attempts: int = 1) -> None:
        if not isinstance(record, PHASE_RECORDS[phase]):
            raise TypeError(f"phase {phase} returned {type(record).__name__}, not {PHASE_RECORDS[phase].__name__}")
        self.db.put(self.run_id, step, phase, to_json(record), seconds, attempts)

    def once(self, step: int, phase: str, fn: Callable[..., R], *args: Any) -> R:
        """The result of phase `phase` of `step`: stored, else computed by `fn(*args)` and stored first."""
        got = self.get(step, phase)
        if got is not None:
            return got
        if self.queue is not None:
            got = self._dispatch(step, phase)
        else:
            start = time.perf_counter()
            record = fn(*args)
            self.put(step, phase, record, time.perf_counter() - start)
            got = self.get(step, phase)
        self._phase_done(step)
        return got

    def _phase_done(self, step: int) -> None:
        if self.on_phase is not None:
            self.on_phase(step)

    def _dispatch(self, step: int, phase: str) -> Any:
        from coordinator.run.queue import PhaseJob

        job = PhaseJob(self.run_id, step, phase)
        entry = self.queue.publish(job)
        checked = time.monotonic()
        while (got := self.get(step, phase)) is None:
            failed = self.db.get(self.run_id, step, failed_key(phase))
            if failed is not None:
                self._phase_done(step)
                raise RunFailed(f"phase {phase} of step {step} failed: {failed.get('error', 'see worker logs')}")
            if time.monotonic() - checked > self.REPUBLISH_CHECK_S:
                checked = time.monotonic()
                if not self.queue.holds(entry):  # Redis came back without its data: the job is gone
                    log.warning("the job of phase %s of step %d is no longer in the step queue (Redis lost its "
                                "data?): publishing it again", phase, step)
                    entry = self.queue.publish(job)
            time.sleep(self.poll_s)
        return got

    def seconds(self, step: int) -> dict[str, float]:
        """Seconds each stored phase of `step` took."""
        return {r["phase"]: r["seconds"] for r in self.db.phase_rows(self.run_id, step)
                if not r["phase"].startswith("failed:")}


class ForeignJob(RuntimeError):
    """A job whose step has an earlier phase with no stored result. The coordinator publishes a phase only once every
    phase before it in its step is stored, so no job of this run's journal is ever such a job: it was left in the
    step queue by an earlier run of the same id (against a journal since made anew). A worker drops it."""


class PhaseDone(Exception):  # noqa: N818 - a signal, not an error
    """Raised by PhaseJournal once the phase it was asked for is stored: the worker's replay of the step ends."""


class PhaseJournal(Journal):
    """A phase worker's view: replaying the step, every earlier phase is read from the journal, and the one phase of
    the job is computed, stored, and ends the replay (PhaseDone)."""

    def __init__(self, db: JournalDB, run_id: str, step: int, phase: str, attempts: int = 1):
        super().__init__(db, run_id)
        self.step, self.phase, self.attempts = step, phase, attempts

    def once(self, step: int, phase: str, fn: Callable[..., R], *args: Any) -> R:
        if (step, phase) != (self.step, self.phase):
            got = self.get(step, phase)
            if got is None:
                raise ForeignJob(f"run {self.run_id}: phase {phase} of step {step} runs before {self.phase} but "
                                 "has no stored result")
            return got
        if self.get(step, phase) is None:
            start = time.perf_counter()
            record = fn(*args)
            self.put(step, phase, record, time.perf_counter() - start, self.attempts)
        raise PhaseDone
