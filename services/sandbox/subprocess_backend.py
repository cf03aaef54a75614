"""The subprocess backend: one fresh `python` per job, the simple way, kept for comparison and for machines
without root."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from populora.tasks.jobs import Job, JobResult
from services.sandbox.executor import Executor, Limits, job_message
from services.sandbox.jail import RUNTIME, clean_env, python_command
from services.sandbox.verdict import classify


def _child_limits(limits: Limits, timeout_s: float, memory_mb: int, uid: int | None):
    """preexec_fn of the subprocess backend: own session, the job's uid, the same rlimits as the zygote's."""

    def setup() -> None:
        os.setsid()
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        cpu = int(timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize_bytes, limits.fsize_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return setup


def _world_executable(path: str) -> bool:
    """Whether an unprivileged uid can reach and run `path` (an interpreter under a mode-0700 home cannot)."""
    p = Path(path)
    dirs_ok = all(os.stat(d).st_mode & 0o001 for d in p.parents)
    return dirs_ok and bool(os.stat(p).st_mode & 0o001)


class SubprocessExecutor(Executor):
    """One fresh `python` per job: own session and temp directory, the unprivileged uid when running as root,
    rlimits, wall-clock kill of the whole session. No namespaces, no seccomp: a job can reach the network. Runs
    `workers` jobs at a time."""

    name = "subprocess"

    def __init__(self, limits: Limits | None = None, workers: int = 0, uid: int | None = None,
                 drop_uid: bool = True):
        self.limits = limits or Limits()
        self.workers = workers or os.cpu_count() or 1
        if drop_uid and uid is None and os.geteuid() == 0 and _world_executable(python_command()[0]):
            uid = 65534
        self.uid = uid

    def command(self) -> list[str]:
        return [*python_command(), str(RUNTIME), "one"]

    def _one(self, job: Job) -> JobResult:
        nonce = os.urandom(16)
        msg = job_message(job, self.limits, nonce)
        workdir = tempfile.mkdtemp(prefix="populora-job-")
        if self.uid is not None:
            os.chown(workdir, self.uid, self.uid)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=workdir, env=clean_env(),
                                    preexec_fn=_child_limits(self.limits, msg["timeout_s"], msg["memory_mb"],
                                                             self.uid))
            raw = self._collect(proc, msg, start)
        except (OSError, subprocess.SubprocessError) as e:
            raw = {"sandbox_error": f"cannot start the job's interpreter: {e}"}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        raw["seconds"] = time.monotonic() - start
        return classify(job, raw, nonce)

    def _collect(self, proc: subprocess.Popen, msg: dict, start: float) -> dict:
        """Feed the job; read its output (stderr) and result (stdout) with the zygote's wall-clock and size
        limits; kill its whole session at the deadline."""
        import select

        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(json.dumps(msg).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        out: list[bytes] = []
        res: list[bytes] = []
        limit = msg["output_bytes"]
        fds = {proc.stderr.fileno(): out, proc.stdout.fileno(): res}
        deadline = start + msg["timeout_s"]
        timed_out = exceeded = False
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(list(fds), [], [], left)
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    fds[fd].append(data)
                else:
                    del fds[fd]
            if sum(map(len, out)) + sum(map(len, res)) > limit:
                exceeded = True
                break
        if timed_out or exceeded:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here for its rusage: the CPU time the job used
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        proc.stderr.close()
        return {"exit": code, "cpu_seconds": usage.ru_utime + usage.ru_stime, "timed_out": timed_out,
                "output_exceeded": exceeded, "stdout": b"".join(out)[:limit], "result": b"".join(res)}

    def run(self, jobs: list[Job]) -> list[JobResult]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(self._one, jobs))

    def isolation(self) -> list[str]:
        layers = ["fresh process per job", "rlimits(cpu,as,fsize,nofile,core)", "wall-clock kill"]
        return (["setuid"] if self.uid is not None else []) + layers
