# ruff: noqa  (a hostile program for the sandbox, kept as written)
# ptrace the zygote
# expect: ok
import ctypes, os
libc = ctypes.CDLL(None)
if libc.ptrace(16, os.getppid(), 0, 0) == 0:
    print('ESCAPED')
