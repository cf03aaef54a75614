# ruff: noqa  (a hostile program for the sandbox, kept as written)
# raw clone(2) into a new user namespace: the seccomp filter itself refuses it (EPERM), whatever the process limit
# expect: ok
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
SYS_clone, CLONE_NEWUSER, SIGCHLD = 56, 0x10000000, 17
r = libc.syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if r == 0:
    os._exit(0)
if r > 0 or ctypes.get_errno() != 1:
    print('ESCAPED clone returned', r, 'errno', ctypes.get_errno())
