"""Fixtures of the sandbox tests: one warm zygote pool per session (real bwrap, seccomp, setuid)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import IN_CI


def zygote_or_skip(**kwargs):
    from services.sandbox.executors import SandboxUnavailable, ZygoteExecutor

    if os.geteuid() != 0 or not shutil.which("bwrap"):
        msg = "the zygote backend needs root and bubblewrap"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        return ZygoteExecutor(**kwargs)
    except SandboxUnavailable as e:
        if IN_CI:
            raise
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def zygote():
    from services.sandbox.executors import Limits

    ex = zygote_or_skip(limits=Limits(timeout_s=2.0), workers=2)
    yield ex
    ex.close()
