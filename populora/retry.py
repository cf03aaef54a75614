"""Waiting out an outage: a call that fails because Postgres, Redis or a service is away is tried again with
exponential backoff until it succeeds or a bounded total wait (`outage.wait_s`) is spent; then `OutageError` says
what did not come back, for how long it was tried and the last error. Each retry is logged.

Only what is safe to run again is retried: a database transaction that failed was rolled back whole; a queue
publish or acknowledgement, and every write of the service contracts, is idempotent (a job delivered twice finds
its phase stored; a match id is applied once)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from populora.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")


class OutageError(RuntimeError):
    """A dependency (database, queue, service) stayed unavailable for the whole bounded wait."""


@dataclass(frozen=True)
class Backoff:
    """How long to wait for a dependency to come back: the first retry after `initial_s`, each next one
    `multiplier` times later (at most `max_s`, with jitter), until `wait_s` seconds have passed since the first
    failure; `wait_s` = 0 fails at once."""

    wait_s: float = 300.0
    initial_s: float = 0.5
    max_s: float = 10.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not (self.wait_s >= 0 and self.initial_s > 0 and self.max_s >= self.initial_s and self.multiplier >= 1):
            raise ValueError(f"invalid backoff {self}: needs wait_s >= 0, initial_s > 0, max_s >= initial_s and "
                             "multiplier >= 1")

    @classmethod
    def from_config(cls, cfg: Config) -> Backoff:
        o = cfg.outage
        return cls(o.wait_s, o.backoff_initial_s, o.backoff_max_s)


def retrying(fn: Callable[[], T], what: str, transient: Callable[[BaseException], bool],
             backoff: Backoff | None, logger: logging.Logger = log) -> T:
    """`fn()`, tried again while it raises an error `transient` accepts, for at most `backoff.wait_s` seconds
    (no retry when `backoff` is None). Other errors propagate at once; the last transient one, after the wait,
    as OutageError naming `what`."""
    if backoff is None:
        return fn()
    first: float | None = None
    delay, attempt = backoff.initial_s, 0
    while True:
        try:
            result = fn()
        except Exception as e:
            if not transient(e):
                raise
            now = time.monotonic()
            first = now if first is None else first
            waited = now - first
            attempt += 1
            if waited >= backoff.wait_s:
                raise OutageError(f"{what}: still unavailable after {waited:.1f}s and {attempt} attempts "
                                  f"(outage.wait_s={backoff.wait_s:g}); last error: {_brief(e)}") from e
            pause = min(delay * random.uniform(0.75, 1.0), backoff.wait_s - waited)
            logger.warning("%s unavailable (%s); retry %d in %.1fs (%.1fs of outage.wait_s=%gs spent)", what,
                           _brief(e), attempt, pause, waited, backoff.wait_s)
            time.sleep(max(pause, 0.0))
            delay = min(delay * backoff.multiplier, backoff.max_s)
            continue
        if attempt:
            logger.warning("%s is back after %.1fs and %d retries", what, time.monotonic() - first, attempt)
        return result


def _brief(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


# ---- what counts as "away" -------------------------------------------------------------------------------------
def db_unavailable(e: BaseException) -> bool:
    """A database error that says the server is unreachable, restarting or dropped the connection (the
    transaction was rolled back), not one about the statement. SQLite never goes away: its errors are not."""
    import sqlalchemy as sa

    if not isinstance(e, sa.exc.DBAPIError):
        return False
    if e.connection_invalidated:
        return True
    if type(e.orig).__module__.startswith("sqlite3"):
        return False
    return isinstance(e, sa.exc.OperationalError | sa.exc.InterfaceError)


def redis_unavailable(e: BaseException) -> bool:
    """Redis refused or dropped the connection, timed out, or is still loading its data after a restart."""
    import redis

    return isinstance(e, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError)


def service_unavailable(e: BaseException) -> bool:
    """A service answered (or its address answered) UNAVAILABLE: restarting, or its database is away."""
    import grpc

    from populora.service_errors import ServiceError

    return isinstance(e, ServiceError) and e.code == grpc.StatusCode.UNAVAILABLE
