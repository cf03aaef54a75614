# ruff: noqa  (a hostile program for the sandbox, kept as written)
# mount a tmpfs
# expect: ok
import ctypes
libc = ctypes.CDLL(None)
if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0:
    print('ESCAPED')
