"""Shared fixtures: the tiny base model, a temp artifact store, and real Postgres / Redis connections."""

from __future__ import annotations

import os
import socket
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Under pytest-xdist (make test runs one worker per core) every worker, and every service process a test starts,
# computes on one torch thread: two workers of two threads each on two cores wait on each other at every barrier.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

PG_URL = os.environ.get("POPULORA_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("POPULORA_TEST_REDIS", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def missing(what: str) -> None:
    """A requirement of the test is missing: skipped on a developer's machine, failed under CI=true (where `make
    install` provides everything the suite needs)."""
    if IN_CI:
        pytest.fail(what + " (CI=true: tests that need it fail rather than skip)")
    pytest.skip(what)


def need_server(name: str, port: int) -> None:
    """Skip locally when a server is down; under CI=true a missing server fails the test instead."""
    if not _port_open(port):
        missing(f"{name} does not answer on 127.0.0.1:{port}")


def published_benchmarks(*names: str) -> Path:
    """The directory $POPULORA_BENCHMARKS names (the published benchmark files, which the tree does not carry),
    holding each of `names`; skipped when it is not there (failed under CI=true)."""
    directory = os.environ.get("POPULORA_BENCHMARKS", "")
    if not directory:
        missing("POPULORA_BENCHMARKS is not set: it names the directory of the published benchmark files")
    absent = [n for n in names if not (Path(directory) / n).is_file()]
    if absent:
        missing(f"POPULORA_BENCHMARKS={directory} does not hold {', '.join(absent)}")
    return Path(directory)


@pytest.fixture(scope="session")
def tiny():
    """The `tiny` base model (loaded once per session; treat it as read-only)."""
    from populora.models import load_base_model

    return load_base_model("tiny")


@pytest.fixture
def one_torch_thread():
    """The tiny model's matmuls are too small to gain from intra-op threads, and on a shared 2-core box
    idle-spinning threads made such tests ten times slower; restored afterwards for the rest of the suite."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def store(tmp_path):
    from populora.store import ArtifactStore

    return ArtifactStore(tmp_path / "store")


@contextmanager
def pg_schema():
    """A fresh, empty Postgres schema on the real server (its URL); dropped afterwards."""
    need_server("Postgres", 5432)
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        engine = sa.create_engine(PG_URL)
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture
def pg_url():
    """A fresh, empty Postgres schema on the real server; dropped afterwards (a test that needs a second one takes
    it from pg_schema)."""
    with pg_schema() as url:
        yield url


@pytest.fixture
def redis_url():
    """The real Redis server, database 15, with a unique key prefix per test (returned as (url, prefix))."""
    need_server("Redis", 6379)
    import redis

    prefix = f"test-{uuid.uuid4().hex[:10]}"
    yield REDIS_URL, prefix
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


def sandbox_or_skip(why_not: str | None, make):
    """A real sandbox executor from `make()`; skipped locally when it cannot run here (`why_not`, or
    SandboxUnavailable from `make`), failed under CI=true."""
    from services.sandbox.executor import SandboxUnavailable

    if why_not:
        missing(why_not)
    try:
        return make()
    except SandboxUnavailable as e:
        if IN_CI:
            raise
        pytest.skip(str(e))


def zygote_or_skip(**kwargs):
    """A real zygote pool (bwrap, seccomp, setuid); skipped locally without root or bubblewrap, failed under CI."""
    import shutil

    from services.sandbox.zygote import ZygoteExecutor

    root_and_bwrap = os.geteuid() == 0 and shutil.which("bwrap")
    return sandbox_or_skip(None if root_and_bwrap else "the zygote backend needs root and bubblewrap",
                           lambda: ZygoteExecutor(**kwargs))


@pytest.fixture(scope="session")
def zygote():
    """One warm zygote pool per session for the sandbox and task-domain tests."""
    from services.sandbox.executor import Limits

    ex = zygote_or_skip(limits=Limits(timeout_s=2.0), workers=2)
    yield ex
    ex.close()


TEST_TOKEN = "test-token-0123456789"


@contextmanager
def served(service, token: str = TEST_TOKEN, timeout: float = 120.0):
    """`service` behind a real gRPC server on a free loopback port, and a client of it (populora.rpc.Remote) that
    presents `token`: the distributed path, end to end."""
    from populora.rpc import Remote, contract_of, make_server

    server, port, _ = make_server([service], 0, "127.0.0.1", TEST_TOKEN)
    remote = Remote(contract_of(service), f"127.0.0.1:{port}", token, timeout=timeout, retries=0)
    try:
        yield remote
    finally:
        remote.close()
        server.stop(None)


def pytest_configure(config):
    config.addinivalue_line("markers", "reference: makes the seeded run whose records other end-to-end tests are "
                                       "compared with (tests/e2e/records.py: made once, then read from the cache)")


def pytest_collection_modifyitems(config, items):
    """Every end-to-end test is `slow`; the slow tests run first. With one worker per core (pytest-xdist,
    `--dist worksteal`), a minute-long test started last would leave the other core idle for that minute; started
    first, the short tests fill in around it. The `reference` tests start before the other slow ones: the seeded
    runs they make are the references the distributed runs are compared with, which those would otherwise make
    again, each a run of its own, when they got there first."""
    for item in items:
        if "tests/e2e/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("e2e/"):
            item.add_marker(pytest.mark.slow)
    # stable: the files' order otherwise
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, item.get_closest_marker("reference") is None))
