"""Fixtures of the sandbox tests: the gvisor backend (one warm pool of gVisor sandboxes per session; skipped
locally where runsc cannot run, failed under CI=true, since make install puts runsc on the machine) and the REST
app served for real by uvicorn on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from populora.ports import free_port
from tests.conftest import sandbox_or_skip


@contextmanager
def serve_rest(app) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port; yields its base URL once it answers."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(url + "/healthz", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def gvisor_or_skip(**kwargs):
    from services.sandbox.gvisor import GvisorExecutor, runsc_available

    return sandbox_or_skip(runsc_available(), lambda: GvisorExecutor(**kwargs))


@pytest.fixture(scope="session")
def gvisor():
    from services.sandbox.executor import Limits

    ex = gvisor_or_skip(limits=Limits(timeout_s=2.0), workers=2)
    yield ex
    ex.close()
