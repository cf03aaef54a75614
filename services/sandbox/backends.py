"""The registry of sandbox backends, and the executor a SandboxConfig names."""

from __future__ import annotations

from services.sandbox.executor import Executor, Limits, SandboxUnavailable
from services.sandbox.gvisor import GvisorExecutor
from services.sandbox.subprocess_backend import SubprocessExecutor
from services.sandbox.zygote import ZygoteExecutor

EXECUTORS: dict[str, type[Executor]] = {"zygote": ZygoteExecutor, "subprocess": SubprocessExecutor,
                                        "gvisor": GvisorExecutor}


def make_executor(sandbox) -> Executor:
    """The executor `sandbox.backend` names (a SandboxConfig), with its limits, workers and isolation."""
    limits = Limits.from_config(sandbox)
    if sandbox.backend not in EXECUTORS:
        raise SandboxUnavailable(f"unknown sandbox.backend {sandbox.backend!r}; allowed: {sorted(EXECUTORS)}")
    if sandbox.backend == "zygote":
        return ZygoteExecutor(limits, sandbox.workers, sandbox.isolation, sandbox.seccomp)
    if sandbox.backend == "gvisor":
        return GvisorExecutor(limits, sandbox.workers, sandbox.seccomp)
    return SubprocessExecutor(limits, sandbox.workers)
