# ruff: noqa  (a hostile program for the sandbox, kept as written)
# raw clone(2) with CLONE_VM | CLONE_THREAD, as a thread library would: refused by the filter (EPERM)
# expect: ok
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
SYS_clone = 56
flags = 0x100 | 0x800 | 0x10000 | 0x200 | 0x400  # CLONE_VM | CLONE_SIGHAND | CLONE_THREAD | CLONE_FS | CLONE_FILES
stack = ctypes.create_string_buffer(1 << 16)
r = libc.syscall(SYS_clone, flags, ctypes.addressof(stack) + (1 << 16), 0, 0, 0)
if r >= 0 or ctypes.get_errno() != 1:
    print('ESCAPED clone returned', r, 'errno', ctypes.get_errno())
