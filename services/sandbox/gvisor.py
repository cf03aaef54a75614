"""The gvisor backend: each worker's zygote lives in one long-lived gVisor sandbox (`runsc run`, no network),
and forks its jobs inside it, so a job's system calls reach gVisor's user-space kernel, never the host's.

A fresh `runsc` per job costs about 1.5 s here; one sandbox per worker pays that once. Inside, no namespace can
be made (bubblewrap fails under gVisor), so the zygote uses the layers that work there, each checked at start-up
(startup_check.check_layers): its own uid per worker, rlimits, the jail's seccomp filter plus a per-job one against
forking (gVisor does not enforce RLIMIT_NPROC), private job directories. The container itself is the jail: the
same read-only tree as every other jail (jail.system_tree), a private /tmp, no network, and exactly the
capabilities of jail.ZYGOTE_CAPABILITIES (the deployment files add SYS_CHROOT for the service's own container,
whose zygotes chroot into the runtime root; these sandboxes hold the jail's tree only and need none).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile

from services.sandbox.executor import Limits, SandboxUnavailable
from services.sandbox.jail import ZYGOTE_CAPABILITIES, Interpreter, jail_env, system_tree
from services.sandbox.zygote import ZygoteExecutor
from services.sandbox.zygote_worker import Launch, ZygoteWorker

_IDS = itertools.count()


def runsc_available() -> str | None:
    """Why gVisor cannot run here, or None when it can."""
    if not shutil.which("runsc"):
        return ("sandbox.backend=gvisor needs gVisor's `runsc` on PATH (Debian: `apt-get install runsc`, which "
                "`make install` does as root); it is not installed here. Use sandbox.backend=zygote")
    if os.geteuid() != 0:
        return "sandbox.backend=gvisor starts its sandboxes with runsc as root; run the sandbox as root"
    return None


def oci_config(tmp_mb: int, args: list[str] | None = None, binds: list[tuple[str, str]] | None = None,
               env: dict[str, str] | None = None, tmp_mode: str = "755", tmpfs: tuple[str, ...] = (),
               capabilities: tuple[str, ...] = ZYGOTE_CAPABILITIES) -> dict:
    """The OCI runtime spec of one worker's sandbox: the jail's tree as read-only binds on an empty read-only
    root, /proc, a private /tmp, new pid/net/ipc/uts/mount namespaces, root with the zygote's capabilities and
    no_new_privs. `args`, `binds` and `env` default to the zygote's; `tmpfs` adds writable scratch mounts with
    /tmp's mode; `capabilities` (jail.CONTAINER_CAPABILITIES) makes it the deployment files' container."""
    binds = system_tree()[0] if binds is None else binds
    caps = [f"CAP_{c}" for c in capabilities]
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"},
              {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", f"mode={tmp_mode}", f"size={tmp_mb * 1024 * 1024}"]}]
    mounts += [{"destination": path, "type": "tmpfs", "source": "tmpfs",
                "options": ["nosuid", "nodev", f"mode={tmp_mode}", "size=67108864"]} for path in tmpfs]
    mounts += [{"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro", "nosuid", "nodev"]}
               for src, dst in binds]
    if os.path.exists("/etc/ld.so.cache"):
        mounts.append({"destination": "/etc/ld.so.cache", "type": "bind", "source": "/etc/ld.so.cache",
                       "options": ["bind", "ro"]})
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0},
                    "args": args or Interpreter.current().jail_argv("zygote"),
                    "env": [f"{k}={v}" for k, v in (env or jail_env()).items()], "cwd": "/tmp",
                    "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
                    "noNewPrivileges": True},
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }


def write_bundle(path: str, cfg: dict) -> None:
    """An OCI bundle: config.json and a root holding only the mount points and the /bin, /lib links."""
    rootfs = os.path.join(path, "rootfs")
    os.makedirs(rootfs, mode=0o755)
    _, links = system_tree()
    for link, target in links:
        os.symlink(target, rootfs + link)
    for m in cfg["mounts"]:
        dst = rootfs + m["destination"]
        if m["type"] == "bind" and not os.path.isdir(m["source"]):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            open(dst, "w").close()
        else:
            os.makedirs(dst, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


class GvisorExecutor(ZygoteExecutor):
    """ZygoteExecutor whose workers each start inside their own `runsc run` sandbox (one start per worker, not
    per job); every job is forked inside it. `platform` is runsc's: ptrace needs no KVM."""

    name = "gvisor"

    def __init__(self, limits: Limits | None = None, workers: int = 0, seccomp: bool = True,
                 platform: str = "ptrace"):
        why = runsc_available()
        if why:
            raise SandboxUnavailable(why)
        self.platform = platform
        self.state = tempfile.mkdtemp(prefix="populora-runsc-")
        try:
            write_bundle(os.path.join(self.state, "bundle"), oci_config((limits or Limits()).tmp_mb))
            super().__init__(limits, workers, "gvisor", seccomp)
        except BaseException:
            shutil.rmtree(self.state, ignore_errors=True)
            raise

    def _pick(self, isolation: str) -> str:
        return "gvisor"

    def _runsc(self) -> list[str]:
        return ["runsc", "--root", os.path.join(self.state, "root"), "--network=none",
                f"--platform={self.platform}", "--ignore-cgroups"]

    def _launch(self, worker: ZygoteWorker) -> Launch:
        cid = f"populora-{os.getpid()}-{worker.index}-{next(_IDS)}"
        cmd = [*self._runsc(), "run", "--bundle", os.path.join(self.state, "bundle"), cid]

        def delete() -> None:
            subprocess.run([*self._runsc(), "delete", "--force", cid], capture_output=True, timeout=30)

        return Launch(cmd, None, "/tmp", on_stop=[delete])

    def jail_layers(self) -> list[str]:
        return [f"gVisor runsc sandbox per worker (platform {self.platform}, no network, read-only root, "
                "private tmpfs)"]

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.state, ignore_errors=True)
