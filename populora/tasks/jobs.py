"""What the task domain asks an executor to run, and what comes back: plain dataclasses, no network."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "timeout", "memory", "output_limit", "error", "killed", "sandbox_error")


@dataclass
class Job:
    """One sandboxed run: execute `program`, then evaluate each of `calls` in the program's namespace and each
    of `literals` in a fresh namespace that holds only the restricted-expression constructors (spec 3.4).

    Everything in a job is model-written (a program, inputs, a predicted output) and judges only itself: no gold
    value is ever part of a job; the verifier rebuilds gold on the host (populora.tasks.literals) and compares
    there. The values come back as plain data in the order calls, then literals. 0 for a limit = the
    executor's default.
    """

    job_id: str
    program: str
    calls: list[str] = field(default_factory=list)
    literals: list[str] = field(default_factory=list)
    timeout_s: float = 0.0
    memory_mb: int = 0


@dataclass
class JobResult:
    """The outcome of a Job. `status` is one of STATUSES; `values` are plain Python data rebuilt by trusted
    code from the child's report (exact builtin types only), `reprs` their reprs; `error` is the exception's
    last line for `error` and what went wrong for the other failures."""

    job_id: str
    status: str
    values: list[Any] = field(default_factory=list)
    reprs: list[str] = field(default_factory=list)
    stdout: str = ""
    error: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # user + system CPU time of the job's process, as the kernel counted it (wait4)


Runner = Callable[[list[Job]], list[JobResult]]
"""Runs a batch of jobs and returns one result per job, in order (an executor's `run`)."""
