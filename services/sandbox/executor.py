"""The executor interface every sandbox backend implements, the per-job limits, and the job's wire message."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from populora.tasks.jobs import Job, JobResult

# Standard-library modules each zygote imports once, so that no job pays to import them: typing alone costs about
# 3 ms per job (an eighth of HumanEval imports it). Every module also makes each fork a little dearer (more memory
# to map and copy on write), so this is the short list programs actually use, not all they might.
PRELOAD = ("typing", "math", "random", "copy", "string", "collections", "re", "heapq", "itertools", "functools")
# Inside gVisor (ptrace platform) a fork costs more for every page it copies than the imports save: on the
# benchmark mix, 29 ms of CPU per job with nothing preloaded against 33 ms with PRELOAD (interleaved runs).
GVISOR_PRELOAD: tuple[str, ...] = ()


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be set up on this machine; the message says what to install or set."""


@dataclass
class Limits:
    """Per-job defaults (a Job's own non-zero values win)."""

    timeout_s: float = 5.0
    memory_mb: int = 256
    output_bytes: int = 64 * 1024
    fsize_bytes: int = 16 * 1024 * 1024
    nofile: int = 64
    nproc: int = 1  # must stay 1: the seccomp filter lets the fork server fork, and this is what stops a job forking
    tmp_mb: int = 64
    # filesystem entries a job may leave in its directory (its files' sizes are capped by fsize_bytes and tmp_mb);
    # one that leaves more is output_limit, and removing them costs its worker no more than the job took to make them
    fs_entries: int = 10_000
    preload: tuple[str, ...] | None = None  # None: PRELOAD, or GVISOR_PRELOAD inside gVisor

    @classmethod
    def from_config(cls, sandbox) -> Limits:
        return cls(timeout_s=sandbox.timeout_s, memory_mb=sandbox.memory_mb, output_bytes=sandbox.output_kb * 1024)


def job_message(job: Job, limits: Limits, nonce: bytes) -> dict:
    """What the runtime in the jail receives for one job: model-written text and limits, never a gold value."""
    return {"program": job.program, "calls": list(job.calls), "literals": list(job.literals),
            "timeout_s": float(job.timeout_s or limits.timeout_s), "memory_mb": int(job.memory_mb or limits.memory_mb),
            "output_bytes": limits.output_bytes, "nonce": nonce.hex(), "id": job.job_id}


class Executor(ABC):
    """Runs batches of jobs. `run` returns one JobResult per job, in order; it never raises for a job's fault."""

    name = "executor"

    @abstractmethod
    def run(self, jobs: list[Job]) -> list[JobResult]: ...

    @abstractmethod
    def isolation(self) -> list[str]:
        """The isolation layers active, in words (reported by the benchmark and /healthz)."""

    def close(self) -> None:  # noqa: B027 - optional: only pooled backends hold processes
        """Stop worker processes; the executor is unusable afterwards."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
