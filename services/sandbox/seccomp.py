"""The seccomp filters of the jail, built once on the host with libseccomp and exported as raw BPF.

`jail_filter` is loaded by each zygote on itself, with one prctl, before it forks its fork server: every job
inherits it at no cost (attaching a filter in each child cost about 0.1-0.2 ms, a twentieth of a job). Default
allow; every syscall in DENIED_SYSCALLS fails with EPERM, as does clone with any flag of CLONE_DENIED_FLAGS; clone3
fails with ENOSYS, so libc falls back to clone. A plain fork stays allowed, because the fork server forks each job:
the job's RLIMIT_NPROC of 1 (its uid is its worker's own) is what makes its fork fail. So a job is one process: no
threads, no fork bombs, nothing left over after the kill. The kernel objects that outlive a process (System V IPC,
POSIX message queues, keys; sockets are denied anyway) cannot be made at all, and calls that would change another
process's priority, affinity or limits are refused: nothing a job does reaches a later job (state_kinds.py).

Where the kernel has pidfds the zygote kills a job through one and `kill` is denied to everyone in the jail. gVisor
has neither pidfds nor an enforced RLIMIT_NPROC, so there the jail filter leaves `kill` to the zygote and each job
loads `no_fork_filter` on itself after its set-up: no fork, vfork or clone of any kind, and no signals.
"""

from __future__ import annotations

import errno
import tempfile

DENIED_SYSCALLS = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "execve", "execveat", "ptrace",
    "process_vm_readv", "process_vm_writev", "vfork", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load", "reboot",
    "swapon", "swapoff", "personality", "acct", "settimeofday", "clock_settime", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "setsid", "setpgid", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    # kernel objects that outlive the process that made them, shared by every later job of the worker (its IPC
    # namespace; in the container profile, the whole container's): System V IPC and POSIX message queues
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv",
    "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "ioprio_set")
# (syscall, argument): EPERM when that argument is not 0, i.e. when the call names another process (or a process
# group or a user) than the caller: a job may change its own priority, affinity and limits, never those of the
# fork server, the zygote or a later job (gVisor lets any uid renice or pin its parent)
OTHER_PROCESS_ARGS = (("setpriority", 0), ("setpriority", 1), ("sched_setaffinity", 0), ("sched_setscheduler", 0),
                      ("sched_setparam", 0), ("sched_setattr", 0), ("prlimit64", 0), ("migrate_pages", 0),
                      ("move_pages", 0))
SIGNAL_SYSCALLS = ("kill", "tkill", "tgkill")
FORK_SYSCALLS = ("fork", "vfork", "clone")
# clone with any of these flags fails: no threads, no vfork-style spawn (posix_spawn, os.system), no namespaces.
CLONE_DENIED_FLAGS = {"CLONE_VM": 0x100, "CLONE_THREAD": 0x10000, "CLONE_NEWTIME": 0x80, "CLONE_NEWNS": 0x20000,
                      "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000,
                      "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000}
_CACHE: dict[tuple, bytes] = {}


def _compile(deny: tuple[str, ...], clone_flags: bool, clone3: bool, other_process: bool = False) -> bytes:
    key = (deny, clone_flags, clone3, other_process)
    if key not in _CACHE:
        import pyseccomp as sc

        flt = sc.SyscallFilter(defaction=sc.ALLOW)
        flt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree of syscall numbers instead of a linear list
        for name in deny:
            try:
                flt.add_rule(sc.ERRNO(errno.EPERM), name)
            except (ValueError, OSError, RuntimeError):
                continue  # not a syscall on this architecture
        if other_process:
            for name, arg in OTHER_PROCESS_ARGS:
                flt.add_rule(sc.ERRNO(errno.EPERM), name, sc.Arg(arg, sc.NE, 0))
        if clone_flags:
            for flag in CLONE_DENIED_FLAGS.values():
                flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        if clone3:
            flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        with tempfile.TemporaryFile() as f:
            flt.export_bpf(f)
            f.seek(0)
            _CACHE[key] = f.read()
    return _CACHE[key]


def jail_filter(deny_signals: bool = True) -> bytes:
    """The filter every process in the jail runs under (the zygote, its fork server and every job)."""
    return _compile(DENIED_SYSCALLS + (SIGNAL_SYSCALLS if deny_signals else ()), clone_flags=True, clone3=True,
                    other_process=True)


def no_fork_filter() -> bytes:
    """The filter a job adds on itself where RLIMIT_NPROC is not enforced (gVisor): no new process or thread of
    any kind, and no signals (the zygote kills with kill(2) there, so the jail filter allows it)."""
    return _compile(FORK_SYSCALLS + SIGNAL_SYSCALLS, clone_flags=False, clone3=False)
