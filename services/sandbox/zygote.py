"""The zygote backend: a pool of warm zygotes in jails, one per worker, each forking one child per job; the jobs of
a batch spread over them, and a failed worker's queued jobs given to the others. The zygote itself and the
protocol with it are zygote_worker.py; the start-up check each passes before its first job is startup_check.py."""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future

from populora.tasks.jobs import Job, JobResult
from services.sandbox.executor import Executor, Limits, SandboxUnavailable
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
from services.sandbox.verdict import classify
from services.sandbox.zygote_worker import Launch, ZygoteWorker

PIPELINE = 3  # jobs queued at each zygote
RETRIES = 2  # times a job queued behind a failed worker goes back to the shared queue

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
        self._workers: list[ZygoteWorker] = []
        try:
            if self.runtime_root is not None:
                build_runtime_root(self.runtime_root)
            for i in range(n):
                self._workers.append(ZygoteWorker(i, base + i if root else None, self.profile(), self.limits, seccomp,
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

    def _launch(self, worker: ZygoteWorker) -> Launch:
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

    def _serve(self, worker: ZygoteWorker) -> None:
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

    def _serve_once(self, worker: ZygoteWorker, inflight: deque, state: dict) -> None:
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

    def _fail_all(self, worker: ZygoteWorker, inflight: deque, e: Exception, extra: tuple | None = None) -> None:
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
