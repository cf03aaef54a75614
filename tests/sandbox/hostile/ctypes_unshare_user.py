# ruff: noqa  (a hostile program for the sandbox, kept as written)
# a new user namespace
# expect: ok
import ctypes
if ctypes.CDLL(None).unshare(0x10000000) == 0:
    print('ESCAPED')
