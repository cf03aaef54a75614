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

# The capabilities the sandbox needs in a gVisor container (as root): handing each job its worker's uid (SETUID,
# SETGID) and directory (CHOWN, DAC_OVERRIDE, FOWNER), and killing it (KILL). The gvisor backend runs its zygotes
# with exactly these, and the deployment files grant exactly these (tests/deploy checks both).
CONTAINER_CAPABILITIES = ("SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER")
# bubblewrap on a plain host also needs to build namespaces and mounts (SYS_ADMIN) and bring up the loopback of
# the empty network namespace (NET_ADMIN); a test runs the bwrap zygote with exactly these.
BWRAP_CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", *CONTAINER_CAPABILITIES)


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
    for cap in CONTAINER_CAPABILITIES:
        args += ["--cap-add", f"CAP_{cap}"]
    return args


def unshare_spec(tmp_mb: int) -> dict:
    """What `jail_runtime.py build-root` needs to build the same tree in new namespaces."""
    binds, links = system_tree()
    return {"stage": "/tmp", "binds": binds, "links": links, "tmp_mb": tmp_mb,
            "ld_cache": os.path.exists("/etc/ld.so.cache"), "argv": Interpreter.current().jail_argv("zygote"),
            "env": jail_env()}


def unshare_command(tmp_mb: int) -> list[str]:
    """Fallback where bwrap is missing: util-linux unshare (root only) with new mount, net, pid, ipc and uts
    namespaces; the runtime builds the jail's root itself, pivots into it and execs the zygote there."""
    import json

    return ["unshare", "--mount", "--net", "--pid", "--fork", "--ipc", "--uts", "--kill-child",
            *python_command(), str(RUNTIME), "build-root", json.dumps(unshare_spec(tmp_mb))]


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def pick_isolation(requested: str) -> str:
    """`auto` -> bwrap when it runs here, else unshare (as root); a named layer must work or it is an error.
    `gvisor` is taken as stated: the zygote's start-up checks prove its layers (zygote.check_layers)."""
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
