"""Every kind of state a job's process can create, as a pair of program fragments: `put(s)` tries to leave the small
integer `s` behind by that kind alone (and by every route the kind offers: its own process, its parent, its
process group, its uid), and `get()` is what a later job on the same worker would run to find it (None when it
finds nothing). A kind is closed when no `get` ever finds what a `put` left.

The sandbox's start-up check (startup_check.check_state) runs one job that puts a secret by every kind and a second job
that looks for each (state_programs.py makes those programs and the pairs of the corpus): a worker whose second job finds anything does not start. The cross-job corpus
(tests/sandbox/cross_job_corpus.py) runs the same kinds as pairs through the production validate_proposals /
check_answers. docs/sandbox.md has the table: each kind, how it is closed in each configuration, and its test.

Fragments are stdlib-only Python, methods of one class (a code_f program has exactly one top-level def) that also
holds the helpers they share (K.bound, K.readable: state_programs.HELPERS), and never raise: any failure of `put` is swallowed, and `get` returns None on any failure. x86_64 system-call numbers
(gVisor runs only there and on arm64; elsewhere the ctypes calls fail and the kind reads as closed by
construction, not by this check).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    what: str  # the state, in words
    put: str  # body of `def put(s)`, indented by 4
    get: str  # body of `def get()`, indented by 4
    secrets: tuple[int, ...] = tuple(range(2, 10))  # the values `get` tells apart


def _k(name: str, what: str, put: str, get: str, secrets: tuple[int, ...] = tuple(range(2, 10))) -> Kind:
    return Kind(name, what, put.strip("\n"), get.strip("\n"), secrets)


KINDS: tuple[Kind, ...] = (
    _k("tmp_file", "a file in a scratch directory outside the job's own (/tmp, /var/tmp, $HOME, the job "
       "directory's parent, /run, /dev/mqueue)", '''
    for place in ('/tmp', '/var/tmp', os.environ.get('HOME', '/tmp'), '..', '/run', '/dev/mqueue', '/'):
        try:
            with open(os.path.join(place, 'xj%d' % s), 'w') as out:
                out.write('x')
        except OSError:
            pass
''', '''
    for place in ('/tmp', '/var/tmp', os.environ.get('HOME', '/tmp'), '..', '/run', '/dev/mqueue', '/'):
        try:
            for name in os.listdir(place):
                if name.startswith('xj') and name[2:].isdigit() and int(name[2:]) in ALPHABET:
                    return int(name[2:])
        except OSError:
            pass
    return None
'''),
    _k("dev_shm", "POSIX shared memory (shm_open, a file in /dev/shm)", '''
    import _posixshmem
    fd = _posixshmem.shm_open('/xj%d' % s, os.O_CREAT | os.O_RDWR, 0o666)
    os.write(fd, b'x')
''', '''
    for name in os.listdir('/dev/shm'):
        if name.startswith('xj') and name[2:].isdigit():
            return int(name[2:])
    return None
'''),
    _k("job_dir_leftovers", "what a job leaves in its own directory (bytes, an unreadable subdirectory, a deep "
       "tree), seen in the space /tmp has left", '''
    with open('blob', 'wb') as out:
        out.write(b'x' * (s * 65536))
    os.makedirs('locked/inner')
    with open('locked/inner/f', 'w') as out:
        out.write('x')
    os.chmod('locked/inner', 0)
    os.chmod('locked', 0)
    fd = os.open('.', os.O_RDONLY)
    for _ in range(200):
        os.mkdir('d', dir_fd=fd)
        sub = os.open('d', os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = sub
''', '''
    st = os.statvfs('/tmp')
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    v = round(used / 65536)
    return v if v in ALPHABET else None
'''),
    _k("sysv_shm", "a System V shared-memory segment (shmget)", '''
    LIBC.shmat.restype = ctypes.c_void_p
    sid = LIBC.shmget(0x584A0001, 4096, 0o1666)
    addr = LIBC.shmat(sid, None, 0)
    if sid >= 0 and addr not in (None, ctypes.c_void_p(-1).value):
        ctypes.memmove(addr, bytes([s]), 1)
''', '''
    LIBC.shmat.restype = ctypes.c_void_p
    sid = LIBC.shmget(0x584A0001, 0, 0)
    if sid < 0:
        return None
    addr = LIBC.shmat(sid, None, 0o10000)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    v = ctypes.string_at(addr, 1)[0]
    return v if v in ALPHABET else None
'''),
    _k("sysv_sem", "a System V semaphore set (semget)", '''
    sid = LIBC.semget(0x584A0002, 1, 0o1666)
    LIBC.semctl(sid, 0, 16, s)
''', '''
    sid = LIBC.semget(0x584A0002, 1, 0)
    v = LIBC.semctl(sid, 0, 12) if sid >= 0 else -1
    return v if v in ALPHABET else None
'''),
    _k("sysv_msg", "a System V message queue (msgget)", '''
    qid = LIBC.msgget(0x584A0003, 0o1666)
    msg = ctypes.create_string_buffer(struct.pack('l', 1) + bytes([s]))
    LIBC.msgsnd(qid, msg, 1, 0o4000)
''', '''
    qid = LIBC.msgget(0x584A0003, 0)
    if qid < 0:
        return None
    buf = ctypes.create_string_buffer(64)
    n = LIBC.msgrcv(qid, buf, 8, ctypes.c_long(0), 0o4000)
    return buf.raw[8] if n >= 1 and buf.raw[8] in ALPHABET else None
'''),
    _k("posix_mqueue", "a POSIX message queue (mq_open)", '''
    mqd = LIBC.syscall(240, b'xjq', 0o102, 0o666, None)
    LIBC.syscall(242, mqd, bytes([s]), 1, 0, None)
''', '''
    mqd = LIBC.syscall(240, b'xjq', 0o4000, 0, None)
    if mqd < 0:
        return None
    buf = ctypes.create_string_buffer(1 << 16)
    n = LIBC.syscall(243, mqd, buf, 1 << 16, None, None)
    return buf.raw[0] if n >= 1 and buf.raw[0] in ALPHABET else None
'''),
    _k("abstract_socket", "an abstract Unix socket name", '''
    K.keep = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    K.keep.bind('\\0xj%d' % s)
    K.keep.listen()
''', '''
    for v in ALPHABET:
        if K.bound(socket.AF_UNIX, socket.SOCK_STREAM, '\\0xj%d' % v):
            return v
    return None
'''),
    _k("udp_port", "a UDP socket bound on loopback", '''
    K.keep = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    K.keep.bind(('127.0.0.1', 41700 + s))
''', '''
    for v in ALPHABET:
        if K.bound(socket.AF_INET, socket.SOCK_DGRAM, ('127.0.0.1', 41700 + v)):
            return v
    return None
'''),
    _k("tcp_listen", "a TCP socket listening on loopback", '''
    K.keep = socket.socket()
    K.keep.bind(('127.0.0.1', 41800 + s))
    K.keep.listen()
''', '''
    for v in ALPHABET:
        probe = socket.socket()
        try:
            probe.connect(('127.0.0.1', 41800 + v))
            return v
        except OSError:
            pass
        finally:
            probe.close()
    return None
'''),
    _k("tcp_time_wait", "a TCP connection left in TIME_WAIT (outlives every process; blocks a later bind)", '''
    server = socket.socket()
    server.bind(('127.0.0.1', 41900 + s))
    server.listen()
    client = socket.create_connection(('127.0.0.1', 41900 + s))
    conn, _ = server.accept()
    conn.close()
    client.close()
    server.close()
''', '''
    for v in ALPHABET:
        if K.bound(socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', 41900 + v)):
            return v
    return None
'''),
    _k("keyring", "a key in a kernel keyring (the uid's user and user-session keyrings, the session keyring)", '''
    for ring in (-4, -5, -3):
        LIBC.syscall(248, b'user', b'xj', bytes([s]), 1, ctypes.c_long(ring))
''', '''
    buf = ctypes.create_string_buffer(16)
    for ring in (-4, -5, -3):
        key = LIBC.syscall(250, 10, ctypes.c_long(ring), b'user', b'xj', 0)
        if key > 0 and LIBC.syscall(250, 11, key, buf, 16) >= 1 and buf.raw[0] in ALPHABET:
            return buf.raw[0]
    return None
'''),
    _k("itimer", "an interval timer (alarm, setitimer)", '''
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, s * 100.0)
''', '''
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    v = round(left / 100.0)
    return v if left > 0 and v in ALPHABET else None
'''),
    _k("posix_timer", "POSIX timers (timer_create)", '''
    for _ in range(s):
        timer = ctypes.c_void_p()
        LIBC.timer_create(1, None, ctypes.byref(timer))
''', '''
    with open('/proc/self/timers') as timers:
        v = sum(1 for line in timers if line.startswith('ID:'))
    return v if v in ALPHABET else None
'''),
    _k("pending_signal", "a pending signal (to itself, its parent, its process group, every process)", '''
    sig = signal.SIGRTMIN + s
    signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
    for target in (os.getpid(), os.getppid(), 0, -1):
        try:
            os.kill(target, sig)
        except OSError:
            pass
''', '''
    for sig in signal.sigpending():
        v = int(sig) - signal.SIGRTMIN
        if v in ALPHABET:
            return v
    return None
'''),
    _k("daemon", "a process left running (a double fork)", '''
    if os.fork() == 0:
        try:
            if os.fork() == 0:
                LIBC.prctl(15, b'xj%d' % s, 0, 0, 0)
                time.sleep(60)
        finally:
            os._exit(0)
    os.wait()
''', '''
    for _, name in K.readable(os.listdir('/proc'), lambda pid: open('/proc/%s/comm' % pid).read().strip()):
        if name.startswith('xj') and name[2:].isdigit():
            return int(name[2:])
    return None
'''),
    _k("thread", "a thread of the job (outliving its result)", '''
    def linger():
        LIBC.prctl(15, b'xt%d' % s, 0, 0, 0)
        time.sleep(60)
    threading.Thread(target=linger, daemon=True).start()
''', '''
    for pid, tasks in K.readable(os.listdir('/proc'), lambda pid: os.listdir('/proc/%s/task' % pid)):
        for _, name in K.readable(tasks, lambda tid: open('/proc/%s/task/%s/comm' % (pid, tid)).read().strip()):
            if name.startswith('xt') and name[2:].isdigit():
                return int(name[2:])
    return None
'''),
    _k("environment", "an environment variable (os.environ, putenv)", '''
    os.environ['XJ'] = str(s)
    os.putenv('XJ', str(s))
''', '''
    v = os.environ.get('XJ') or ''
    return int(v) if v.isdigit() else None
'''),
    _k("cwd", "the working directory", '''
    os.mkdir('xj%d' % s)
    os.chdir('xj%d' % s)
''', '''
    name = os.path.basename(os.getcwd())
    return int(name[2:]) if name.startswith('xj') and name[2:].isdigit() else None
'''),
    _k("nice", "scheduling priority (its own, its parent's, its process group's, its uid's)", '''
    for which, who in ((os.PRIO_PROCESS, os.getppid()), (os.PRIO_PGRP, 0), (os.PRIO_USER, os.getuid()),
                       (os.PRIO_PROCESS, 1), (os.PRIO_PROCESS, 0)):
        try:
            os.setpriority(which, who, s)
        except OSError:
            pass
''', '''
    v = os.getpriority(os.PRIO_PROCESS, 0)
    return v if v in ALPHABET else None
'''),
    _k("affinity", "CPU affinity (its own, its parent's, every visible process's)", '''
    pids = [0, os.getppid(), 1] + [int(p) for p in os.listdir('/proc') if p.isdigit()]
    for pid in pids:
        try:
            os.sched_setaffinity(pid, {s % os.cpu_count()})
        except OSError:
            pass
''', '''
    mask = os.sched_getaffinity(0)
    if os.cpu_count() > 1 and len(mask) == 1:
        v = min(mask)
        for a in ALPHABET:
            if a % os.cpu_count() == v:
                return a
    return None
''', secrets=(2, 3)),
    _k("rlimit", "resource limits (its parent's, every visible process's, through prlimit)", '''
    pids = [os.getppid(), 1] + [int(p) for p in os.listdir('/proc') if p.isdigit()]
    for pid in pids:
        try:
            hard = resource.prlimit(pid, resource.RLIMIT_MSGQUEUE)[1]
            resource.prlimit(pid, resource.RLIMIT_MSGQUEUE, (s * 4096, hard))
        except (OSError, ValueError):
            pass
''', '''
    soft = resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0]
    v = soft // 4096 if soft > 0 and soft % 4096 == 0 else -1
    return v if v in ALPHABET else None
'''),
    _k("memfd", "an anonymous file (memfd_create)", '''
    K.keep = os.memfd_create('xj%d' % s)
    os.write(K.keep, b'x')
''', '''
    for pid, fds in K.readable(os.listdir('/proc'), lambda pid: os.listdir('/proc/%s/fd' % pid)):
        for _, link in K.readable(fds, lambda fd: os.readlink('/proc/%s/fd/%s' % (pid, fd))):
            if link.startswith('/memfd:xj') and link[9:].split()[0].isdigit():
                return int(link[9:].split()[0])
    return None
'''),
    _k("file_lock", "a lock on a file every job can open (flock on the standard library)", '''
    path = os.path.join(os.path.dirname(os.__file__), ('abc.py', 'ast.py', 'bisect.py', 'calendar.py', 'cmd.py',
                        'code.py', 'copy.py', 'csv.py', 'dis.py', 'enum.py')[s])
    K.keep = os.open(path, os.O_RDONLY)
    fcntl.flock(K.keep, fcntl.LOCK_EX)
''', '''
    for v in ALPHABET:
        path = os.path.join(os.path.dirname(os.__file__), ('abc.py', 'ast.py', 'bisect.py', 'calendar.py',
                            'cmd.py', 'code.py', 'copy.py', 'csv.py', 'dis.py', 'enum.py')[v])
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return v
        finally:
            os.close(fd)
    return None
'''),
)
