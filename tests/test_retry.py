"""populora.retry: what is retried, for how long, how the pauses grow, what is logged and the error at the end."""

import logging

import grpc
import pytest
import sqlalchemy as sa

from populora import retry
from populora.retry import Backoff, OutageError, retrying
from populora.rpc import ServiceError


class Flaky:
    """Fails `n` times with `error`, then answers 42."""

    def __init__(self, n: int, error: Exception):
        self.n, self.error, self.calls = n, error, 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.n:
            raise self.error
        return 42


def test_transient_errors_are_retried_with_growing_pauses_then_logged_as_recovered(monkeypatch, caplog):
    pauses: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", pauses.append)
    caplog.set_level(logging.WARNING, logger="populora.retry")
    fn = Flaky(5, ConnectionError("refused"))
    got = retrying(fn, "the test database", lambda e: isinstance(e, ConnectionError),
                   Backoff(wait_s=60, initial_s=0.4, max_s=2.0))
    assert got == 42 and fn.calls == 6
    # doubling from 0.4 s up to 2 s, each with at most 25% jitter taken off
    for pause, ceiling in zip(pauses, [0.4, 0.8, 1.6, 2.0, 2.0], strict=True):
        assert 0.75 * ceiling <= pause <= ceiling
    lines = [r.getMessage() for r in caplog.records]
    assert [f"retry {k} in" in line for k, line in enumerate(lines[:5], 1)] == [True] * 5
    assert all(line.startswith("the test database unavailable (ConnectionError: refused)") for line in lines[:5])
    assert "the test database is back after" in lines[5] and "5 retries" in lines[5]


def test_the_wait_is_bounded_and_the_error_names_what_did_not_come_back(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(retry.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(retry.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    fn = Flaky(10**6, ConnectionError("connection refused"))
    with pytest.raises(OutageError, match=r"^the queue: still unavailable after 7\.0s and \d+ attempts "
                                          r"\(outage\.wait_s=7\); last error: ConnectionError: connection refused"):
        retrying(fn, "the queue", lambda e: isinstance(e, ConnectionError), Backoff(wait_s=7, initial_s=1, max_s=2))
    assert clock[0] == pytest.approx(7.0)  # the last pause is cut to the wait left
    assert 4 <= fn.calls <= 9


def test_other_errors_are_not_retried_and_no_backoff_means_no_retry(monkeypatch):
    monkeypatch.setattr(retry.time, "sleep", lambda s: pytest.fail("slept"))
    fn = Flaky(1, ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        retrying(fn, "x", lambda e: isinstance(e, ConnectionError), Backoff())
    fn = Flaky(1, ConnectionError("down"))
    with pytest.raises(ConnectionError):
        retrying(fn, "x", lambda e: True, None)
    assert fn.calls == 1
    with pytest.raises(OutageError):  # wait_s = 0: fail at the first transient error
        retrying(Flaky(1, ConnectionError("down")), "x", lambda e: True, Backoff(wait_s=0))


def test_what_counts_as_away():
    refused = sa.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
    assert retry.db_unavailable(refused)
    import sqlite3

    assert not retry.db_unavailable(sa.exc.OperationalError("SELECT x", {}, sqlite3.OperationalError("no such "
                                                                                                     "table: x")))
    assert not retry.db_unavailable(sa.exc.IntegrityError("INSERT", {}, Exception("duplicate key")))
    assert not retry.db_unavailable(ValueError("x"))
    import redis

    assert retry.redis_unavailable(redis.exceptions.ConnectionError("Error 111 connecting"))
    assert retry.redis_unavailable(redis.exceptions.BusyLoadingError("LOADING"))
    assert not retry.redis_unavailable(redis.exceptions.ResponseError("WRONGTYPE"))
    assert retry.service_unavailable(ServiceError(grpc.StatusCode.UNAVAILABLE, "db away"))
    assert not retry.service_unavailable(ServiceError(grpc.StatusCode.INTERNAL, "bug"))


def test_a_backoff_is_checked():
    with pytest.raises(ValueError, match="invalid backoff"):
        Backoff(wait_s=-1)
    with pytest.raises(ValueError, match="invalid backoff"):
        Backoff(initial_s=5, max_s=1)
    from populora.config import ConfigError, load_config

    cfg = load_config(preset="cpu-tiny", env=False, overrides=["outage.wait_s=12", "outage.backoff_max_s=3"])
    assert Backoff.from_config(cfg) == Backoff(wait_s=12, initial_s=0.5, max_s=3)
    with pytest.raises((ConfigError, ValueError), match="backoff_max_s"):
        load_config(preset="cpu-tiny", env=False, overrides=["outage.backoff_max_s=0.1"])
