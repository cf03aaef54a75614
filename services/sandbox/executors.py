"""Executors: one interface, three backends (zygote, subprocess, gvisor), and the host-side verdict on a run.

Every backend reports the same raw facts about a job (exit code, whether the wall clock or the output limit
was hit, output bytes, the result channel's bytes); `classify` alone turns them into a status, so the backends
cannot disagree on what a result means.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from populora.tasks.jobs import Job, JobResult
from services.sandbox.codec import FrameError, parse_frame

PAYLOAD = Path(__file__).with_name("payload.py")
SETUP_FAILED = 120  # payload._child's exit code when sandbox set-up failed
PIPELINE = 3  # jobs queued at each zygote
# Standard-library modules each zygote imports once, so that no job pays to import them: typing alone costs about
# 3 ms per job (an eighth of HumanEval imports it). Every module also makes each fork a little dearer (more memory
# to map and copy on write), so this is the short list programs actually use, not all they might.
PRELOAD = ("typing", "math", "random", "copy", "string", "collections", "re", "heapq", "itertools", "functools")


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
    nproc: int = 1  # must stay 1: the seccomp filter lets the zygote fork, and this is what stops a job forking
    tmp_mb: int = 64
    preload: tuple[str, ...] = PRELOAD

    @classmethod
    def from_config(cls, sandbox) -> Limits:
        return cls(timeout_s=sandbox.timeout_s, memory_mb=sandbox.memory_mb, output_bytes=sandbox.output_kb * 1024)


def classify(job: Job, raw: dict, nonce: bytes) -> JobResult:
    """The status of one run, from the facts the backend saw (never from what the job says about itself).

    timeout: the wall clock or the CPU limit (SIGXCPU/SIGKILL) ended it. output_limit: it wrote more than the
    limit. killed: another signal (segfault, abort). sandbox_error: set-up failed, or the result channel did not
    hold exactly one frame with this job's nonce, or it exited without the epilogue. Otherwise the frame's
    status: ok, error (with the exception's last line) or memory.
    """
    seconds = float(raw.get("seconds", 0.0))
    stdout = raw.get("stdout", "")
    if isinstance(stdout, bytes):
        stdout = stdout.decode("latin-1")
    stdout = stdout.encode("latin-1").decode("utf-8", "replace")
    base = {"job_id": job.job_id, "stdout": stdout, "seconds": seconds}
    if raw.get("sandbox_error"):
        return JobResult(status="sandbox_error", error=raw["sandbox_error"], **base)
    if raw.get("timed_out"):
        return JobResult(status="timeout", error="wall-clock limit reached", **base)
    if raw.get("output_exceeded"):
        return JobResult(status="output_limit", error="output limit reached", **base)
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


def _job_message(job: Job, limits: Limits, nonce: bytes) -> dict:
    return {"program": job.program, "calls": list(job.calls), "literals": list(job.literals),
            "timeout_s": float(job.timeout_s or limits.timeout_s), "memory_mb": int(job.memory_mb or limits.memory_mb),
            "output_bytes": limits.output_bytes, "nonce": nonce.hex()}


def python_command() -> list[str]:
    """The interpreter without site-packages, user site or script-dir path; with a clean environment this is
    `python -I -S` except that PYTHONHASHSEED=0 is honoured (set reprs are then the same in every process)."""
    return [os.path.realpath(sys.executable), "-P", "-S", "-s", "-B"]


def clean_env() -> dict[str, str]:
    return {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


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


# -------------------------------------------------------------------------------------------------- seccomp
DENIED_SYSCALLS = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "execve", "execveat", "ptrace",
    "process_vm_readv", "process_vm_writev", "vfork", "kill", "tkill", "tgkill", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load", "reboot",
    "swapon", "swapoff", "personality", "acct", "settimeofday", "clock_settime", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "setsid", "setpgid")
# clone with any of these flags fails: no threads, no vfork-style spawn (posix_spawn, os.system), no namespaces.
CLONE_DENIED_FLAGS = {"CLONE_VM": 0x100, "CLONE_THREAD": 0x10000, "CLONE_NEWTIME": 0x80, "CLONE_NEWNS": 0x20000,
                      "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000,
                      "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000}
_BPF_CACHE: bytes | None = None


def seccomp_bpf() -> bytes:
    """The compiled seccomp filter (raw BPF), built once with libseccomp, that each zygote loads on itself before
    its first fork, so every job inherits it at no cost (attaching a filter in each child cost about 0.1-0.2 ms, a
    twentieth of a job). Default allow; every syscall in DENIED_SYSCALLS fails with EPERM, as does clone with any
    flag of CLONE_DENIED_FLAGS; clone3 fails with ENOSYS, so libc falls back to clone. A plain fork stays allowed,
    because the zygote forks each job: the job's RLIMIT_NPROC of 1 (its uid is its worker's own) is what makes
    its fork fail. So a job is one process: no threads, no fork bombs, nothing left over after the kill. The
    zygote kills a job through its pidfd (`pidfd_send_signal`), since `kill` is denied."""
    global _BPF_CACHE
    if _BPF_CACHE is None:
        import errno

        import pyseccomp as sc

        flt = sc.SyscallFilter(defaction=sc.ALLOW)
        flt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree of syscall numbers instead of a linear list
        for name in DENIED_SYSCALLS:
            try:
                flt.add_rule(sc.ERRNO(errno.EPERM), name)
            except (ValueError, OSError, RuntimeError):
                continue  # not a syscall on this architecture
        for flag in CLONE_DENIED_FLAGS.values():
            flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        with tempfile.TemporaryFile() as f:
            flt.export_bpf(f)
            f.seek(0)
            _BPF_CACHE = f.read()
    return _BPF_CACHE


# --------------------------------------------------------------------------------------------------- zygote
def bwrap_command(tmp_mb: int) -> list[str]:
    """A bubblewrap namespace for one zygote: every namespace but the user one (a user namespace would map only
    uid 0 and make setuid impossible), all capabilities dropped except those the zygote needs to hand each
    job its own uid and clean its directory; a read-only root holding only /usr, the interpreter tree (mounted
    readable even when it lives under a mode-0700 home) and payload.py; a private size-capped tmpfs on /tmp."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    cmd = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in clean_env().items():
        cmd += ["--setenv", key, value]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    cmd += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for tree in sorted({prefix, os.path.dirname(os.path.dirname(exe))}):
        if tree.startswith("/usr/") or tree == "/usr":
            continue
        parents = [p for p in Path(tree).parents if str(p) != "/"]
        for parent in reversed(parents):  # traversable by the job's uid even under a mode-0700 home
            cmd += ["--perms", "0755", "--dir", str(parent)]
        cmd += ["--ro-bind", tree, tree]
    cmd += ["--ro-bind", str(PAYLOAD), "/sandbox/payload.py", "--proc", "/proc", "--dev", "/dev",
            "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp", "--remount-ro", "/", "--chdir", "/tmp",
            "--cap-drop", "ALL"]
    for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER"):
        cmd += ["--cap-add", cap]
    return cmd + [exe, "-P", "-S", "-s", "-B", "/sandbox/payload.py", "zygote"]


def unshare_command() -> list[str]:
    """Fallback where bwrap is missing: util-linux unshare (root only) with new mount, net, pid, ipc and uts
    namespaces; the zygote then mounts a private tmpfs on /tmp and remounts / read-only itself."""
    return ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "--ipc", "--uts",
            "--kill-child", *python_command(), str(PAYLOAD), "zygote"]


def _hidden_trees() -> list[list[str]]:
    """[tree, ancestor] for an interpreter tree under a directory other users cannot traverse."""
    tree = os.path.realpath(sys.base_prefix)
    blocked = [str(p) for p in reversed(Path(tree).parents) if str(p) != "/" and not os.stat(p).st_mode & 0o001]
    return [[tree, blocked[0]]] if blocked else []


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def pick_isolation(requested: str) -> str:
    """`auto` -> bwrap when it runs here, else unshare (as root); a named layer must work or it is an error."""
    probe_bwrap = ["bwrap", "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "true"]
    if requested in ("auto", "bwrap") and shutil.which("bwrap") and _works(probe_bwrap):
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailable("sandbox.isolation=bwrap but bubblewrap does not run here; install the "
                                 "`bubblewrap` package (make apt) or set sandbox.isolation=unshare")
    if requested in ("auto", "unshare") and os.geteuid() == 0 and shutil.which("unshare") \
            and _works(["unshare", "--mount", "--net", "--pid", "--fork", "true"]):
        return "unshare"
    if requested == "none":
        return "none"
    raise SandboxUnavailable(f"sandbox.isolation={requested}: neither bubblewrap nor unshare (as root) works "
                             "here; install bubblewrap, run the sandbox as root, or (development only) set "
                             "sandbox.isolation=none")


class _Worker:
    """One warm zygote process and the unprivileged uid its jobs run as. Not thread-safe: one owner thread."""

    def __init__(self, index: int, uid: int | None, isolation: str, limits: Limits, seccomp: bool):
        self.index, self.uid, self.isolation, self.limits, self.seccomp = index, uid, isolation, limits, seccomp
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()
        self.start()

    def start(self) -> None:
        if self.isolation == "bwrap":
            cmd = bwrap_command(self.limits.tmp_mb)
            tmp = "/tmp"
        elif self.isolation == "unshare":
            cmd, tmp = unshare_command(), "/tmp"
        else:
            cmd, tmp = [*python_command(), str(PAYLOAD), "zygote"], tempfile.mkdtemp(prefix="populora-sbx-")
        env = clean_env() if self.isolation != "bwrap" else None
        self.log.seek(0)
        self.log.truncate()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, close_fds=True, start_new_session=True)
        cfg = {"uid": self.uid, "tmp": tmp, "fsize": self.limits.fsize_bytes, "nofile": self.limits.nofile,
               "nproc": self.limits.nproc, "seccomp": seccomp_bpf().hex() if self.seccomp else "",
               "mount_setup": self.isolation == "unshare", "tmp_mb": self.limits.tmp_mb,
               "expose": _hidden_trees() if self.isolation == "unshare" else [], "preload": list(self.limits.preload)}
        try:
            self._send(cfg)
            hello = self._recv(timeout=30.0)
        except (OSError, EOFError, TimeoutError) as e:
            raise SandboxUnavailable(f"sandbox worker {self.index} ({self.isolation}) did not start: {e}; "
                                     f"its stderr: {self.stderr()[-1500:]}") from None
        if not hello.get("ready"):
            raise SandboxUnavailable(f"sandbox worker {self.index} failed to start: {hello}")

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
        msg = _job_message(job, self.limits, nonce)
        self._send(msg)
        return nonce, msg["timeout_s"]

    def recv_report(self, timeout_s: float) -> dict:
        """The next report, in the order jobs were sent (the zygote runs them one after another)."""
        return self._recv(timeout=timeout_s + 10.0)

    def failure(self, e: Exception) -> str:
        tail = self.stderr().strip()[-800:]
        return f"sandbox worker {self.index} failed: {e}" + (f"; its stderr: {tail}" if tail else "")

    def execute(self, job: Job) -> JobResult:
        """Run one job; a worker that dies or hangs is replaced and the job reported as sandbox_error."""
        try:
            nonce, timeout_s = self.send_job(job)
            raw = self.recv_report(timeout_s)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            err = self.failure(e)
            self.restart()
            return JobResult(job.job_id, "sandbox_error", error=err)
        return classify(job, raw, nonce)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
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
                f.close()
        self.proc = None


# The capabilities the sandbox service needs in its container (as root): bubblewrap's namespaces and mounts
# (SYS_ADMIN) and loopback in the new network namespace (NET_ADMIN); the zygote's handing each job its worker's uid
# (SETUID, SETGID) and directory (CHOWN, DAC_OVERRIDE, FOWNER) and killing it (KILL). The deployment manifests
# grant exactly these; tests/sandbox runs the zygote with no others.
CONTAINER_CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER")


def _uid_base() -> int:
    # Distinct uids per pool and per worker: one job's fork attempt must not eat another worker's process
    # limit, nor may two pools on one host share a uid.
    return 200_000 + (os.getpid() % 100_000) * 64


class ZygoteExecutor(Executor):
    """The default backend: `workers` warm zygotes (one per core by default), each in its own namespace, each
    forking one child per job. Jobs of a batch are spread over the workers; a dead worker is replaced."""

    name = "zygote"

    def __init__(self, limits: Limits | None = None, workers: int = 0, isolation: str = "auto",
                 seccomp: bool = True):
        self.limits = limits or Limits()
        if self.limits.nproc != 1:
            raise ValueError(f"Limits.nproc is {self.limits.nproc}; the zygote backend needs 1: its seccomp filter "
                             "lets a plain fork through, and the process limit is what stops a job forking")
        self.isolation_kind = pick_isolation(isolation)
        self.seccomp = seccomp
        root = os.geteuid() == 0
        if self.isolation_kind != "none" and not root:
            raise SandboxUnavailable("the zygote backend drops each job to its own uid and needs to run as root "
                                     "(inside a container is fine); use sandbox.backend=subprocess otherwise")
        n = workers or os.cpu_count() or 1
        base = _uid_base()
        self._queue: queue.Queue = queue.Queue()
        self._workers = [_Worker(i, base + i if root else None, self.isolation_kind, self.limits, seccomp)
                         for i in range(n)]
        self._threads = [threading.Thread(target=self._serve, args=(w,), daemon=True, name=f"sandbox-w{w.index}")
                         for w in self._workers]
        self._closed = False
        for t in self._threads:
            t.start()

    def _serve(self, worker: _Worker) -> None:
        """Keep up to PIPELINE jobs queued at the zygote, so it starts the next job the moment one ends instead
        of waiting for this thread to be scheduled; reports come back in order. Never dies: any failure is the
        queued jobs' sandbox_error and a fresh zygote."""
        inflight: deque = deque()
        state = {"stopping": False}
        while not (state["stopping"] and not inflight):
            try:
                self._serve_once(worker, inflight, state)
            except Exception as e:  # noqa: BLE001 - a waiting caller must always get an answer
                self._fail_all(worker, inflight, e)

    def _serve_once(self, worker: _Worker, inflight: deque, state: dict) -> None:
        while not state["stopping"] and len(inflight) < PIPELINE:
            try:
                item = self._queue.get(block=not inflight)
            except queue.Empty:
                break
            if item is None:
                state["stopping"] = True
                break
            job, fut = item
            try:
                nonce, timeout_s = worker.send_job(job)
            except Exception as e:  # noqa: BLE001 - includes a zygote that cannot be restarted
                self._fail_all(worker, inflight, e, (job, fut))
                continue
            inflight.append((job, fut, nonce, timeout_s))
        if not inflight:
            return
        job, fut, nonce, timeout_s = inflight[0]
        try:
            raw = worker.recv_report(timeout_s)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            self._fail_all(worker, inflight, e)
            return
        inflight.popleft()
        try:
            fut.set_result(classify(job, raw, nonce))
        except Exception as e:  # noqa: BLE001 - a report this host cannot read must not stop the worker
            fut.set_result(JobResult(job.job_id, "sandbox_error", error=f"unreadable report: {e}"))

    @staticmethod
    def _fail_all(worker: _Worker, inflight: deque, e: Exception, extra: tuple | None = None) -> None:
        """The zygote died or hung: its queued jobs are sandbox_error, and a fresh zygote takes its place."""
        err = worker.failure(e)
        pending = [(j, f) for j, f, *_ in inflight] + ([extra] if extra else [])
        inflight.clear()
        try:
            worker.restart()
        except Exception as restart_error:  # noqa: BLE001 - reported to every caller waiting on this worker
            err += f"; restart failed: {restart_error}"
        for job, fut in pending:
            fut.set_result(JobResult(job.job_id, "sandbox_error", error=err))

    def run(self, jobs: list[Job]) -> list[JobResult]:
        if self._closed:
            raise RuntimeError("this executor was closed")
        futures: list[Future] = []
        for job in jobs:
            fut: Future = Future()
            self._queue.put((job, fut))
            futures.append(fut)
        return [f.result() for f in futures]

    def isolation(self) -> list[str]:
        layers = {"bwrap": ["bwrap(net,pid,ipc,uts,cgroup,mount namespaces)", "read-only root",
                            "private tmpfs", "capabilities dropped"],
                  "unshare": ["unshare(net,pid,ipc,uts,mount namespaces)", "read-only root", "private tmpfs"],
                  "none": []}[self.isolation_kind]
        if self._workers and self._workers[0].uid is not None:
            layers.append("setuid per worker")
        layers += ["rlimits(cpu,as,fsize,nproc=1,nofile,core)", "wall-clock kill"]
        if self.seccomp:
            layers.append("seccomp on zygote and jobs(no socket/exec/ptrace/kill/threads/namespaces)")
        return layers

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=30)
        for w in self._workers:
            w.stop()
            w.log.close()


# ----------------------------------------------------------------------------------------------- subprocess
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
    """One fresh `python` per job (the simple way, for comparison): own session and temp directory, the
    unprivileged uid when running as root, rlimits, wall-clock kill of the whole session. No namespaces, no
    seccomp: a job can reach the network. Runs `workers` jobs at a time."""

    name = "subprocess"

    def __init__(self, limits: Limits | None = None, workers: int = 0, uid: int | None = None,
                 drop_uid: bool = True):
        self.limits = limits or Limits()
        self.workers = workers or os.cpu_count() or 1
        if drop_uid and uid is None and os.geteuid() == 0 and _world_executable(python_command()[0]):
            uid = 65534
        self.uid = uid

    def command(self) -> list[str]:
        return [*python_command(), str(PAYLOAD), "one"]

    def _one(self, job: Job) -> JobResult:
        nonce = os.urandom(16)
        msg = _job_message(job, self.limits, nonce)
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
        code = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        return {"exit": code, "timed_out": timed_out, "output_exceeded": exceeded, "stdout": b"".join(out)[:limit],
                "result": b"".join(res)}

    def run(self, jobs: list[Job]) -> list[JobResult]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(self._one, jobs))

    def isolation(self) -> list[str]:
        layers = ["fresh process per job", "rlimits(cpu,as,fsize,nofile,core)", "wall-clock kill"]
        return (["setuid"] if self.uid is not None else []) + layers


# ------------------------------------------------------------------------------------------------- gvisor
class GvisorExecutor(SubprocessExecutor):
    """One `runsc do` sandbox per job (gVisor's user-space kernel, no network), where runsc is installed."""

    name = "gvisor"

    def __init__(self, limits: Limits | None = None, workers: int = 0):
        if not shutil.which("runsc"):
            raise SandboxUnavailable("sandbox.backend=gvisor needs gVisor's `runsc` on PATH (see "
                                     "https://gvisor.dev/docs/user_guide/install/); it is not installed here. "
                                     "Use sandbox.backend=zygote")
        super().__init__(limits, workers, uid=None, drop_uid=False)  # runsc sets up its own user

    def command(self) -> list[str]:  # pragma: no cover - needs runsc
        return ["runsc", "--network=none", "do", *python_command(), str(PAYLOAD), "one"]

    def isolation(self) -> list[str]:
        return ["gVisor runsc (user-space kernel, no network)", "fresh sandbox per job"]


EXECUTORS: dict[str, type[Executor]] = {"zygote": ZygoteExecutor, "subprocess": SubprocessExecutor,
                                        "gvisor": GvisorExecutor}


def make_executor(sandbox) -> Executor:
    """The executor `sandbox.backend` names (a SandboxConfig), with its limits and workers."""
    limits = Limits.from_config(sandbox)
    if sandbox.backend not in EXECUTORS:
        raise SandboxUnavailable(f"unknown sandbox.backend {sandbox.backend!r}; allowed: {sorted(EXECUTORS)}")
    if sandbox.backend == "zygote":
        return ZygoteExecutor(limits, sandbox.workers, sandbox.isolation, sandbox.seccomp)
    return EXECUTORS[sandbox.backend](limits, sandbox.workers)
