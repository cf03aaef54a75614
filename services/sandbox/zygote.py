"""The zygote backend: warm zygotes in jails, one per worker, each forking one child per job, and the start-up
check that proves each zygote's isolation layers before it runs a job."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from populora.tasks.jobs import Job, JobResult
from services.sandbox import seccomp as filters
from services.sandbox.executor import (
    GVISOR_PRELOAD,
    PRELOAD,
    Executor,
    Limits,
    SandboxUnavailable,
    job_message,
)
from services.sandbox.jail import (
    RUNTIME,
    Interpreter,
    blank_environ_block,
    build_runtime_root,
    bwrap_args,
    clean_env,
    pick_isolation,
    python_command,
    unshare_command,
)
from services.sandbox.jail_runtime import remove_tree
from services.sandbox.state_kinds import KINDS, find_all_program, leave_all_program
from services.sandbox.verdict import classify

PIPELINE = 3  # jobs queued at each zygote
RETRIES = 2  # times a job queued behind a failed worker goes back to the shared queue
STATE_SECRET = 3  # what the start-up check's first job leaves by every kind of state (state_kinds.py)
JAIL_ENV_NAMES = (*clean_env(), "LD_LIBRARY_PATH")

# Run as the first job of every zygote (it is ours, not model-written): what a job can and cannot do in this
# jail. check_layers compares it with what the profile promises, so a layer that does not work on this kernel
# (an RLIMIT_NPROC gVisor ignores, a filter that did not load) stops the start instead of being assumed.
LAYER_PROBE = r'''
import errno, os
def f():
    seen = {"uid": os.getuid()}
    try:
        os.setresuid(0, 0, 0)
        seen["setuid_root"] = "allowed"
    except OSError:
        seen["setuid_root"] = "refused"
    try:
        pid = os.fork()
    except OSError:
        seen["fork"] = "refused"
    else:
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        seen["fork"] = "allowed"
    import socket
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        seen["socket"] = "allowed"
    except OSError:
        seen["socket"] = "refused"
    try:
        os.kill(os.getpid(), 0)
        seen["signal"] = "allowed"
    except OSError:
        seen["signal"] = "refused"
    try:
        os.execv("/nonexistent-probe", ["probe"])
    except OSError as e:
        seen["exec"] = "refused" if e.errno == errno.EPERM else "allowed"
    st = os.stat(".")
    seen["jobdir"] = [st.st_mode & 0o777, st.st_uid]
    try:
        open("/.probe", "w").close()
        seen["root"] = "writable"
    except OSError:
        seen["root"] = "read-only"
    # any place outside its own directory where a job could leave a file for a later job
    places = {"/", "/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run", "/home", os.environ.get("HOME", "/")}
    try:
        with open("/proc/self/mounts") as mounts:
            places.update(line.split()[1] for line in mounts if len(line.split()) > 1)
    except OSError:
        pass
    # the other processes this job can see, and what /etc holds (a runtime root of its own holds only the
    # loader's cache there)
    try:
        seen["pids"] = len([p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()])
    except OSError:
        seen["pids"] = 0
    try:
        seen["etc"] = sorted(os.listdir("/etc"))
    except OSError:
        seen["etc"] = []
    # the names in every other process's environment this job can read (gVisor lets any uid read them)
    seen["environ"] = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open("/proc/%s/environ" % pid, "rb") as env:
                    seen["environ"] += [e.split(b"=")[0].decode("latin-1") for e in env.read().split(b"\0")
                                        if e.strip(b"\0")]
            except OSError:
                pass
    seen["shared"] = []
    for place in sorted(places):
        probe = os.path.join(place, ".probe-%d" % os.getpid())
        try:
            open(probe, "x").close()
        except OSError:
            continue
        seen["shared"].append(place)
        os.unlink(probe)
    return seen
'''


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


def check_layers(seen: dict, uid: int | None, seccomp: bool, jailed: bool = True,
                 chrooted: bool = False) -> list[str]:
    """The layers LAYER_PROBE found working, in words; SandboxUnavailable naming the first one that is not.
    `jailed`: every isolation but `none` (development only) promises that jobs share no writable place and read
    no other process's environment. `chrooted`: the zygote chrooted into the runtime root, which promises that a
    job sees no other process and no system file."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise SandboxUnavailable(f"sandbox start-up check failed: {what} (probe saw {seen}); the isolation "
                                     "this backend promises does not hold on this machine")

    layers = []
    if uid is not None:
        need(seen.get("uid") == uid and seen.get("setuid_root") == "refused",
             f"jobs must run as uid {uid} and be unable to become root")
        layers.append(f"own uid per worker (checked: uid {uid}, setuid(0) refused)")
    need(seen.get("fork") == "refused", "a job must not be able to fork")
    layers.append("one process per job (checked: fork refused)")
    if seccomp:
        need(all(seen.get(k) == "refused" for k in ("socket", "exec", "signal")),
             "the seccomp filter must refuse socket, execve and kill")
        layers.append("seccomp (checked: socket, execve, kill refused)")
    need(seen.get("jobdir") == [0o700, seen.get("uid")], "each job needs its own mode-0700 directory")
    layers.append("private job directory (checked: mode 0700, the job's uid)")
    if jailed:
        foreign = sorted(set(seen.get("environ", ())) - set(JAIL_ENV_NAMES))
        need(not foreign, f"jobs can read other processes' environment variables {foreign}")
        layers.append("no other process's environment readable (checked)")
        need(seen.get("shared") == [], f"jobs could leave files for later jobs in {seen.get('shared')}")
        layers.append("no place shared between jobs (checked: nothing writable outside the job's directory)")
    if chrooted:
        need(seen.get("pids") == 0, f"jobs can see {seen.get('pids')} other processes in /proc")
        need(set(seen.get("etc", ())) <= {"ld.so.cache"}, f"jobs can see system files in /etc: {seen.get('etc')}")
        layers.append("own root of the runtime only (checked: no other process visible, nothing in /etc but the "
                      "loader's cache)")
    if seen.get("root") == "read-only":
        layers.append("root not writable (checked)")
    return layers


def check_state(found: dict) -> list[str]:
    """The start-up check of "nothing survives a job": `found` is what the second of two jobs on one worker found
    of the secret the first left by every kind of state (state_kinds.KINDS); SandboxUnavailable naming the kinds
    when anything."""
    if found:
        raise SandboxUnavailable(f"sandbox start-up check failed: state one job left was found by the next, by "
                                 f"{sorted(found)} (docs/sandbox.md, 'Nothing survives a job'); the isolation this "
                                 "backend promises does not hold on this machine")
    return [f"nothing survives a job (checked: {len(KINDS)} kinds of state left by one job, none found by the next)"]


class _Worker:
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
        probe = self.execute(Job("layer-probe", LAYER_PROBE, calls=["f()"], timeout_s=30.0), restart=False)
        if probe.status != "ok":
            self.stop()
            raise SandboxUnavailable(f"sandbox worker {self.index}: the start-up check did not run: {probe.status} "
                                     f"{probe.error} {probe.stdout[-500:]}")
        try:
            self.layers = check_layers(probe.values[0], self.uid, self.seccomp, self.jailed,
                                       chrooted=self.launch.root is not None)
            if self.jailed:
                self.layers += self._check_state()
        except SandboxUnavailable:
            self.stop()
            raise

    def _check_state(self) -> list[str]:
        """One job leaves a secret by every kind of state, the next (on this worker) looks for each. A first look
        before anything is left is the baseline: what the machine itself sets (a service started under `nice`, a
        CPU set of one core, a lowered limit) is the same before and after, and is not a leak."""
        find = Job("state-find", find_all_program(), calls=["f()"], timeout_s=30.0)
        seen = []
        for job in (find, Job("state-leave", leave_all_program(STATE_SECRET), calls=["f()"], timeout_s=30.0), find):
            r = self.execute(job, restart=False)
            if r.status != "ok":
                raise SandboxUnavailable(f"sandbox worker {self.index}: the start-up check {job.job_id} did not run: "
                                         f"{r.status} {r.error} {r.stdout[-500:]}")
            seen.append(r.values[0])
        before, after = seen[0], seen[2]
        return check_state({kind: value for kind, value in after.items() if before.get(kind) != value})

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


def _uid_base() -> int:
    # Distinct uids per pool and per worker: one job's fork attempt must not eat another worker's process
    # limit, nor may two pools on one host share a uid.
    return 200_000 + (os.getpid() % 100_000) * 64


class ZygoteExecutor(Executor):
    """The default backend: `workers` warm zygotes (one per core by default), each in its own jail, each forking
    one child per job. Jobs of a batch are spread over the workers; a dead worker is replaced.

    `isolation` picks the jail (jail.pick_isolation): bwrap, unshare, `gvisor` (this process already runs inside
    gVisor, where no namespace can be made: the zygote runs without one, under the same uid, rlimits, filters
    and job directories), or none (development only)."""

    name = "zygote"

    def __init__(self, limits: Limits | None = None, workers: int = 0, isolation: str = "auto",
                 seccomp: bool = True):
        self.limits = limits or Limits()
        if self.limits.nproc != 1:
            raise ValueError(f"Limits.nproc is {self.limits.nproc}; the zygote backend needs 1: its seccomp filter "
                             "lets a plain fork through, and the process limit is what stops a job forking")
        self.isolation_kind = self._pick(isolation)
        self.seccomp = seccomp
        root = os.geteuid() == 0
        if self.isolation_kind != "none" and not root:
            raise SandboxUnavailable(f"the {self.name} backend drops each job to its own uid and needs to run as "
                                     "root (inside a container is fine); use sandbox.backend=subprocess otherwise")
        # the service's own container (sandbox.isolation=gvisor, not the gvisor backend's sandboxes, which hold the
        # jail's tree only): its zygotes chroot into a root that holds the runtime and nothing else
        self.runtime_root: str | None = None
        if self.isolation_kind == "gvisor" and self.name == "zygote":
            blank_environ_block()  # defence in depth: gVisor lets any uid read /proc/<pid>/environ
            self.runtime_root = tempfile.mkdtemp(prefix="populora-root-")
        n = workers or os.cpu_count() or 1
        base = _uid_base()
        self._queue: queue.Queue = queue.Queue()
        self._retries: dict[int, int] = {}  # id(future) -> times re-queued after its worker failed
        self._workers: list[_Worker] = []
        try:
            if self.runtime_root is not None:
                build_runtime_root(self.runtime_root)
            for i in range(n):
                self._workers.append(_Worker(i, base + i if root else None, self.profile(), self.limits, seccomp,
                                             self._launch, jailed=self.isolation_kind != "none",
                                             own_root=self.name == "gvisor"))
        except BaseException:
            for w in self._workers:
                w.stop()
            self._remove_runtime_root()
            raise
        self._threads = [threading.Thread(target=self._serve, args=(w,), daemon=True, name=f"sandbox-w{w.index}")
                         for w in self._workers]
        if os.getpid() == 1:
            # the service is its container's init (sandbox.isolation=gvisor, docs/operations.md): a zygote killed
            # with its process group leaves its fork server and job to this process, which must reap them
            self._threads.append(threading.Thread(target=self._reap_orphans, daemon=True, name="sandbox-reaper"))
        self._closed = False
        for t in self._threads:
            t.start()

    def _pick(self, isolation: str) -> str:
        return pick_isolation(isolation)

    def profile(self) -> str:
        """`gvisor` where the zygote runs inside gVisor (no pidfds, no RLIMIT_NPROC), else `linux`."""
        return "gvisor" if self.isolation_kind == "gvisor" else "linux"

    def _launch(self, worker: _Worker) -> Launch:
        if self.isolation_kind == "bwrap":
            read_end, write_end = os.pipe()
            os.write(write_end, b"".join(a.encode() + b"\0" for a in bwrap_args(self.limits.tmp_mb)))
            os.close(write_end)
            return Launch(["bwrap", "--args", str(read_end), *Interpreter.current().jail_argv("zygote")], None, "/tmp",
                          pass_fds=(read_end,))
        if self.isolation_kind == "unshare":
            return Launch(unshare_command(self.limits.tmp_mb), clean_env(), "/tmp")
        chroot = self.runtime_root
        tmp = tempfile.mkdtemp(prefix="populora-sbx-", dir=f"{chroot}/tmp" if chroot else None)

        def remove() -> None:
            try:
                remove_tree(tmp)  # iterative: a job may have left a tree deeper than rmtree's recursion
            except OSError:
                pass

        inside = tmp[len(chroot):] if chroot else tmp  # the job directories' parent as the zygote sees it
        return Launch([*python_command(), str(RUNTIME), "zygote"], clean_env(), inside, on_stop=[remove],
                      root=chroot)

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
                if inflight and (worker.proc is None or worker.proc.poll() is not None):
                    # the zygote died with jobs queued at it: a fresh one must not answer for them
                    raise EOFError("the sandbox worker exited")
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

    def _fail_all(self, worker: _Worker, inflight: deque, e: Exception, extra: tuple | None = None) -> None:
        """The zygote died or hung: a fresh zygote takes its place. The job it was running (the head of the queue,
        whose report never came) is sandbox_error, judged alone; the jobs queued behind it did nothing wrong and
        go back to the shared queue, where a healthy worker runs them (at most RETRIES times each, so a job that
        fails every worker still gets an answer). Where sending failed (`extra`: the zygote was found dead with jobs
        queued at it, or could not be restarted), no job is to blame and every one goes back."""
        err = worker.failure(e)
        queued = [(j, f) for j, f, *_ in inflight] + ([extra] if extra else [])
        inflight.clear()
        blamed = queued[:1] if extra is None else []
        try:
            worker.restart()
        except Exception as restart_error:  # noqa: BLE001 - reported to every caller waiting on this worker
            err += f"; restart failed: {restart_error}"
        for job, fut in blamed:
            fut.set_result(JobResult(job.job_id, "sandbox_error", error=err))
        for job, fut in queued[len(blamed):]:
            tries = self._retries.get(id(fut), 0)
            if tries >= RETRIES or self._closed:
                self._retries.pop(id(fut), None)
                fut.set_result(JobResult(job.job_id, "sandbox_error", error=err + f" (tried on {tries + 1} workers)"))
                continue
            self._retries[id(fut)] = tries + 1
            self._queue.put((job, fut))

    def _reap_orphans(self) -> None:
        """As pid 1: reap every zombie child that is not one of this executor's zygotes (those are its Popen's to
        wait for), once a second, until closed."""
        while not self._closed:
            ours = {w.proc.pid for w in self._workers if w.proc is not None}
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) in ours:
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
                    if state == "Z" and int(ppid) == 1:
                        os.waitpid(int(entry), os.WNOHANG)
                except (OSError, ValueError, ChildProcessError):
                    continue
            time.sleep(1.0)

    def run(self, jobs: list[Job]) -> list[JobResult]:
        if self._closed:
            raise RuntimeError("this executor was closed")
        futures: list[Future] = []
        for job in jobs:
            fut: Future = Future()
            self._queue.put((job, fut))
            futures.append(fut)
        return [f.result() for f in futures]

    def jail_layers(self) -> list[str]:
        """The jail around the zygote, in words (first in isolation())."""
        return {"bwrap": ["bwrap(net,pid,ipc,uts,cgroup,mount namespaces)", "read-only root", "private tmpfs",
                          "capabilities dropped"],
                "unshare": ["unshare(net,pid,ipc,uts,mount namespaces)", "read-only root", "private tmpfs"],
                "gvisor": ["inside gVisor (no namespaces: uid, rlimits and filters instead)"]
                + (["chroot into a root of the runtime alone (no /proc, no system files)"]
                   if self.runtime_root else []),
                "none": []}[self.isolation_kind]

    def isolation(self) -> list[str]:
        layers = self.jail_layers()
        layers += ["rlimits(cpu,as,fsize,nproc=1,nofile,core)", "wall-clock kill"]
        if self.seccomp:
            layers.append("seccomp on zygote and jobs(no socket/exec/ptrace/kill/threads/namespaces)")
        if self.profile() == "gvisor":
            layers.append("per-job seccomp(no fork/clone/kill: gVisor does not enforce RLIMIT_NPROC)")
        if self._workers:
            layers += [f"start-up check: {layer}" for layer in self._workers[0].layers]
        return layers

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=30)
        while True:  # a job put back by a failing worker after the threads stopped
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[1].set_result(JobResult(item[0].job_id, "sandbox_error", error="the executor was closed"))
        for w in self._workers:
            w.stop()
            w.log.close()
        self._remove_runtime_root()

    def _remove_runtime_root(self) -> None:
        if self.runtime_root is not None:
            try:
                remove_tree(self.runtime_root)
            except OSError:
                pass
