# ruff: noqa  (a hostile program for the sandbox, kept as written)
# libc abort()
# expect: killed
import ctypes
ctypes.CDLL(None).abort()
