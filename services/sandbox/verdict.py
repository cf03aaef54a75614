"""The host's verdict on one run: every backend reports the same raw facts about a job (exit code, whether the
wall clock or the output limit was hit, output bytes, the result channel's bytes), and `classify` alone turns
them into a status, so the backends cannot disagree on what a result means."""

from __future__ import annotations

import signal

from populora.tasks.jobs import Job, JobResult
from services.sandbox.codec import FrameError, parse_frame
from services.sandbox.jail_runtime import SETUP_FAILED


def classify(job: Job, raw: dict, nonce: bytes) -> JobResult:
    """The status of one run, from the facts the backend saw (never from what the job says about itself).

    timeout: the wall clock or the CPU limit (SIGXCPU/SIGKILL) ended it. output_limit: it wrote more than the
    limit, or left more filesystem entries in its directory than Limits.fs_entries. killed: another signal
    (segfault, abort). error: it exited (os._exit) before the epilogue wrote any result. sandbox_error: set-up failed,
    or the result channel held something other than exactly one frame with this job's nonce. Otherwise the frame's
    status: ok, error (with the exception's last line) or memory.
    """
    seconds = float(raw.get("seconds", 0.0))
    stdout = raw.get("stdout", "")
    if isinstance(stdout, bytes):
        stdout = stdout.decode("latin-1")
    stdout = stdout.encode("latin-1").decode("utf-8", "replace")
    base = {"job_id": job.job_id, "stdout": stdout, "seconds": seconds,
            "cpu_seconds": max(0.0, float(raw.get("cpu_seconds", 0.0)))}
    if raw.get("sandbox_error"):
        return JobResult(status="sandbox_error", error=raw["sandbox_error"], **base)
    if raw.get("timed_out"):
        return JobResult(status="timeout", error="wall-clock limit reached", **base)
    if raw.get("output_exceeded"):
        return JobResult(status="output_limit", error="output limit reached", **base)
    if raw.get("fs_entries"):
        return JobResult(status="output_limit", error=f"left {int(raw['fs_entries'])} filesystem entries in its "
                                                      "directory, over the limit", **base)
    code = int(raw.get("exit", 0))
    if code == SETUP_FAILED:
        return JobResult(status="sandbox_error", error=f"sandbox set-up failed: {stdout[-500:]}", **base)
    if code < 0:
        sig = -code
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return JobResult(status="timeout", error="CPU limit reached", **base)
        return JobResult(status="killed", error=f"killed by {signal.Signals(sig).name}", **base)
    result = raw.get("result", b"")
    if isinstance(result, str):
        result = result.encode("latin-1")
    if not result:
        # set-up failures and signals are handled above: an empty result channel after a normal exit is the
        # program's own doing (os._exit), a failure of the program, not of the sandbox
        return JobResult(status="error", error=f"SystemExit: the program exited with code {code} before its "
                                               "result", **base)
    try:
        frame = parse_frame(result, nonce)
    except FrameError as e:
        return JobResult(status="sandbox_error", error=str(e), **base)
    if code != 0:
        return JobResult(status="sandbox_error", error=f"exited with code {code} after its result", **base)
    values = frame["values"] if frame["status"] == "ok" else []
    try:
        reprs = [repr(v) for v in values]
    except ValueError as e:  # an int past Python's 4300-digit str limit
        return JobResult(status="error", error=f"UnsupportedOutput: {e}", **base)
    return JobResult(status=frame["status"], values=values, reprs=reprs, error=frame["error"], **base)
