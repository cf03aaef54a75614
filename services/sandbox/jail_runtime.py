# One file, standard library only, and longer than the project's 400 lines on purpose. Every jail binds this single
# file read-only at /sandbox/jail_runtime.py (jail.system_tree: bubblewrap, unshare's build-root, the gVisor backend's
# bundle) and runs it with `python -P -S -s`: inside the jail there is no project package to import from and no
# path but the standard library's. A second module would need a bind of its own in every jail profile and a place
# on the jobs' sys.path, beside the programs the jail exists to hold. The host imports the same file (encode,
# remove_tree), so both sides read one definition of the frame and the clean-up.
"""The runtime inside the jail: the zygote, its fork server, the per-job child and the trusted epilogue.

Standard library only. In a jail this file is `/sandbox/jail_runtime.py`, run by the interpreter bound at
`/sandbox/python` (jail.py builds that root with bubblewrap, with `unshare` through `build-root` below, or as the
root of a gVisor container). The host decides every status from what this file reports; nothing here judges a
result, and no gold value ever enters a process that runs model-written code (docs/sandbox.md, "Reward
integrity": the host compares).

Three processes per worker:
- the **zygote** reads job messages from the host, makes each job's private directory, supervises the job (output,
  wall clock, kill) and reports; it never forks a job itself, so what it has read (other jobs' programs and
  results) never reaches a job's memory;
- the **fork server**, forked once from the warmed zygote before any job, reads nothing but "a child, now" and
  forks one child per job, one job ahead: every job starts from the same pristine memory;
- the **job child** waits for its own job (its directory and message) on a pipe, drops to the worker's unprivileged uid, sets rlimits (and,
  where RLIMIT_NPROC is not enforced, a seccomp filter against forking), runs the program, and writes ONE frame
  `MAGIC nonce length payload` to fd 3 from the trusted epilogue, then `os._exit(0)` at once.
The seccomp filter the host built is loaded on the zygote before the fork server is forked, so every job inherits
it at no cost.
"""

import json
import os
import resource
import signal
import sys
import time

MAGIC = b"PLRS1"
RESULT_FD = 3
SETUP_FAILED = 120  # a job child's exit code when its set-up failed (the host reports sandbox_error)
_PLAIN_NAMES = ("dict", "set", "frozenset", "tuple", "list", "range", "int", "float", "complex", "str", "bytes",
                "bool")


def encode(value, _type=type, _int=int, _float=float, _complex=complex, _str=str, _bytes=bytes, _bool=bool,
           _list=list, _tuple=tuple, _dict=dict, _set=set, _frozenset=frozenset, _id=id, _hex=hex,
           _fhex=float.hex, _bhex=bytes.hex, _sencode=str.encode, _items=dict.items, _join=",".join,
           _TypeError=TypeError, _tname=type.__dict__["__name__"].__get__):
    """JSON text of plain data by EXACT type (`type(x) is int`, never isinstance): a subclass with a forged
    __eq__ or __repr__ is not plain data. Every string in the output is a tag or hex digits, so the text is built
    by concatenation without calling json (a program could have patched the json module). Builtins are bound
    as defaults at import, so rebinding names cannot change this function. Raises TypeError for anything else,
    cycles included. The host rebuilds the values (codec.decode_value)."""
    seen = _set()
    tags = {_list: "l", _tuple: "u", _set: "e", _frozenset: "z"}

    def enc(x, depth):
        if depth > 200:
            raise _TypeError("nested deeper than 200")
        t = _type(x)
        if t is _bool:
            return '["?",1]' if x is True else '["?",0]'
        if t is _int:
            return '["i","' + _hex(x) + '"]'
        if t is _float:
            return '["f","' + _fhex(x) + '"]'
        if t is _str:
            return '["s","' + _bhex(_sencode(x, "utf-8", "surrogatepass")) + '"]'
        if x is None:
            return '["n"]'
        if t is _complex:
            return '["c","' + _fhex(x.real) + '","' + _fhex(x.imag) + '"]'
        if t is _bytes:
            return '["b","' + _bhex(x) + '"]'
        if t is _list or t is _tuple or t is _dict or t is _set or t is _frozenset:
            key = _id(x)
            if key in seen:
                raise _TypeError("a container that contains itself")
            seen.add(key)
            if t is _dict:
                out = '["d",[' + _join(["[" + enc(k, depth + 1) + "," + enc(v, depth + 1) + "]"
                                        for k, v in _items(x)]) + "]]"
            else:
                out = '["' + tags[t] + '",[' + _join([enc(v, depth + 1) for v in x]) + "]]"
            seen.discard(key)
            return out
        raise _TypeError("a value of type " + _tname(t) + " is not plain data")

    return enc(value, 0)


def _error_line(exc, _type=type, _str=str, _tname=type.__dict__["__name__"].__get__):
    """`Type: message` of an exception. The message comes from the program's own __str__, so it is only data:
    the status is chosen by the exception's exact type, never by this text."""
    name = _tname(_type(exc))
    try:
        text = _str(exc)
        if _type(text) is not _str:
            text = ""
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not reach the epilogue
        text = "<unprintable>"
    text = text.strip().splitlines()[-1] if text.strip() else ""
    return f"{name}: {text}"[:2000] if text else name


def run_job(job, nonce, result_fd=RESULT_FD, _stdout=None):
    """Run one job in this process, write its ONE result frame to `result_fd`, and exit at once.

    The job holds model-written text only: a program, `calls` evaluated in its namespace, and `literals` (a
    predicted output) evaluated in a namespace of the restricted-expression constructors. No gold value is ever
    part of a job, so whatever a program reaches in this process (frames, the nonce, the epilogue) can change
    nothing but its own values. Everything the epilogue uses is bound before the program runs.
    """
    import builtins

    plain = {name: getattr(builtins, name) for name in _PLAIN_NAMES}
    write, exit_now, enc, err_line = os.write, os._exit, encode, _error_line
    compile_, exec_, eval_, join, hexs = compile, exec, eval, ",".join, bytes.hex
    str_encode, magic, fd, mem_error = str.encode, MAGIC, result_fd, MemoryError
    stdout = _stdout or sys.stdout
    status, values, error = "ok", [], ""
    try:
        scope = {"__name__": "__main__", "__builtins__": builtins}
        exec_(compile_(job.get("program", ""), "<program>", "exec"), scope)
        for expr in job.get("calls", ()):
            values.append(eval_(compile_(expr, "<call>", "eval"), scope))
        for expr in job.get("literals", ()):
            values.append(eval_(compile_(expr, "<literal>", "eval"), {"__builtins__": {}, **plain}))
        try:
            values = [enc(v) for v in values]
        except (TypeError, RecursionError) as e:
            status, values, error = "error", [], "UnsupportedOutput: " + err_line(e)
    except mem_error:
        status, values, error = "memory", [], "MemoryError"
    except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt included: all are the program's
        status, values, error = "error", [], err_line(e)
    try:
        stdout.flush()
    except BaseException:  # noqa: BLE001
        pass
    payload = ('{"status":"' + status + '","values":[' + join(values) + '],"error":"'
               + hexs(str_encode(error, "utf-8", "surrogatepass")) + '"}').encode()
    frame = magic + nonce + b"%012d" % len(payload) + payload
    while frame:
        frame = frame[write(fd, frame):]
    exit_now(0)


# ---------------------------------------------------------------------------------------------- host protocol
def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _recv_raw(fd):
    return _read_exact(fd, int.from_bytes(_read_exact(fd, 4), "big"))


def _send(fd, msg):
    data = json.dumps(msg).encode()
    _write_all(fd, len(data).to_bytes(4, "big") + data)


class _Filter:
    """A compiled seccomp BPF program (exported by the host) loaded with one prctl."""

    def __init__(self, bpf):
        import ctypes

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._buf = ctypes.create_string_buffer(bpf, len(bpf))
        self._prog = SockFprog(len(bpf) // 8, ctypes.cast(self._buf, ctypes.c_void_p))
        # resolve and call prctl once here, so no child pays for the symbol lookup or libffi set-up
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        self._prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
        self._prctl.restype = ctypes.c_int
        self._prctl(39, 0, None, 0, 0)  # PR_GET_NO_NEW_PRIVS: a harmless warm-up call
        self._ref = ctypes.addressof(self._prog)
        self._get_errno = ctypes.get_errno

    def load(self):
        prctl = self._prctl
        if prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(self._get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if prctl(22, 2, self._ref, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(self._get_errno(), "prctl(PR_SET_SECCOMP) failed")


# -------------------------------------------------------------------------------------------------- job child
def _limits(job, cfg):
    cpu = int(job["timeout_s"]) + 1
    mem = int(job["memory_mb"]) * 1024 * 1024
    setr = resource.setrlimit
    setr(resource.RLIMIT_CPU, (cpu, cpu + 1))
    setr(resource.RLIMIT_AS, (mem, mem))
    setr(resource.RLIMIT_FSIZE, (cfg["fsize"], cfg["fsize"]))
    setr(resource.RLIMIT_NOFILE, (cfg["nofile"], cfg["nofile"]))
    setr(resource.RLIMIT_CORE, (0, 0))
    setr(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))


def _child(cfg, no_fork, job_r, out_w, res_w):
    """In a child forked ahead of its job: wire fds, wait for this job (and only this job) on its pipe, enter its
    directory, drop to the worker's uid, set limits, refuse forks where the kernel does not enforce
    RLIMIT_NPROC, run the job."""
    try:
        os.dup2(job_r, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(res_w, RESULT_FD)
        os.closerange(RESULT_FD + 1, 65536)
        jobdir, _, raw = _read_all(0).partition(b"\n")
        job = json.loads(raw)
        nonce = bytes.fromhex(job.pop("nonce"))
        os.chdir(jobdir)
        uid = cfg["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        _limits(job, cfg)
        if no_fork is not None:
            no_fork.load()
    except BaseException as e:  # noqa: BLE001 - any set-up failure is the sandbox's, reported as such
        try:
            os.write(2, f"sandbox set-up failed: {e}".encode())
        finally:
            os._exit(SETUP_FAILED)
    run_job(job, nonce)


def _fork_ahead(cfg, no_fork):
    """A child waiting for its job: (pid, [job_w, out_r, res_r]), or the error that prevented it."""
    opened = []
    try:
        for _ in range(3):
            opened += os.pipe()
        pid = os.fork()
    except OSError as e:
        for fd in opened:
            os.close(fd)
        return str(e)
    job_r, job_w, out_r, out_w, res_r, res_w = opened
    if pid == 0:
        _child(cfg, no_fork, job_r, out_w, res_w)
    for fd in (job_r, out_w, res_w):
        os.close(fd)
    return pid, [job_w, out_r, res_r]


def _fork_server(sock, cfg, no_fork):
    """The fork server's loop. It keeps one child forked ahead; on each request it hands the zygote that child's
    pid and the other ends of its three pipes, forks the next one while the job runs, and reports the job's wait
    status when it has reaped it. It never reads a job, a result or anything a job wrote."""
    import socket

    ready = _fork_ahead(cfg, no_fork)
    while True:
        try:
            request = sock.recv(16)
        except OSError:
            os._exit(0)
        if not request:
            os._exit(0)
        if isinstance(ready, str):
            sock.send(b"E" + ready.encode()[:1000])
            ready = _fork_ahead(cfg, no_fork)
            continue
        pid, fds = ready
        socket.send_fds(sock, [b"P%d" % pid], fds)
        for fd in fds:
            os.close(fd)
        ready = _fork_ahead(cfg, no_fork)
        _, wstatus, usage = os.wait4(pid, 0)
        sock.send(b"X%d %.6f" % (wstatus, usage.ru_utime + usage.ru_stime))


# ---------------------------------------------------------------------------------------------------- zygote
def _drain(fd, chunks, budget):
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return True, budget
    if not data:
        return False, budget
    chunks.append(data)
    return True, budget - len(data)


def _exit_status(sock):
    """(wait status, CPU seconds the job used: user + system, from wait4) of the job the fork server reaped."""
    msg = sock.recv(64)
    if not msg.startswith(b"X"):
        raise EOFError("the fork server is gone")
    status, _, cpu = msg[1:].partition(b" ")
    return int(status), float(cpu or 0.0)


def _supervise(pid, out_r, res_r, sock, deadline, limit, kill):
    """Collect the child's output and result until the fork server reports it reaped; kill it at the wall-clock
    deadline or when it writes more than `limit` bytes. A job that wrote a result and keeps running is still
    killed."""
    import select

    out, res = [], []
    open_fds = {out_r: out, res_r: res}
    budget, timed_out, exceeded, wstatus, cpu = limit, False, False, None, 0.0
    poller = select.poll()
    for fd in (out_r, res_r, sock.fileno()):
        poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = wstatus is None
            break
        for fd, _ in poller.poll(left * 1000):
            if fd == sock.fileno():
                wstatus, cpu = _exit_status(sock)
                poller.unregister(fd)
                continue
            alive, budget = _drain(fd, open_fds[fd], budget)
            if not alive:
                poller.unregister(fd)
                del open_fds[fd]
        if budget < 0:
            exceeded = True
            break
        if wstatus is not None:
            # the child is gone and held the only write ends: what is left in the pipes is readable now
            for fd, chunks in open_fds.items():
                while budget >= 0:
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    chunks.append(data)
                    budget -= len(data)
            exceeded = budget < 0
            break
    if wstatus is None:
        kill(pid)
        wstatus, cpu = _exit_status(sock)
    return {"exit": os.waitstatus_to_exitcode(wstatus), "cpu_seconds": cpu, "timed_out": timed_out,
            "output_exceeded": exceeded,
            "stdout": b"".join(out)[:limit].decode("latin-1"), "result": b"".join(res)[:limit].decode("latin-1")}


def _killer():
    """How the zygote kills a job, chosen at start-up: through a pidfd where the kernel has them (the seccomp
    filter then denies `kill` to everyone in the jail), else with kill(2) (gVisor; its filter allows `kill` and
    each job adds one that denies it)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        def kill(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        return kill, "kill"

    def kill_pidfd(pid):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(fd)

    return kill_pidfd, "pidfd"


def remove_tree(path, beat=None):
    """Delete a directory tree and return how many entries it held (`path` itself not counted). Linear in what the
    tree holds: each directory is listed once, its files unlinked and its subdirectories' names kept, an empty
    subdirectory removed at once and a full one entered (listing a parent again after each subdirectory made a
    directory of 4,000 subdirectories take 16 s). No recursion and no long paths: a job may leave a tree deeper
    than PATH_MAX, so every step is relative to one open directory (descending by name, climbing by `..`), and
    only one directory is open at a time. No shutil (importing it maps the compression libraries, and every
    mapping makes each fork slower). `beat(count)`, when given, is called after every entry listed and every
    directory removed, on the way down and on the way back up (it sends at most once a second): the zygote tells
    the host it is still at work however slow each step is (gVisor's ptrace platform on a loaded machine)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(path, flags)
    names = []  # the directories entered below `path`
    count = 0
    tick = beat or (lambda _count: None)

    def scan(fd):
        nonlocal count
        subdirs = []
        with os.scandir(fd) as entries:
            for entry in entries:
                count += 1
                tick(count)
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
        return subdirs

    pending = [scan(fd)]  # per open level, the subdirectories still to remove
    try:
        while True:
            if pending[-1]:
                name = pending[-1].pop()
                tick(count)
                try:
                    os.rmdir(name, dir_fd=fd)
                    continue
                except OSError:
                    pass
                child = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(name)
                pending.append(scan(fd))
                continue
            pending.pop()
            if not names:
                break
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
            tick(count)
    finally:
        os.close(fd)
    os.rmdir(path)
    return count


def _job_dir(cfg, counter):
    """A new private directory per job, owned by the worker's uid."""
    path = os.path.join(cfg["tmp"], f"job{counter}")
    os.mkdir(path, 0o700)
    if cfg["uid"] is not None:
        os.chown(path, cfg["uid"], cfg["uid"])
    return path


def _discard_dir(path, beat=None):
    """Remove a finished job's directory; returns how many entries the job left there. What cannot be removed is
    handed to root with mode 000, so no later job (same uid) can reach it."""
    try:
        os.rmdir(path)  # the usual case: the job left nothing behind
        return 0
    except OSError:
        pass
    try:
        return remove_tree(path, beat)
    except OSError:
        try:
            os.chown(path, 0, 0)
            os.chmod(path, 0)
        except OSError:
            pass
    return 0


_JOBS_RUN = [0]


def _run_one(raw, cfg, sock, kill, beat=None):
    """One job: its directory, a child from the fork server, the job's message down the child's pipe, then
    supervision, then its directory removed (`beat` tells the host, once a second, that a long removal goes on).
    `raw` goes to the child as it came; the zygote reads only the limits from it."""
    import socket

    job = json.loads(raw)
    _JOBS_RUN[0] += 1
    jobdir = _job_dir(cfg, _JOBS_RUN[0])
    start = time.monotonic()
    fds = []
    try:
        sock.send(b"F")
        msg, fds, _, _ = socket.recv_fds(sock, 4096, 3)
        if not msg.startswith(b"P") or len(fds) != 3:
            if msg.startswith(b"E"):
                return {"id": job.get("id", ""), "seconds": time.monotonic() - start,
                        "sandbox_error": "cannot fork the job: " + msg[1:].decode("utf-8", "replace")}
            raise EOFError("the fork server is gone")
        pid = int(msg[1:])
        job_w, out_r, res_r = fds
        try:
            _write_all(job_w, jobdir.encode() + b"\n" + raw)
        except BrokenPipeError:
            pass  # the child's set-up failed before it read its job; its exit code says so
        os.close(job_w)
        fds = [out_r, res_r]
        os.set_blocking(out_r, False)
        os.set_blocking(res_r, False)
        report = _supervise(pid, out_r, res_r, sock, start + job["timeout_s"], job["output_bytes"], kill)
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        left = _discard_dir(jobdir, beat)
    if left > cfg.get("fs_entries", left):
        report["fs_entries"] = left
    report["id"] = job.get("id", "")
    report["seconds"] = time.monotonic() - start
    return report


def _warm_up(preload=()):
    """The first compile() and exec after fork are slow when nothing was compiled before: do it here once.
    Import the modules programs commonly use, so no child pays for importing them (typing alone costs ~3 ms)."""
    for name in preload:
        __import__(name)
    scope = {}
    exec(compile("def f(a, b=2):\n    return [a * b for _ in range(3)]\n", "<warm>", "exec"), scope)
    encode(eval(compile("f(1)", "<warm>", "eval"), scope))


def _close_shared_dirs():
    """Without a jail of its own (inside a gVisor container) the zygote shares the container's file system with its
    jobs: take the world-write bit off every writable mount's root and the usual scratch directories (/tmp,
    /dev/shm, ...), so no job can leave a file there for a later job. The zygote runs as root and needs none. The
    host asks for this only where the file system is the sandbox's own (its gVisor sandbox, or the container whose
    pid 1 is the service), never on a shared host."""
    places = {"/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run", "/run/lock", "/home"}
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 3 and "rw" in fields[3].split(","):
                    places.add(fields[1].replace("\\040", " "))
    except OSError:
        pass
    for path in sorted(places):
        try:
            mode = os.stat(path).st_mode
            if mode & 0o002:
                os.chmod(path, mode & 0o7755)
        except OSError:
            pass


def _enter_root(root):
    """sandbox.isolation=gvisor in a container: chroot into the runtime root the host built for the jobs
    (jail.build_runtime_root: the interpreter's files and nothing else, an empty /proc), before any filter (the
    jail filter denies chroot) and before the fork server, so every job starts inside it. Jobs are never root and
    hold no capability, so they cannot chroot again to leave it; no fd of the zygote's reaches a job."""
    try:
        os.chroot(root)
    except PermissionError as e:
        raise SystemExit(f"chroot into the runtime root {root} failed ({e}): the sandbox needs the capability "
                         "SYS_CHROOT (jail.CONTAINER_CAPABILITIES; the deployment files grant it)") from None
    os.chdir("/")


def zygote_main():
    import gc
    import socket

    # the loader has found libpython through it; jobs see only the environment jail.clean_env() promises
    os.environ.pop("LD_LIBRARY_PATH", None)
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    cfg = json.loads(_recv_raw(proto_in))
    if cfg.get("close_shared"):
        _close_shared_dirs()
    if cfg.get("root"):
        _enter_root(cfg["root"])
    jail_filter = _Filter(bytes.fromhex(cfg["seccomp"])) if cfg.get("seccomp") else None
    no_fork = _Filter(bytes.fromhex(cfg["no_fork"])) if cfg.get("no_fork") else None
    _warm_up(cfg.get("preload", ()))
    kill, kill_method = _killer()
    sock, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # before the filter bans socket
    if jail_filter is not None:
        jail_filter.load()  # on the zygote itself: the fork server and every job inherit it
    gc.freeze()  # children never scan (and so never copy-on-write) the zygote's own objects
    server = os.fork()
    if server == 0:
        os.close(proto_in)
        os.close(proto_out)
        sock.close()
        _fork_server(server_end, cfg, no_fork)
    server_end.close()
    _send(proto_out, {"ready": True, "pid": os.getpid(), "kill": kill_method})
    last_beat = [time.monotonic()]

    def beat(count):
        # removing what a job left is linear in it and always progresses: the host waits while it hears this
        if time.monotonic() - last_beat[0] >= 1.0:
            last_beat[0] = time.monotonic()
            _send(proto_out, {"cleaning": count})

    while True:
        try:
            raw = _recv_raw(proto_in)
        except EOFError:
            return
        _send(proto_out, _run_one(raw, cfg, sock, kill, beat))


# ------------------------------------------------------------------------------------------ unshare: the root
def build_root_main(spec_text):
    """`unshare` isolation, run as root in new mount, pid, net, ipc and uts namespaces: build the jail's root on
    a tmpfs (the same tree bwrap builds: /usr, the /lib links, the interpreter at /sandbox/python, this file at
    /sandbox/jail_runtime.py, a few devices, a private /tmp, /proc), pivot into it, make it read-only, and exec
    the zygote from the interpreter's path inside the jail, so nothing in the job's process names a host path."""
    import ctypes

    spec = json.loads(spec_text)
    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec, ms_private = (
        1, 2, 4, 8, 32, 4096, 16384, 1 << 18)

    def mount(src, dst, fstype, flags, data=None):
        if libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags,
                      data and data.encode()) != 0:
            raise OSError(ctypes.get_errno(), f"mount {src!r} on {dst!r} failed")

    def bind(src, dst, read_only=True):
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o644))
        mount(src, dst, None, ms_bind | ms_rec)
        if read_only:
            mount(None, dst, None, ms_bind | ms_remount | ms_rdonly | ms_nosuid | ms_nodev)

    mount(None, "/", None, ms_rec | ms_private)
    root = spec["stage"]  # an existing directory, covered by the new root's tmpfs in this namespace only
    mount("tmpfs", root, "tmpfs", ms_nosuid | ms_nodev, "size=4m,mode=0755")
    for src, dst in spec["binds"]:
        bind(src, root + dst)
    for path, target in spec["links"]:
        os.symlink(target, root + path)
    for dev in ("null", "zero", "full", "random", "urandom"):
        bind("/dev/" + dev, root + "/dev/" + dev, read_only=False)
    if spec.get("ld_cache"):
        os.makedirs(root + "/etc", exist_ok=True)
        with open("/etc/ld.so.cache", "rb") as src, open(root + "/etc/ld.so.cache", "wb") as dst:
            dst.write(src.read())
    for sub in ("proc", "tmp", ".old"):
        os.makedirs(root + "/" + sub, exist_ok=True)
    mount("proc", root + "/proc", "proc", ms_nosuid | ms_nodev | ms_noexec)
    mount("tmpfs", root + "/tmp", "tmpfs", ms_nosuid | ms_nodev, f"size={spec['tmp_mb']}m,mode=0755")
    pivot_root = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
    if pivot_root is None or libc.syscall(pivot_root, root.encode(), (root + "/.old").encode()) != 0:
        raise OSError(ctypes.get_errno(), "pivot_root failed")
    os.chdir("/")
    if libc.umount2(b"/.old", 2) != 0:  # MNT_DETACH
        raise OSError(ctypes.get_errno(), "umount of the old root failed")
    os.rmdir("/.old")
    mount("tmpfs", "/", "tmpfs", ms_remount | ms_rdonly | ms_nosuid | ms_nodev)
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


# ------------------------------------------------------------------------------------------------ one process
def one_main():
    """`subprocess` backend: one job from stdin; the result frame on the original stdout, the program's own
    output moved to stderr (limits were set by the host before exec)."""
    job = json.loads(sys.stdin.buffer.read())
    nonce = bytes.fromhex(job.pop("nonce"))
    result_fd = os.dup(1)
    os.dup2(2, 1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    run_job(job, nonce, result_fd)


if __name__ == "__main__":
    if sys.argv[1] == "build-root":
        build_root_main(sys.argv[2])
    else:
        {"zygote": zygote_main, "one": one_main}[sys.argv[1]]()
