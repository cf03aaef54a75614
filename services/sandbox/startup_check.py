"""The start-up check of every zygote: its first jobs are ours, and prove that the isolation layers its profile
promises hold on this machine (LAYER_PROBE, check_layers) and that nothing one job leaves is found by the next
(state_kinds, check_state). A layer that does not work on this kernel stops the start instead of being assumed."""

from __future__ import annotations

from typing import Protocol

from populora.tasks.jobs import Job, JobResult
from services.sandbox.executor import SandboxUnavailable
from services.sandbox.jail import clean_env
from services.sandbox.state_kinds import KINDS
from services.sandbox.state_programs import find_all_program, leave_all_program


class Probed(Protocol):
    """What the check needs of a zygote worker (services.sandbox.zygote_worker.ZygoteWorker, which runs the check
    and so is not imported here)."""

    index: int
    uid: int
    seccomp: bool
    jailed: bool
    launch: object

    def execute(self, job: Job, restart: bool = True) -> JobResult: ...

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


def prove_layers(worker: Probed) -> list[str]:
    """Run LAYER_PROBE as the worker's first job; the layers it found working (check_layers)."""
    probe = worker.execute(Job("layer-probe", LAYER_PROBE, calls=["f()"], timeout_s=30.0), restart=False)
    if probe.status != "ok":
        raise SandboxUnavailable(f"sandbox worker {worker.index}: the start-up check did not run: {probe.status} "
                                 f"{probe.error} {probe.stdout[-500:]}")
    return check_layers(probe.values[0], worker.uid, worker.seccomp, worker.jailed,
                        chrooted=worker.launch is not None and worker.launch.root is not None)


def prove_nothing_survives(worker: Probed) -> list[str]:
    """One job leaves a secret by every kind of state, the next (on this worker) looks for each. A first look
    before anything is left is the baseline: what the machine itself sets (a service started under `nice`, a
    CPU set of one core, a lowered limit) is the same before and after, and is not a leak."""
    find = Job("state-find", find_all_program(), calls=["f()"], timeout_s=30.0)
    seen = []
    for job in (find, Job("state-leave", leave_all_program(STATE_SECRET), calls=["f()"], timeout_s=30.0), find):
        r = worker.execute(job, restart=False)
        if r.status != "ok":
            raise SandboxUnavailable(f"sandbox worker {worker.index}: the start-up check {job.job_id} did not run: "
                                     f"{r.status} {r.error} {r.stdout[-500:]}")
        seen.append(r.values[0])
    before, after = seen[0], seen[2]
    return check_state({kind: value for kind, value in after.items() if before.get(kind) != value})
