"""One warm zygote and the protocol the host speaks with it: length-prefixed JSON messages on its stdin and
stdout, jobs sent ahead and reports read back in order, and a zygote that dies or hangs replaced by a fresh one
that passes the start-up check again before it runs a job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from populora.tasks.jobs import Job, JobResult
from services.sandbox import seccomp as filters
from services.sandbox.executor import GVISOR_PRELOAD, PRELOAD, Limits, SandboxUnavailable, job_message
from services.sandbox.startup_check import prove_layers, prove_nothing_survives
from services.sandbox.verdict import classify


@dataclass
class Launch:
    """How one zygote is started: its command, environment, inherited fds, its job directories' parent, and the
    root it chroots into before its first job (None: it stays where it starts; `tmp` is then inside that root)."""

    cmd: list[str]
    env: dict[str, str] | None
    tmp: str
    pass_fds: tuple[int, ...] = ()
    on_stop: list = field(default_factory=list)
    root: str | None = None


class ZygoteWorker:
    """One warm zygote process and the unprivileged uid its jobs run as. Not thread-safe: one owner thread."""

    def __init__(self, index: int, uid: int | None, profile: str, limits: Limits, seccomp: bool, launcher,
                 jailed: bool = True, own_root: bool = False):
        self.index, self.uid, self.profile, self.limits, self.seccomp = index, uid, profile, limits, seccomp
        self.jailed, self.own_root = jailed, own_root
        self.launcher = launcher
        self.proc: subprocess.Popen | None = None
        self.launch: Launch | None = None
        self.layers: list[str] = []
        self.log = tempfile.TemporaryFile()
        self.start()

    def start(self) -> None:
        self.launch = self.launcher(self)
        self.log.seek(0)
        self.log.truncate()
        try:
            self.proc = subprocess.Popen(self.launch.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log, env=self.launch.env, close_fds=True,
                                         pass_fds=self.launch.pass_fds, start_new_session=True)
        finally:
            for fd in self.launch.pass_fds:
                os.close(fd)
        gvisor = self.profile == "gvisor"
        preload = self.limits.preload if self.limits.preload is not None else GVISOR_PRELOAD if gvisor else PRELOAD
        cfg = {"uid": self.uid, "tmp": self.launch.tmp, "fsize": self.limits.fsize_bytes,
               "nofile": self.limits.nofile, "nproc": self.limits.nproc, "fs_entries": self.limits.fs_entries, "preload": list(preload),
               "seccomp": filters.jail_filter(deny_signals=not gvisor).hex() if self.seccomp else "",
               "no_fork": filters.no_fork_filter().hex() if gvisor else "",
               # only where the file system is the sandbox's own: its gVisor sandbox, or the container of a
               # service that is pid 1 (never a host's /tmp)
               "close_shared": gvisor and (self.own_root or os.getpid() == 1),
               "root": self.launch.root}
        try:
            self._send(cfg)
            hello = self._recv(timeout=60.0)
        except (OSError, EOFError, TimeoutError) as e:
            self.stop()
            raise SandboxUnavailable(f"sandbox worker {self.index} ({self.profile}) did not start: {e}; "
                                     f"its stderr: {self.stderr()[-1500:]}") from None
        if not hello.get("ready"):
            self.stop()
            raise SandboxUnavailable(f"sandbox worker {self.index} failed to start: {hello}")
        if self.seccomp and not gvisor and hello.get("kill") != "pidfd":
            self.stop()
            raise SandboxUnavailable("this kernel has no pidfd_open, which the zygote needs to kill jobs under the "
                                     "seccomp filter; inside gVisor set sandbox.isolation=gvisor")
        try:
            self.layers = prove_layers(self)
            if self.jailed:
                self.layers += self._check_state()
        except SandboxUnavailable:
            self.stop()
            raise

    def _check_state(self) -> list[str]:
        """The start-up check of "nothing survives a job" on this worker (startup_check.prove_nothing_survives)."""
        return prove_nothing_survives(self)

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def _send(self, msg: dict) -> None:
        data = json.dumps(msg).encode()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(len(data).to_bytes(4, "big") + data)
        self.proc.stdin.flush()

    def _read_exact(self, n: int, deadline: float) -> bytes:
        import select

        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("the sandbox worker did not answer in time")
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise EOFError("the sandbox worker exited")
            buf += chunk
        return buf

    def _recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        size = int.from_bytes(self._read_exact(4, deadline), "big")
        return json.loads(self._read_exact(size, deadline))

    def send_job(self, job: Job) -> tuple[bytes, float]:
        """Queue one job on the zygote; returns (nonce, timeout) for reading its report later."""
        if self.proc is None or self.proc.poll() is not None:
            self.restart()  # an earlier restart failed or the zygote exited while idle
        nonce = os.urandom(16)
        msg = job_message(job, self.limits, nonce)
        self._send(msg)
        return nonce, msg["timeout_s"]

    def recv_report(self, timeout_s: float) -> dict:
        """The next report, in the order jobs were sent (the zygote runs them one after another), within the job's
        time and 10 s. Removing what a job left in its directory is linear in it and can take longer than the job
        took to make it (gVisor, a disk): while it goes on the zygote says so once a second, and each time the
        host waits 10 s more. A zygote that says nothing for that long is hung."""
        wait = timeout_s + 10.0
        while True:
            msg = self._recv(timeout=wait)
            if "cleaning" not in msg:
                return msg
            wait = 10.0

    def failure(self, e: Exception) -> str:
        tail = self.stderr().strip()[-800:]
        return f"sandbox worker {self.index} failed: {e}" + (f"; its stderr: {tail}" if tail else "")

    def execute(self, job: Job, restart: bool = True) -> JobResult:
        """Run one job; a worker that dies or hangs is replaced and the job reported as sandbox_error."""
        try:
            nonce, timeout_s = self.send_job(job)
            raw = self.recv_report(timeout_s)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            err = self.failure(e)
            if restart:
                self.restart()
            return JobResult(job.job_id, "sandbox_error", error=err)
        return classify(job, raw, nonce)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for f in (self.proc.stdin, self.proc.stdout):
                if f is not None:
                    try:
                        f.close()
                    except OSError:  # unflushed bytes to a zygote that is gone
                        pass
            self.proc = None
        if self.launch is not None:
            for cleanup in self.launch.on_stop:
                cleanup()
            self.launch.on_stop.clear()
