"""The jail a zygote runs in: its file tree, and the commands that build it (bubblewrap, `unshare`, gVisor).

Every jail holds the same tree, read-only: /usr and the /bin, /lib links, the interpreter's tree at
`/sandbox/python`, the runtime at `/sandbox/jail_runtime.py`, a few devices, a private size-capped /tmp and /proc.
Nothing in it is placed at a host path, so a job cannot learn where the host keeps the interpreter or the project.
The interpreter is started from its path inside the jail (`/sandbox/python/bin/...`), so `sys.executable`,
`sys.prefix` and the loader's maps name only that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from services.sandbox import jail_runtime
from services.sandbox.executor import SandboxUnavailable

RUNTIME = Path(jail_runtime.__file__).resolve()
JAIL_PYTHON = "/sandbox/python"
JAIL_RUNTIME = "/sandbox/jail_runtime.py"
SYSTEM_TOPS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32")
# Isolation profiles of a zygote (sandbox.isolation): the first three build a jail on this host; `gvisor` means
# the zygote already runs inside gVisor (the gvisor backend's sandbox, or a container under runsc), where no
# namespace can be made and the layers that work there are used instead (docs/sandbox.md).
ISOLATIONS = ("bwrap", "unshare", "gvisor", "none")

# The capabilities a zygote needs (as root): handing each job its worker's uid (SETUID, SETGID) and directory
# (CHOWN, DAC_OVERRIDE, FOWNER), and killing it (KILL). The gvisor backend runs its zygotes with exactly these.
ZYGOTE_CAPABILITIES = ("SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER")
# A sandbox service in a gVisor container (sandbox.isolation=gvisor) also chroots each zygote into the runtime
# root (build_runtime_root): SYS_CHROOT, which Kubernetes' baseline Pod Security allows (SYS_ADMIN it does not,
# so no namespace can be made there). The deployment files grant exactly these (tests/deploy checks it), and a
# test runs the service's profile in runsc with exactly these.
CONTAINER_CAPABILITIES = (*ZYGOTE_CAPABILITIES, "SYS_CHROOT")
# bubblewrap on a plain host also needs to build namespaces and mounts (SYS_ADMIN) and bring up the loopback of
# the empty network namespace (NET_ADMIN); a test runs the bwrap zygote with exactly these.
BWRAP_CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", *ZYGOTE_CAPABILITIES)


@dataclass(frozen=True)
class Interpreter:
    """The interpreter tree on the host (`tree`, sys.base_prefix) and its executable relative to it."""

    tree: str
    executable: str

    @classmethod
    def current(cls) -> Interpreter:
        tree = os.path.realpath(sys.base_prefix)
        exe = os.path.realpath(sys.executable)
        rel = os.path.relpath(exe, tree)
        if rel.startswith(".."):
            raise SandboxUnavailable(f"the interpreter {exe} is not inside its prefix {tree}; the jail binds the "
                                     "prefix at /sandbox/python and cannot start it")
        return cls(tree, rel)

    def jail_argv(self, mode: str) -> list[str]:
        """The command line of the runtime inside the jail (`python -I -S` but honouring PYTHONHASHSEED)."""
        return [f"{JAIL_PYTHON}/{self.executable}", "-P", "-S", "-s", "-B", JAIL_RUNTIME, mode]


def clean_env() -> dict[str, str]:
    """The environment of every job: nothing of the host's. PYTHONHASHSEED=0 makes set reprs the same in every
    process (the determinism check compares reprs)."""
    return {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


def jail_env() -> dict[str, str]:
    # the interpreter's RUNPATH names its host prefix: point the loader at the jail's copy of its lib/
    return {**clean_env(), "LD_LIBRARY_PATH": f"{JAIL_PYTHON}/lib"}


def blank_environ_block() -> None:
    """Zero this process's initial environment block, what /proc/<pid>/environ shows, keeping every value for
    itself (os.environ) and its children (C's `environ`, pointed at fresh copies first).

    Inside gVisor any uid can read another process's /proc/<pid>/environ, and a sandbox service that runs its
    zygotes in its own container (sandbox.isolation=gvisor) holds its token and database URL there."""
    import ctypes

    libc = ctypes.CDLL(None)

    def pointers() -> list[int]:
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
        out, i = [], 0
        while environ[i]:
            out.append(environ[i])
            i += 1
        return out

    originals = pointers()
    for key, value in os.environ.items():
        os.putenv(key, value)  # setenv(3): C's environ now holds copies on the heap
    kept = set(pointers())
    for address in originals:
        if address not in kept:
            ctypes.memset(address, 0, len(ctypes.string_at(address)))


def python_command() -> list[str]:
    """The host's interpreter, for the jail-less backends (subprocess, none): site-packages, user site and the
    script directory off; with clean_env() this is `python -I -S` except that PYTHONHASHSEED is honoured."""
    return [os.path.realpath(sys.executable), "-P", "-S", "-s", "-B"]


def system_tree() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(read-only binds, symlinks) of the jail's tree, as (host path, jail path) and (jail path, target)."""
    interp = Interpreter.current()
    binds = [("/usr", "/usr")]
    links = []
    for top in SYSTEM_TOPS:
        if os.path.islink(top):
            links.append((top, os.readlink(top)))
        elif os.path.isdir(top):
            binds.append((top, top))
    binds += [(interp.tree, JAIL_PYTHON), (str(RUNTIME), JAIL_RUNTIME)]
    return binds, links


def bwrap_args(tmp_mb: int) -> list[str]:
    """bubblewrap's options (given through `--args FD`, so the namespace's pid 1 shows no host path on its
    command line; the command, `Interpreter.jail_argv`, follows them): every namespace but the user one (a user namespace would map only uid 0 and make the per-job
    setuid impossible), all capabilities dropped except those the zygote needs, the jail's tree read-only, a
    private size-capped tmpfs on /tmp."""
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in jail_env().items():
        args += ["--setenv", key, value]
    binds, links = system_tree()
    for top in ("/sandbox", "/etc"):  # bwrap makes missing parents mode 0700: jobs could import nothing new
        args += ["--perms", "0755", "--dir", top]
    for src, dst in binds:
        args += ["--ro-bind", src, dst]
    for path, target in links:
        args += ["--symlink", target, path]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--proc", "/proc", "--dev", "/dev",
             "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp", "--remount-ro", "/", "--chdir", "/tmp",
             "--cap-drop", "ALL"]
    for cap in ZYGOTE_CAPABILITIES:
        args += ["--cap-add", f"CAP_{cap}"]
    return args


STAGE_CANDIDATES = ("/tmp", "/mnt", "/srv", "/media", "/opt", "/var/tmp")


def stage_dir(sources: list[str], candidates: tuple[str, ...] = STAGE_CANDIDATES) -> str:
    """An existing directory to cover with the new root's tmpfs that holds none of the bind sources (a checkout
    under /tmp would otherwise vanish under the tmpfs before its files are bound)."""
    real = [os.path.realpath(s) for s in sources]
    for cand in candidates:
        top = os.path.realpath(cand)
        if os.path.isdir(top) and not any(r == top or r.startswith(top.rstrip("/") + "/") for r in real):
            return top
    raise RuntimeError(f"no directory among {list(candidates)} exists outside the jail's sources ({real[:3]}...) "
                       "to build the unshare jail's root on; create /mnt")


def unshare_spec(tmp_mb: int) -> dict:
    """What `jail_runtime.py build-root` needs to build the same tree in new namespaces."""
    binds, links = system_tree()
    return {"stage": stage_dir([src for src, _ in binds]), "binds": binds, "links": links, "tmp_mb": tmp_mb,
            "ld_cache": os.path.exists("/etc/ld.so.cache"), "argv": Interpreter.current().jail_argv("zygote"),
            "env": jail_env()}


def unshare_command(tmp_mb: int) -> list[str]:
    """Fallback where bwrap is missing: util-linux unshare (root only) with new mount, net, pid, ipc and uts
    namespaces; the runtime builds the jail's root itself, pivots into it and execs the zygote there."""
    import json

    return ["unshare", "--mount", "--net", "--pid", "--fork", "--ipc", "--uts", "--kill-child",
            *python_command(), str(RUNTIME), "build-root", json.dumps(unshare_spec(tmp_mb))]


# Run by the zygote's own interpreter (python_command, clean_env): the directories its imports come from (sys.path,
# no site-packages), and every shared object it maps once every extension module there is imported.
ROOT_PROBE = r"""
import importlib, importlib.machinery, json, os, sys
dirs = [p for p in sys.path if os.path.isdir(p)]
suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
for d in dirs:
    for name in sorted(os.listdir(d)):
        if name.endswith(suffixes) and not name.startswith("_tkinter"):
            try:
                importlib.import_module(name.split(".")[0])
            except Exception:
                pass
mapped = set()
with open("/proc/self/maps") as maps:
    for line in maps:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            mapped.add(parts[5].strip())
print(json.dumps({"dirs": dirs, "executable": os.path.realpath(sys.executable), "mapped": sorted(mapped)}))
"""
# Not part of the runtime root: packages (site-packages is off in the jail anyway), the stdlib's own test suites,
# its GUI and installer parts (Tk needs a display, pip's wheels are for a network), the static libpython, and
# byte code for -O/-OO (jobs run without them).
ROOT_SKIPPED = ("site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo",
                "_tkinter*", "ensurepip", "config-3.*", "*.opt-1.pyc", "*.opt-2.pyc")


def build_runtime_root(dest: str) -> dict:
    """Write the runtime root of sandbox.isolation=gvisor into the empty directory `dest`: what the interpreter of
    the jobs needs and nothing else, each at its own path. The standard library (sys.path of `python -S`), the
    interpreter, every shared object it maps with all its extension modules imported and the names the loader
    finds them by, /etc/ld.so.cache, the /bin and /lib links, an empty /proc and a /tmp for the job
    directories; no /etc/passwd, no /proc of the container, no project, no secret. Every zygote chroots into it
    (jail_runtime.zygote_main): its jobs see no other file and no other process. Returns what it holds."""
    import fnmatch
    import json

    try:
        probe = subprocess.run([*python_command(), "-c", ROOT_PROBE], env=clean_env(), capture_output=True,
                               text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxUnavailable(f"cannot list what the jobs' interpreter needs for the runtime root: {e}") from None
    if probe.returncode != 0:
        raise SandboxUnavailable("cannot list what the jobs' interpreter needs for the runtime root: "
                                 f"{probe.stderr[-1000:]}")
    found = json.loads(probe.stdout.strip().splitlines()[-1])

    def mkdirs(path: str) -> None:
        missing = []
        while not os.path.lexists(dest + path):
            missing.append(path)
            path = os.path.dirname(path)
        for p in reversed(missing):
            os.mkdir(dest + p, 0o755)

    def ignore(_dir: str, names: list[str]) -> set[str]:
        return {n for n in names if any(fnmatch.fnmatch(n, pat) for pat in ROOT_SKIPPED)}

    os.chmod(dest, 0o755)
    for path, target in system_tree()[1]:
        os.symlink(target, dest + path)
    copied: list[str] = []
    for src in sorted(found["dirs"]):
        if any(src == d or src.startswith(d + "/") for d in copied):
            continue
        mkdirs(os.path.dirname(src))
        shutil.copytree(src, dest + src, symlinks=True, ignore=ignore)
        copied.append(src)
    objects = {os.path.realpath(p) for p in found["mapped"]
               if ".so" in os.path.basename(p) and os.path.isfile(p)} | {found["executable"]}
    for path in sorted(objects):
        if not os.path.lexists(dest + path):
            mkdirs(os.path.dirname(path))
            shutil.copy2(path, dest + path)
    links = 0
    for directory in sorted({os.path.dirname(p) for p in objects}):
        for entry in os.scandir(directory):
            if entry.is_symlink() and os.path.realpath(entry.path) in objects \
                    and not os.path.lexists(dest + entry.path):
                os.symlink(os.readlink(entry.path), dest + entry.path)
                links += 1
    if os.path.exists("/etc/ld.so.cache"):
        mkdirs("/etc")
        shutil.copy2("/etc/ld.so.cache", dest + "/etc/ld.so.cache")
    os.mkdir(dest + "/tmp", 0o755)
    os.mkdir(dest + "/proc", 0o555)
    return {"dirs": copied, "objects": len(objects), "links": links}


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def pick_isolation(requested: str) -> str:
    """`auto` -> bwrap when it runs here, else unshare (as root); a named layer must work or it is an error.
    `gvisor` is taken as stated: the zygote's start-up checks prove its layers (startup_check.check_layers)."""
    if requested in ("gvisor", "none"):
        return requested
    probe_bwrap = ["bwrap", "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "true"]
    if requested in ("auto", "bwrap") and shutil.which("bwrap") and _works(probe_bwrap):
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailable("sandbox.isolation=bwrap but bubblewrap does not run here; install the "
                                 "`bubblewrap` package (make apt), set sandbox.isolation=unshare, or, inside gVisor, "
                                 "sandbox.isolation=gvisor")
    if requested in ("auto", "unshare") and os.geteuid() == 0 and shutil.which("unshare") \
            and _works(["unshare", "--mount", "--net", "--pid", "--fork", "true"]):
        return "unshare"
    raise SandboxUnavailable(f"sandbox.isolation={requested}: neither bubblewrap nor unshare (as root) works "
                             "here; install bubblewrap, run the sandbox as root, inside gVisor set "
                             "sandbox.isolation=gvisor, or (development only) set sandbox.isolation=none")
